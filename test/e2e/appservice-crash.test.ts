/**
 * An appservice's transactions across a crash of the server (`kill -9`) while the appservice holds
 * one unanswered with more events queued behind it: after the restart that transaction comes
 * again with the same id and the same events, and the queued events come in later transactions,
 * so an appservice that de-duplicates by transaction id (as the Application Service API tells it
 * to) takes each event once. Runs the compiled build (`npm test` builds first).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify as toYaml } from 'yaml';
import { persistentDatabase } from '../support/test-schemas.js';

const ROOT = resolve(import.meta.dirname, '../..');
const BIN = join(ROOT, 'bin/bot-homeserver.js');
const AS_TOKEN = 'crash-as-token-0123456789';
const HS_TOKEN = 'crash-hs-token-0123456789';

let dir: string;
let appservice: Server;
/** Every transaction the server tried, answered or not, in arrival order. */
const attempts: Array<{ txnId: string; eventIds: string[] }> = [];
/** While true, transactions are taken in but never answered (the server is killed meanwhile). */
let holding = true;
const held: ServerResponse[] = [];
const running = new Set<ChildProcess>();

beforeAll(async () => {
  if (!existsSync(join(ROOT, 'dist/bundle/main.mjs'))) throw new Error('build first: npm run build (npm test does it)');
  dir = mkdtempSync(join(tmpdir(), 'bhs-as-crash-'));
  appservice = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const path = decodeURIComponent(req.url!.split('?')[0]!);
      if (req.headers.authorization !== `Bearer ${HS_TOKEN}`) return void res.writeHead(403).end('{"errcode":"M_FORBIDDEN"}');
      if (req.method !== 'PUT' || !path.startsWith('/_matrix/app/v1/transactions/')) return void res.writeHead(404).end('{"errcode":"M_UNRECOGNIZED"}');
      const body = JSON.parse(Buffer.concat(chunks).toString()) as { events: Array<{ event_id: string }> };
      attempts.push({ txnId: path.slice('/_matrix/app/v1/transactions/'.length), eventIds: body.events.map((event) => event.event_id) });
      if (holding) held.push(res);
      else res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((done) => appservice.listen(0, '127.0.0.1', done));
});

afterAll(async () => {
  for (const child of running) child.kill('SIGKILL');
  appservice?.closeAllConnections();
  await new Promise((done) => appservice?.close(done));
  rmSync(dir, { recursive: true, force: true });
});

function writeConfig(): string {
  const registration = join(dir, 'registration.yaml');
  writeFileSync(
    registration,
    toYaml({
      id: 'crash-test',
      url: `http://127.0.0.1:${(appservice.address() as AddressInfo).port}`,
      as_token: AS_TOKEN,
      hs_token: HS_TOKEN,
      sender_localpart: 'crashbot',
      namespaces: { users: [], aliases: [], rooms: [{ exclusive: false, regex: '!.*' }] },
    }),
  );
  const config = join(dir, 'homeserver.yaml');
  writeFileSync(
    config,
    toYaml({
      server_name: 'crash.test',
      listen: { host: '127.0.0.1', port: 0 },
      ...persistentDatabase(join(dir, 'homeserver.db')),
      ratelimiting_enabled: false,
      bridge: { enabled: false },
      app_service_config_files: [registration],
      federation: { min_retry_interval: '20ms', max_retry_interval: '200ms' },
    }),
  );
  return config;
}

function startServer(config: string): Promise<{ child: ChildProcess; url: string }> {
  const child = spawn(process.execPath, [BIN, 'start', '--config', config], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, BOT_HOMESERVER_CONFIG: '' } });
  running.add(child);
  child.once('exit', () => running.delete(child));
  return new Promise((resolvePromise, reject) => {
    let stderr = '';
    child.stderr!.on('data', (chunk) => (stderr += chunk));
    child.once('exit', (code) => reject(new Error(`server exited with ${code}: ${stderr}`)));
    createInterface({ input: child.stdout! }).on('line', (line) => {
      const entry = JSON.parse(line) as { msg?: string; port?: number };
      if (entry.msg === 'ready' && entry.port) resolvePromise({ child, url: `http://127.0.0.1:${entry.port}` });
    });
  });
}

async function until(what: string, check: () => boolean, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((done) => setTimeout(done, 20));
  }
}

/** A client API call as the appservice's sender. */
async function asAppservice(url: string, method: string, path: string, body: unknown): Promise<Record<string, string>> {
  const res = await fetch(`${url}/_matrix/client/v3${path}`, { method, headers: { authorization: `Bearer ${AS_TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const answer = (await res.json()) as Record<string, string>;
  if (res.status !== 200) throw new Error(`${method} ${path} → ${res.status} ${JSON.stringify(answer)}`);
  return answer;
}

describe('an appservice transaction cut off by a crash', () => {
  it('comes again after the restart with the same id and events; what was queued behind it comes after', async () => {
    const config = writeConfig();
    let server = await startServer(config);
    const roomId = (await asAppservice(server.url, 'POST', '/createRoom', { preset: 'public_chat' })).room_id!;
    await until('the first transaction', () => attempts.length > 0);
    const unanswered = attempts[0]!;
    // Acknowledged, so queued in the outbox, behind the transaction the appservice holds.
    const queued: string[] = [];
    for (let i = 0; i < 3; i++) {
      queued.push((await asAppservice(server.url, 'PUT', `/rooms/${encodeURIComponent(roomId)}/send/m.room.message/t${i}`, { msgtype: 'm.text', body: `queued ${i}` })).event_id!);
    }
    expect(attempts).toHaveLength(1);
    const killed = new Promise((done) => server.child.once('exit', done));
    server.child.kill('SIGKILL');
    await killed;
    for (const res of held) res.destroy();

    holding = false;
    server = await startServer(config);
    await until('every queued event', () => queued.every((id) => attempts.some((attempt) => attempt.eventIds.includes(id))));

    // Each transaction id stands for one set of events, whichever attempt carried it.
    const byId = new Map<string, string[]>();
    for (const attempt of attempts) {
      const first = byId.get(attempt.txnId);
      if (first) expect({ txnId: attempt.txnId, eventIds: attempt.eventIds }).toEqual({ txnId: attempt.txnId, eventIds: first });
      else byId.set(attempt.txnId, attempt.eventIds);
    }
    // An appservice that takes each transaction id once sees each event once.
    const taken = [...byId.values()].flat();
    expect(taken.filter((id, i) => taken.indexOf(id) !== i)).toEqual([]);
    expect(attempts.filter((attempt) => attempt.txnId === unanswered.txnId).length).toBeGreaterThanOrEqual(2);
    for (const id of queued) expect(taken).toContain(id);
    expect(taken.filter((id) => queued.includes(id))).toEqual(queued);

    const stopped = new Promise((done) => server.child.once('exit', done));
    server.child.kill('SIGTERM');
    await stopped;
  }, 60_000);
});
