/**
 * `bot-homeserver dev-federation DIR`, as its recipe says to use it: the command writes the files,
 * both servers start from the written configs as processes of their own, and the written example
 * (curl with --cacert) makes a user on each, a room on one that the other joins over federation,
 * and passes a message each way. Runs the compiled build (`npm test` builds first).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../support/ports.js';

const ROOT = resolve(import.meta.dirname, '../..');
const BIN = join(ROOT, 'bin/bot-homeserver.js');
// The script calls `node` and `curl` by name, as a user's shell would.
const env: NodeJS.ProcessEnv = { ...process.env, BOT_HOMESERVER_CONFIG: '', PATH: `${dirname(process.execPath)}${delimiter}${process.env.PATH ?? ''}` };
for (const name of Object.keys(env)) if (name.startsWith('BOT_HOMESERVER_') && name !== 'BOT_HOMESERVER_CONFIG') delete env[name];

let dir: string;
const running = new Set<ChildProcess>();

beforeAll(() => {
  if (!existsSync(join(ROOT, 'dist/bundle/main.mjs'))) throw new Error('build first: npm run build (npm test does it)');
  if (spawnSync('curl', ['--version']).status !== 0) throw new Error('the recipe uses curl: install it');
  dir = mkdtempSync(join(tmpdir(), 'bhs-dev-federation-'));
});
afterAll(() => {
  for (const child of running) child.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

/** Starts a server from a written config; resolves once it logged `ready`. */
function start(config: string): Promise<ChildProcess> {
  const child = spawn(process.execPath, [BIN, 'start', '--config', config], { stdio: ['ignore', 'pipe', 'pipe'], env });
  running.add(child);
  let stderr = '';
  child.stderr!.on('data', (chunk) => (stderr += chunk));
  return new Promise((resolvePromise, reject) => {
    child.once('exit', (code) => reject(new Error(`${config}: exited with ${code}: ${stderr}`)));
    createInterface({ input: child.stdout! }).on('line', (line) => {
      if ((JSON.parse(line) as { msg?: string }).msg === 'ready') resolvePromise(child);
    });
  });
}

/** Stops a server by its process id and waits for it to exit. */
async function stop(child: ChildProcess): Promise<number | null> {
  const exited = new Promise<number | null>((done) => (child.exitCode !== null ? done(child.exitCode) : child.once('exit', (code) => done(code))));
  process.kill(child.pid!, 'SIGTERM');
  const code = await exited;
  running.delete(child);
  return code;
}

describe('bot-homeserver dev-federation', () => {
  it('writes two servers that federate over TLS on this machine, and its example joins them', { timeout: 90_000 }, async () => {
    const target = join(dir, 'two servers'); // a space: every path in the recipe must survive it
    const mainPort = await freePort();
    let botsPort = await freePort();
    while (botsPort === mainPort) botsPort = await freePort();
    const args = [BIN, 'dev-federation', target, '--main-port', String(mainPort), '--bots-port', String(botsPort)];
    const written = spawnSync(process.execPath, args, { encoding: 'utf8', env });
    expect(written.status, written.stderr).toBe(0);
    expect(written.stdout).toContain(`start --config '${join(target, 'main.yaml')}'`);
    expect(written.stdout).toContain(`start --config '${join(target, 'bots.yaml')}'`);
    expect(written.stdout).toContain(`curl --cacert '${join(target, 'ca.pem')}'`);
    expect(readFileSync(join(target, 'README.md'), 'utf8')).toBe(`${written.stdout.trimEnd()}\n`);

    // The certificate names the address the server names are made of, and the CA signed it.
    const ca = new X509Certificate(readFileSync(join(target, 'ca.pem')));
    const cert = new X509Certificate(readFileSync(join(target, 'server.pem')));
    expect(cert.checkIP('127.0.0.1')).toBe('127.0.0.1');
    expect(cert.verify(ca.publicKey)).toBe(true);
    expect(ca.ca).toBe(true);
    expect(statSync(join(target, 'server.key')).mode & 0o077).toBe(0);

    // Nothing is ever overwritten.
    const again = spawnSync(process.execPath, args, { encoding: 'utf8', env });
    expect(again.status).toBe(1);
    expect(again.stderr).toBe(`bot-homeserver: ${target} is not empty; give a new folder (nothing is overwritten)\n`);

    const servers = await Promise.all([start(join(target, 'main.yaml')), start(join(target, 'bots.yaml'))]);
    try {
      const example = await new Promise<{ code: number | null; output: string }>((resolvePromise) => {
        const child = spawn('sh', [join(target, 'try-federation.sh')], { stdio: ['ignore', 'pipe', 'pipe'], env });
        running.add(child);
        let output = '';
        child.stdout!.on('data', (chunk) => (output += chunk));
        child.stderr!.on('data', (chunk) => (output += chunk));
        // Bounded: each curl has --max-time 10 and each wait 10 s; this is the backstop.
        const deadline = setTimeout(() => child.kill('SIGKILL'), 60_000);
        child.once('exit', (code) => {
          clearTimeout(deadline);
          running.delete(child);
          resolvePromise({ code, output });
        });
      });
      expect(example.code, example.output).toBe(0);
      expect(example.output).toMatch(new RegExp(`alice made !\\S+:127\\.0\\.0\\.1:${mainPort} on main`));
      expect(example.output).toContain('hello joined it from the bots server');
      expect(example.output).toContain(`seen on https://127.0.0.1:${mainPort}: hello from the bots server`);
      expect(example.output).toContain(`seen on https://127.0.0.1:${botsPort}: hello back from main`);
      expect(example.output).toContain('federation works');
    } finally {
      expect(await Promise.all(servers.map(stop))).toEqual([0, 0]);
    }
  });
});
