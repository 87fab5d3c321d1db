/**
 * The `bot-homeserver` command as an operator runs it: real processes, a real database file,
 * a real crash. Runs the compiled build (`npm test` builds first).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Worker } from 'node:worker_threads';

const ROOT = resolve(import.meta.dirname, '../..');
const BIN = join(ROOT, 'bin/bot-homeserver.js');

let dir: string;
let config: string;
const running = new Set<ChildProcess>();

beforeAll(() => {
  if (!existsSync(join(ROOT, 'dist/src/main.js'))) throw new Error('build first: npm run build (npm test does it)');
  dir = mkdtempSync(join(tmpdir(), 'bhs-cli-'));
  config = join(dir, 'homeserver.yaml');
  writeFileSync(
    config,
    [
      'server_name: cli.test',
      'listen:',
      '  host: 127.0.0.1',
      '  port: 0',
      'database:',
      `  path: ${join(dir, 'data', 'homeserver.db')}`,
      'password_hashing:',
      '  memory_cost_kib: 64',
      '  time_cost: 1',
      'ratelimiting_enabled: false',
      '',
    ].join('\n'),
  );
});

afterAll(() => {
  for (const child of running) child.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

function cli(...args: string[]) {
  const result = spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', env: { ...process.env, BOT_HOMESERVER_CONFIG: '' } });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

/** Starts the server and resolves with its base URL once it has logged that it is ready. */
function startServer(): Promise<{ child: ChildProcess; url: string }> {
  const child = spawn(process.execPath, [BIN, 'start', '--config', config], { stdio: ['ignore', 'pipe', 'pipe'] });
  running.add(child);
  child.once('exit', () => running.delete(child));
  return new Promise((resolvePromise, reject) => {
    const lines = createInterface({ input: child.stdout! });
    let stderr = '';
    child.stderr!.on('data', (chunk) => (stderr += chunk));
    child.once('exit', (code) => reject(new Error(`server exited with ${code}: ${stderr}`)));
    lines.on('line', (line) => {
      const entry = JSON.parse(line) as { msg?: string; port?: number };
      if (entry.msg === 'ready' && entry.port) resolvePromise({ child, url: `http://127.0.0.1:${entry.port}` });
    });
  });
}

function exited(child: ChildProcess): Promise<number | null> {
  return new Promise((done) => (child.exitCode !== null ? done(child.exitCode) : child.once('exit', (code) => done(code))));
}

async function loginAs(url: string, user: string, password: string) {
  const res = await fetch(`${url}/_matrix/client/v3/login`, {
    method: 'POST',
    body: JSON.stringify({ type: 'm.login.password', identifier: { type: 'm.id.user', user }, password }),
  });
  return { status: res.status, body: (await res.json()) as Record<string, string> };
}

describe('bot-homeserver CLI', () => {
  it('creates a bot whose printed secret logs in, and rotates it when run again', async () => {
    const created = cli('create-bot', 'hello', '--config', config, '--json');
    expect(created.stderr).toBe('');
    expect(created.status).toBe(0);
    const bot = JSON.parse(created.stdout) as { user_id: string; password: string };
    expect(bot.user_id).toBe('@hello:cli.test');
    expect(Buffer.from(bot.password, 'base64url').length).toBeGreaterThanOrEqual(16);

    // The bridge's name is reserved: nobody may hold its password.
    const bridge = cli('create-bot', 'bridge', '--config', config);
    expect(bridge.status).not.toBe(0);
    expect(bridge.stderr).toContain('reserved for a service user');
    expect(cli('create-user', 'bridge', '--config', config).status).not.toBe(0);

    const human = cli('create-bot', 'hello', '--config', config);
    expect(human.status).toBe(0);
    expect(human.stdout).toContain('Rotated the secret of @hello:cli.test');
    const rotated = /Password[^:]*: (\S+)/.exec(human.stdout)![1]!;

    const { child, url } = await startServer();
    try {
      expect((await loginAs(url, 'hello', bot.password)).status).toBe(403);
      const session = await loginAs(url, 'hello', rotated);
      expect(session.status).toBe(200);
      const whoami = await fetch(`${url}/_matrix/client/v3/account/whoami`, {
        headers: { Authorization: `Bearer ${session.body.access_token}` },
      });
      expect(await whoami.json()).toMatchObject({ user_id: '@hello:cli.test' });
      // Rotating from the CLI while the server runs ends the session at once, although the
      // server keeps tokens in memory: it notices the other process's commit.
      expect(cli('create-bot', 'hello', '--config', config).status).toBe(0);
      const afterRotation = await fetch(`${url}/_matrix/client/v3/account/whoami`, {
        headers: { Authorization: `Bearer ${session.body.access_token}` },
      });
      expect(afterRotation.status).toBe(401);
    } finally {
      child.kill('SIGTERM');
      expect(await exited(child)).toBe(0);
    }
  });

  it('keeps a write it acknowledged when the server is killed', async () => {
    const admin = JSON.parse(cli('create-user', 'operator', '--admin', '--config', config, '--json').stdout) as {
      user_id: string;
      password: string;
      admin: boolean;
    };
    expect(admin.admin).toBe(true);
    let server = await startServer();
    const token = (await loginAs(server.url, 'operator', admin.password)).body.access_token;
    const res = await fetch(`${server.url}/_bot_homeserver/admin/v1/bots`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ name: 'survivor' }),
    });
    expect(res.status).toBe(201);
    const bot = (await res.json()) as { password: string };
    server.child.kill('SIGKILL');
    await exited(server.child);

    server = await startServer();
    try {
      expect((await loginAs(server.url, 'survivor', bot.password)).status).toBe(200);
    } finally {
      server.child.kill('SIGINT');
      expect(await exited(server.child)).toBe(0);
    }
  });

  it('refuses to create a user that exists, and names a bad config key', () => {
    const again = cli('create-user', 'operator', '--config', config);
    expect(again.status).toBe(1);
    expect(again.stderr).toContain('User ID already taken.');

    const bad = join(dir, 'bad.yaml');
    writeFileSync(bad, 'server_name: cli.test\nlisten:\n  port: 99999\n  hots: 127.0.0.1\n');
    const result = cli('start', '--config', bad);
    expect(result.status).toBe(1);
    expect(result.stderr).toContain('listen.port');
    expect(result.stderr).toContain('listen.hots: unknown key');
  });

  it('migrates a database and says so', () => {
    const fresh = join(dir, 'fresh.yaml');
    writeFileSync(fresh, `database:\n  path: ${join(dir, 'fresh.db')}\n`);
    expect(cli('migrate', '--config', fresh).stdout).toContain('applied: 0001-accounts');
    expect(cli('migrate', '--config', fresh).stdout).toContain('database is up to date');
  });

  it('ships every lazily loaded part of the bundle in a loadable state', async () => {
    // The renderers are split into chunks that load on first use, and feeds are parsed by a
    // worker of their own; code that cannot load would break webhooks or feeds only in the
    // installed command.
    const chunksDir = join(ROOT, 'dist/bundle/chunks');
    const chunks = readdirSync(chunksDir).filter((name) => name.endsWith('.mjs'));
    expect(chunks.some((name) => name.startsWith('renderers-'))).toBe(true);
    const loaded = new Map<string, Record<string, unknown>>();
    for (const name of chunks) loaded.set(name, (await import(pathToFileURL(join(chunksDir, name)).href)) as Record<string, unknown>);
    const chunk = (prefix: string) => [...loaded].find(([name]) => name.startsWith(prefix))![1];

    // And they work: sanitize-html and the emoji table in the renderers, the XML stack in the feeds.
    const renderWebhook = chunk('renderers-').renderWebhook as (request: { headers: Record<string, string>; payload: unknown }) => { content: { body: string; formatted_body?: string } };
    const html = renderWebhook({ headers: {}, payload: { text: 'deployed', html: '<b>deployed</b><script>alert(1)</script>' } });
    expect(html.content.formatted_body).toBe('<b>deployed</b>');
    const slack = renderWebhook({ headers: {}, payload: { attachments: [{ text: 'shipped :tada:' }] } });
    expect(slack.content.body).toContain('🎉');
    const rss = '<?xml version="1.0"?><rss version="2.0"><channel><title>Releases</title><link>https://example.org/</link>'
      + '<item><title>v1.2 &amp; more</title><link>https://example.org/v1.2</link><guid>v1.2</guid></item></channel></rss>';
    const worker = new Worker(new URL(pathToFileURL(join(ROOT, 'dist/bundle/feed-parse-worker.mjs'))));
    const feed = await new Promise<{ feed: { items: Array<{ title?: string }> } }>((resolve, reject) => {
      worker.once('message', resolve);
      worker.once('error', reject);
      worker.postMessage({ id: 1, body: new Uint8Array(Buffer.from(rss)), url: 'https://example.org/feed.xml', contentType: 'application/rss+xml' });
    }).finally(() => worker.terminate());
    expect(feed.feed.items.map((item) => item.title)).toEqual(['v1.2 & more']);
  });
});
