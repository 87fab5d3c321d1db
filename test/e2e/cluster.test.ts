/**
 * Two real server processes on one PostgreSQL database, as docs/scaling.md runs them: clients
 * send through both and long-poll through one under load, then one process is killed with
 * SIGKILL mid-load. Every acknowledged event survives and is seen once, in order; the jobs the
 * dead process held (senders, bridge, maintenance) are taken over by the other within seconds.
 * Runs the compiled build (`npm test` builds first), on PostgreSQL whichever engine the rest uses.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dropSchemas, TEST_SCHEMA_PREFIX } from '../support/postgres-setup.js';

const ROOT = resolve(import.meta.dirname, '../..');
const BIN = join(ROOT, 'bin/bot-homeserver.js');
const POSTGRES = process.env.BHS_TEST_POSTGRES ?? 'postgres://postgres@127.0.0.1:5432/test';
const schema = `${TEST_SCHEMA_PREFIX}${process.pid}_e2e_cluster`;
const LEASES = ['maintenance', 'federation-sender', 'appservice-sender', 'bridge'];

interface Server {
  child: ChildProcess;
  url: string;
  logs: Array<Record<string, unknown>>;
}

let dir: string;
let config: string;
const running = new Set<ChildProcess>();

beforeAll(() => {
  if (!existsSync(join(ROOT, 'dist/src/main.js'))) throw new Error('build first: npm run build (npm test does it)');
  dir = mkdtempSync(join(tmpdir(), 'bhs-cluster-e2e-'));
  config = join(dir, 'homeserver.yaml');
  writeFileSync(
    config,
    [
      'server_name: cluster.test',
      'listen:',
      '  host: 127.0.0.1',
      '  port: 0',
      'database:',
      `  url: ${POSTGRES}`,
      `  schema: ${schema}`,
      '  pool_size: 4',
      `signing_key_path: ${join(dir, 'signing.key')}`,
      `media_store_path: ${join(dir, 'media')}`,
      'password_hashing:',
      '  memory_cost_kib: 64',
      '  time_cost: 1',
      'ratelimiting_enabled: false',
      'bridge:',
      '  enabled: true',
      'logging:',
      '  level: info',
      '',
    ].join('\n'),
  );
});

afterAll(async () => {
  for (const child of running) child.kill('SIGKILL');
  await dropSchemas(POSTGRES, [schema]);
  rmSync(dir, { recursive: true, force: true });
});

function startServer(): Promise<Server> {
  const child = spawn(process.execPath, [BIN, 'start', '--config', config], { stdio: ['ignore', 'pipe', 'pipe'] });
  running.add(child);
  child.once('exit', () => running.delete(child));
  const logs: Array<Record<string, unknown>> = [];
  return new Promise((resolvePromise, reject) => {
    let stderr = '';
    child.stderr!.on('data', (chunk) => (stderr += chunk));
    child.once('exit', (code) => reject(new Error(`server exited with ${code}: ${stderr}`)));
    createInterface({ input: child.stdout! }).on('line', (line) => {
      const entry = JSON.parse(line) as Record<string, unknown>;
      logs.push(entry);
      if (entry.msg === 'ready' && typeof entry.port === 'number') resolvePromise({ child, url: `http://127.0.0.1:${entry.port}`, logs });
    });
  });
}

function leasesOf(server: Server): string[] {
  return server.logs.filter((entry) => entry.msg === 'took the lease').map((entry) => String(entry.lease));
}

async function until<T>(what: string, check: () => T | undefined | false, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const found = check();
    if (found) return found;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((done) => setTimeout(done, 25));
  }
}

async function call(url: string, token: string | undefined, method: string, path: string, body?: unknown): Promise<Record<string, any>> {
  const res = await fetch(`${url}/_matrix/client/v3${path}`, {
    method,
    headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const answer = (await res.json()) as Record<string, any>;
  if (res.status !== 200) throw new Error(`${method} ${path} → ${res.status} ${JSON.stringify(answer)}`);
  return answer;
}

function createUser(name: string): void {
  const made = spawnSync(process.execPath, [BIN, 'create-user', name, '--password', `pw-${name}`, '--config', config], { encoding: 'utf8' });
  if (made.status !== 0) throw new Error(`create-user ${name}: ${made.stderr}`);
}

async function login(url: string, name: string): Promise<string> {
  return (await call(url, undefined, 'POST', '/login', { type: 'm.login.password', identifier: { type: 'm.id.user', user: name }, password: `pw-${name}` })).access_token as string;
}

describe('two server processes on one PostgreSQL database', () => {
  it('loses no acknowledged event when one is killed mid-load, and the other takes its jobs over', async () => {
    const first = await startServer();
    // The first took every job; the second finds them held.
    await until('the first process to take every lease', () => LEASES.every((lease) => leasesOf(first).includes(lease)));
    const second = await startServer();
    for (const name of ['alice', 'bob', 'carol']) createUser(name);
    const alice = await login(first.url, 'alice');
    const bob = await login(second.url, 'bob');
    const carol = await login(second.url, 'carol');
    const roomId = (await call(first.url, alice, 'POST', '/createRoom', { preset: 'public_chat' })).room_id as string;
    const room = encodeURIComponent(roomId);
    await call(second.url, bob, 'POST', `/join/${room}`, {});
    await call(second.url, carol, 'POST', `/join/${room}`, {});

    // Carol long-polls through the second process the whole time.
    const filter = encodeURIComponent(JSON.stringify({ room: { timeline: { limit: 500 } } }));
    let since = (await call(second.url, carol, 'GET', `/sync?filter=${filter}`)).next_batch as string;
    const seen: string[] = [];
    let following = true;
    const follow = (async () => {
      while (following) {
        const answer = await call(second.url, carol, 'GET', `/sync?filter=${filter}&timeout=1000&since=${since}`);
        since = answer.next_batch as string;
        const timeline = answer.rooms?.join?.[roomId]?.timeline;
        if (timeline?.limited) throw new Error('the timeline skipped events');
        for (const event of timeline?.events ?? []) if (event.type === 'm.room.message') seen.push(event.event_id as string);
      }
    })();

    // Alice sends through the first process, Bob through the second, four at a time each.
    const acknowledged: string[] = [];
    let txn = 0;
    const sender = async (url: string, token: string, label: string, count: number, stopOnError: boolean) => {
      const worker = async () => {
        for (;;) {
          const n = txn++;
          if (n >= count * 2) return;
          try {
            const answer = await call(url, token, 'PUT', `/rooms/${room}/send/m.room.message/${label}-${n}`, { msgtype: 'm.text', body: `${label} ${n}` });
            acknowledged.push(answer.event_id as string);
          } catch (err) {
            if (stopOnError) return;
            throw err;
          }
        }
      };
      await Promise.all([worker(), worker(), worker(), worker()]);
    };
    const alicesLoad = sender(first.url, alice, 'alice', 150, true);
    const bobsLoad = sender(second.url, bob, 'bob', 150, false);
    await until('a hundred acknowledged sends', () => acknowledged.length >= 100);
    first.child.kill('SIGKILL');
    await Promise.all([alicesLoad, bobsLoad]);

    // Every acknowledged event is there, once, and Carol saw each once, in the room's order.
    await until('carol to see every acknowledged event', () => acknowledged.every((id) => seen.includes(id)), 20_000);
    following = false;
    await follow;
    expect(new Set(seen).size).toBe(seen.length);
    const history = await call(second.url, carol, 'GET', `/rooms/${room}/messages?dir=b&limit=1000`);
    const stored = (history.chunk as Array<Record<string, any>>).filter((event) => event.type === 'm.room.message').map((event) => event.event_id as string).reverse();
    expect(new Set(stored).size).toBe(stored.length);
    for (const id of acknowledged) expect(stored).toContain(id);
    expect(seen).toEqual(stored.filter((id) => seen.includes(id)));
    expect(stored.filter((id) => !seen.includes(id))).toEqual([]);

    // The second process took every job over within seconds of the kill.
    await until('the second process to take every lease over', () => LEASES.every((lease) => leasesOf(second).includes(lease)), 5_000);
    // And it goes on serving the first one's users.
    const again = await login(second.url, 'alice');
    await call(second.url, again, 'PUT', `/rooms/${room}/send/m.room.message/after`, { msgtype: 'm.text', body: 'after the kill' });
    second.child.kill('SIGTERM');
    await new Promise((done) => second.child.once('exit', done));
  }, 90_000);
});
