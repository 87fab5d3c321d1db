/**
 * The `bot-homeserver` command as an operator runs it: real processes, a real database file,
 * a real crash. Runs the compiled build (`npm test` builds first).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Worker } from 'node:worker_threads';
import { SqliteDriver } from '../../src/storage/database.js';
import { dropSchemas, TEST_SCHEMA_PREFIX } from '../support/postgres-setup.js';

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
  return cliIn(ROOT, {}, ...args);
}

function cliIn(cwd: string, env: Record<string, string>, ...args: string[]) {
  const result = spawnSync(process.execPath, [BIN, ...args], { cwd, encoding: 'utf8', env: { ...process.env, BOT_HOMESERVER_CONFIG: '', ...env } });
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

/** Starts a server on a config written here; resolves once ready, with every log line so far. */
async function startServerWith(file: string, text: string): Promise<{ child: { process: ChildProcess; logLines: Array<Record<string, unknown>> } }> {
  writeFileSync(file, text);
  const proc = spawn(process.execPath, [BIN, 'start', '--config', file], { stdio: ['ignore', 'pipe', 'pipe'] });
  running.add(proc);
  proc.once('exit', () => running.delete(proc));
  const logLines: Array<Record<string, unknown>> = [];
  await new Promise<void>((resolvePromise, reject) => {
    proc.once('exit', (code) => reject(new Error(`server exited with ${code}`)));
    createInterface({ input: proc.stdout! }).on('line', (line) => {
      const entry = JSON.parse(line) as Record<string, unknown>;
      logLines.push(entry);
      if (entry.msg === 'ready') setTimeout(resolvePromise, 50);
    });
  });
  return { child: { process: proc, logLines } };
}

function lastLine(text: string): string {
  return text.trimEnd().split('\n').at(-1)!;
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
    // stdout is the JSON alone; stderr says which config and which database were used.
    expect(created.stderr).toBe(`bot-homeserver: config: ${config} (--config)\nbot-homeserver: database: SQLite ${join(dir, 'data', 'homeserver.db')} (a new file: none there yet)\n`);
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

  it('records owners, grants and an audit log of what operators do to bots (the bot portal’s operator side)', () => {
    expect(cli('create-bot', 'owned-bot', '--owner', '@alice:example.org', '--config', config).status).toBe(0);
    const listed = cli('bots', 'list', '--json', '--config', config);
    expect(listed.stdout.split('\n').filter(Boolean).map((line) => JSON.parse(line) as { user_id: string; owner: string | null })).toContainEqual(
      expect.objectContaining({ user_id: '@owned-bot:cli.test', owner: '@alice:example.org' }),
    );
    const moved = cli('bots', 'set-owner', 'owned-bot', '@bob:example.org', '--config', config);
    expect(moved.stdout).toContain('@owned-bot:cli.test now belongs to @bob:example.org (before: @alice:example.org)');
    // Without portal.people_server_name, a person is named by a full user id.
    expect(cli('owners', 'grant', 'carol', '--config', config).stderr).toContain('full user id');
    expect(cli('owners', 'grant', '@carol:example.org', '--note', 'ticket 7', '--config', config).stdout).toContain('@carol:example.org may now create bots.');
    expect(cli('owners', 'list', '--config', config).stdout).toMatch(/@carol:example\.org\t\S+\tby cli:\S+\tticket 7/);
    expect(cli('owners', 'revoke', '@carol:example.org', '--config', config).stdout).toContain('may no longer create bots');
    expect(cli('owners', 'unbind', '@carol:example.org', '--config', config).stdout).toContain('@carol:example.org has not signed in to the portal.');
    expect(cli('owners', 'sign-out', '@carol:example.org', '--config', config).stdout).toContain('@carol:example.org is signed out of the portal (0 sessions ended).');
    expect(cli('bots', 'deactivate', 'owned-bot', '--config', config).status).toBe(0);
    const audit = cli('audit', '--json', '--target', '@owned-bot:cli.test', '--config', config);
    const actions = audit.stdout.split('\n').filter(Boolean).map((line) => JSON.parse(line) as { action: string; actor: string });
    expect(actions.map((entry) => entry.action)).toEqual(['deactivate', 'move', 'create']);
    expect(actions.every((entry) => entry.actor.startsWith('cli:'))).toBe(true);
    expect(cli('audit', '--config', config).stdout).toMatch(/\trevoke\t@carol:example\.org/);
    // Thirteen commands as processes: a minute on a loaded machine.
  }, 120_000);

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
    // A Matrix error code is for clients, not for the operator reading the terminal.
    expect(again.stderr).not.toContain('M_');

    const bad = join(dir, 'bad.yaml');
    writeFileSync(bad, 'server_name: cli.test\nlisten:\n  port: 99999\n  hots: 127.0.0.1\n');
    const result = cli('start', '--config', bad);
    expect(result.status).toBe(1);
    expect(result.stderr).toContain('listen.port');
    expect(result.stderr).toContain('listen.hots: unknown key');
  });

  it('prints the bridge registration for the main homeserver, and says plainly when that homeserver is unreachable', () => {
    const bridgeConfig = join(dir, 'bridge.yaml');
    writeFileSync(
      bridgeConfig,
      `database:\n  path: ${join(dir, 'bridge.db')}\nlisten:\n  port: 0\nbridge:\n  appservice:\n    homeserver_url: http://127.0.0.1:9\n    server_name: example.org\n    as_token: as-0123456789abcdef\n    hs_token: hs-0123456789abcdef\n    url: http://127.0.0.1:8119\n`,
    );
    const printed = cli('bridge', 'registration', '--config', bridgeConfig);
    expect(printed.status).toBe(0);
    expect(printed.stdout).toContain('sender_localpart: bridge');
    expect(printed.stdout).toContain('regex: ^@bridge:example\\.org$');
    expect(printed.stdout).toContain('url: http://127.0.0.1:8119');
    const unreachable = cli('bridge', '--config', bridgeConfig);
    expect(unreachable.status).toBe(1);
    expect(unreachable.stderr).toContain('cannot reach the homeserver at http://127.0.0.1:9');
    expect(unreachable.stderr).not.toContain('    at ');
    const missing = cli('bridge', 'registration', '--config', config);
    expect(missing.status).toBe(1);
    expect(missing.stderr).toContain('bridge.appservice is not set');
  });

  it('migrates a database and says so', () => {
    const fresh = join(dir, 'fresh.yaml');
    writeFileSync(fresh, `database:\n  path: ${join(dir, 'fresh.db')}\n`);
    expect(cli('migrate', '--config', fresh).stdout).toContain('applied: 0001-accounts');
    expect(cli('migrate', '--config', fresh).stdout).toContain('database is up to date');
    // A newer version migrated it further: refused in words, before anything runs.
    const sqlite = new SqliteDriver(join(dir, 'fresh.db'));
    sqlite.prepare("INSERT INTO kysely_migration (name, timestamp) VALUES ('9999-from-the-future', 'x')").run();
    sqlite.close();
    const newer = cli('start', '--config', fresh);
    expect(newer.status).toBe(1);
    expect(newer.stderr).toContain('this database was migrated by a newer version of bot-homeserver (9999-from-the-future)');
  });

  it('finds the config as the server does, says which, and refuses a database of another server name', () => {
    // A server's directory: its config as ./homeserver.yaml, its database under ./data.
    const site = mkdtempSync(join(dir, 'site-'));
    writeFileSync(join(site, 'homeserver.yaml'), 'server_name: example.test\npassword_hashing: {memory_cost_kib: 64, time_cost: 1}\n');
    const found = cliIn(site, {}, 'create-bot', 'first', '--json');
    expect(found.status).toBe(0);
    expect(found.stderr).toContain(`${join(site, 'homeserver.yaml')} (found in the working directory)`);
    expect(JSON.parse(found.stdout).user_id).toBe('@first:example.test');

    // The same directory without the file: built-in defaults (server_name localhost) meet the
    // database of example.test, and nothing is written.
    rmSync(join(site, 'homeserver.yaml'));
    const oops = cliIn(site, {}, 'create-bot', 'oops');
    expect(oops.status).toBe(1);
    expect(oops.stderr).toContain('belongs to server_name "example.test", but the configuration says "localhost"');
    expect(oops.stderr).toContain('built-in defaults (no --config, no $BOT_HOMESERVER_CONFIG, no ./homeserver.yaml)');
    expect(oops.stderr).not.toMatch(/\n\s+at /); // no stack trace
    expect(cliIn(site, {}, 'migrate').status).toBe(1);
    const start = cliIn(site, {}, 'start');
    expect(start.status).toBe(1);
    expect(start.stderr).toContain('cannot be renamed');

    // The variable names the file, and says so.
    const named = join(dir, 'named.yaml');
    writeFileSync(named, `server_name: example.test\ndatabase: {path: ${join(site, 'data', 'homeserver.db')}}\n`);
    const listed = cliIn(site, { BOT_HOMESERVER_CONFIG: named }, 'bots', 'list');
    expect(listed.status).toBe(0);
    expect(listed.stderr).toContain(`${named} ($BOT_HOMESERVER_CONFIG)`);
    expect(listed.stdout).toMatch(/^@first:example\.test\tbot\tactive\t/);
    expect(listed.stdout).not.toContain('oops');
  });

  it('names the database each command works on, never its password, and says what to change after migrate-to-postgres', async () => {
    // A password in the URL, whatever the test server wants (trust authentication ignores it).
    const url = new URL(process.env.BHS_TEST_POSTGRES ?? 'postgres://postgres@127.0.0.1:5432/test');
    if (!url.password) url.password = 'never-printed-0123';
    const password = decodeURIComponent(url.password);
    const schema = `${TEST_SCHEMA_PREFIX}${process.pid}_cli`;
    const shown = new URL(url);
    shown.password = '***';
    const site = mkdtempSync(join(dir, 'moving-'));
    const sqlite = join(site, 'data', 'homeserver.db');
    writeFileSync(join(site, 'homeserver.yaml'), 'server_name: moving.test\npassword_hashing: {memory_cost_kib: 64, time_cost: 1}\n');
    const secretFree = (result: { stdout: string; stderr: string }) => {
      expect(result.stdout + result.stderr).not.toContain(password);
      expect(result.stdout + result.stderr).not.toContain(encodeURIComponent(password));
    };
    try {
      const before = cliIn(site, {}, 'bots', 'create', 'mover');
      expect(before.status).toBe(0);
      expect(before.stderr).toContain(`bot-homeserver: database: SQLite ${sqlite}`);

      const moved = cliIn(site, {}, 'migrate-to-postgres', '--from', sqlite, '--to', url.href, '--schema', schema);
      expect(moved.status, moved.stderr).toBe(0);
      secretFree(moved);
      expect(moved.stderr).toContain(`from: SQLite ${sqlite}\nto: PostgreSQL ${shown.href} (schema ${schema})\n`);
      // The closing advice: the URL, and the key and the media store where they are now.
      const advice = moved.stderr.slice(moved.stderr.indexOf('To switch'));
      expect(advice).toContain(`  database:\n    url: ${shown.href}   # with the real password\n    schema: ${schema}\n`);
      expect(advice).toContain(`  signing_key_path: ${join(site, 'data', 'moving.test.signing.key')}\n`);
      expect(advice).toContain(`  media_store_path: ${join(site, 'data', 'media_store')}   # no media store there now`);

      // The database in the environment: named, with the variables that chose it.
      const onPostgres = cliIn(site, { BOT_HOMESERVER_DATABASE__URL: url.href, BOT_HOMESERVER_DATABASE__SCHEMA: schema }, 'bots', 'list');
      expect(onPostgres.status, onPostgres.stderr).toBe(0);
      secretFree(onPostgres);
      expect(onPostgres.stderr).toContain(', with $BOT_HOMESERVER_DATABASE__SCHEMA, $BOT_HOMESERVER_DATABASE__URL from the environment\n');
      expect(onPostgres.stderr).toContain(`bot-homeserver: database: PostgreSQL ${shown.href} (schema ${schema})\n`);
      expect(onPostgres.stdout).toMatch(/^@mover:moving\.test\tbot\t/);
      // And a failure on it says no more: an unknown account, named with the database.
      const refused = cliIn(site, { BOT_HOMESERVER_DATABASE__URL: url.href, BOT_HOMESERVER_DATABASE__SCHEMA: schema }, 'bots', 'deactivate', 'nobody');
      expect(refused.status).toBe(1);
      secretFree(refused);

      // Without it, the old file, said as plainly.
      const stale = cliIn(site, {}, 'bots', 'list');
      expect(stale.stderr).toContain(`bot-homeserver: database: SQLite ${sqlite}\n`);
    } finally {
      await dropSchemas(url.href, [schema]);
    }
  });

  it('lists and deactivates accounts, people and bots, with clear refusals', async () => {
    expect(cli('bots', 'create', 'lister', '--config', config).status).toBe(0);
    const person = JSON.parse(cli('users', 'create', 'lister-person', '--config', config, '--json').stdout) as { password: string };
    const users = cli('users', 'list', '--config', config, '--json');
    expect(users.status).toBe(0);
    const entries = users.stdout.trim().split('\n').map((line) => JSON.parse(line) as { user_id: string; type: string; deactivated: boolean });
    expect(entries).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ user_id: '@lister:cli.test', type: 'bot', deactivated: false }),
        expect.objectContaining({ user_id: '@lister-person:cli.test', type: 'user', deactivated: false }),
      ]),
    );
    expect(cli('bots', 'list', '--config', config).stdout).not.toContain('lister-person');

    // A person is not a bot; unknown names and the bridge are refused by name.
    const notBot = cli('bots', 'deactivate', 'lister-person', '--config', config);
    expect(notBot.status).toBe(1);
    expect(notBot.stderr).toContain('@lister-person:cli.test is not a bot account');
    const unknown = cli('users', 'deactivate', 'nobody-here', '--config', config);
    expect(unknown.status).toBe(1);
    expect(unknown.stderr).toContain('there is no account @nobody-here:cli.test');
    expect(cli('bots', 'deactivate', 'bridge', '--config', config).stderr).toContain('service user');

    const { child, url } = await startServer();
    try {
      const session = await loginAs(url, 'lister-person', person.password);
      expect(session.status).toBe(200);
      const gone = cli('users', 'deactivate', 'lister-person', '--config', config);
      expect(gone.status).toBe(0);
      expect(gone.stdout).toContain('Deactivated @lister-person:cli.test');
      const whoami = await fetch(`${url}/_matrix/client/v3/account/whoami`, { headers: { Authorization: `Bearer ${session.body.access_token}` } });
      expect(whoami.status).toBe(401);
      expect((await loginAs(url, 'lister-person', person.password)).status).toBe(403);
      expect(cli('users', 'deactivate', 'lister-person', '--config', config).stdout).toContain('was already deactivated');
      expect(cli('users', 'list', '--config', config).stdout).not.toContain('lister-person');
      expect(cli('users', 'list', '--deactivated', '--config', config).stdout).toMatch(/@lister-person:cli\.test\tuser\tdeactivated/);
    } finally {
      child.kill('SIGTERM');
      expect(await exited(child)).toBe(0);
    }
    // Ten commands as processes and a server: slow on a loaded machine, not stuck.
  }, 60_000);

  it('answers a parked /sync before it exits on SIGTERM, and exits promptly', async () => {
    const person = JSON.parse(cli('users', 'create', 'syncer', '--config', config, '--json').stdout) as { password: string };
    const { child, url } = await startServer();
    const token = (await loginAs(url, 'syncer', person.password)).body.access_token;
    const auth = { headers: { Authorization: `Bearer ${token}` } };
    const first = (await (await fetch(`${url}/_matrix/client/v3/sync`, auth)).json()) as { next_batch: string };
    const parked = fetch(`${url}/_matrix/client/v3/sync?since=${first.next_batch}&timeout=60000`, auth);
    await new Promise((r) => setTimeout(r, 300));
    const signalled = Date.now();
    child.kill('SIGTERM');
    const answer = await parked;
    expect(answer.status).toBe(200);
    expect(((await answer.json()) as { next_batch?: string }).next_batch).toEqual(expect.any(String));
    expect(await exited(child)).toBe(0);
    expect(Date.now() - signalled).toBeLessThan(5000);
  });

  it('backs up the database, media and key while the server runs, and a restore serves them', async () => {
    const bot = JSON.parse(cli('bots', 'create', 'backed-up', '--config', config, '--json').stdout) as { password: string };
    const { child, url } = await startServer();
    let mxc: string;
    try {
      const token = (await loginAs(url, 'backed-up', bot.password)).body.access_token;
      const upload = await fetch(`${url}/_matrix/media/v3/upload?filename=a.txt`, {
        method: 'POST',
        headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'text/plain' },
        body: 'kept in the backup',
      });
      mxc = ((await upload.json()) as { content_uri: string }).content_uri;
      const target = join(dir, 'backup-1.db');
      const taken = cli('backup', target, '--config', config);
      expect(taken.status, taken.stderr).toBe(0);
      expect(taken.stdout).toContain(`Database: ${target}`);
      expect(taken.stdout).toMatch(/Media store: .*backup-1\.db\.media \(1 files, 18 bytes\)/);
      expect(taken.stdout).toContain('Signing key: ');
      // Never overwrites, and says so in one sentence: no error code, no stack.
      const refused = cli('backup', target, '--config', config);
      expect(refused.status).toBe(1);
      expect(lastLine(refused.stderr)).toBe(`bot-homeserver: ${target} exists; a backup never overwrites anything`);
      // A folder that does not exist is named as such (it was a TypeError and nine stack frames).
      const nowhere = cli('backup', join(dir, 'no-such-folder', 'backup.db'), '--config', config);
      expect(nowhere.status).toBe(1);
      expect(lastLine(nowhere.stderr)).toBe(`bot-homeserver: cannot write the backup to ${join(dir, 'no-such-folder', 'backup.db')}: the folder ${join(dir, 'no-such-folder')} does not exist (create it first)`);
      for (const failed of [refused, nowhere]) {
        expect(failed.stderr).not.toMatch(/\n\s+at |M_[A-Z]|Error:/);
        expect(failed.stderr.trim().split('\n')).toHaveLength(3); // the config, the database, the sentence
      }
      // --verbose adds where it happened.
      expect(cli('backup', target, '--config', config, '--verbose').stderr).toMatch(/\n\s+at backup \(.*src\/ops\/backup\.ts:\d+:\d+\)/);
    } finally {
      child.kill('SIGTERM');
      await exited(child);
    }

    // The restore: the three files where a fresh config expects them.
    const restored = mkdtempSync(join(dir, 'restored-'));
    const { copyFileSync, cpSync } = await import('node:fs');
    copyFileSync(join(dir, 'backup-1.db'), join(restored, 'homeserver.db'));
    cpSync(join(dir, 'backup-1.db.media'), join(restored, 'media_store'), { recursive: true });
    copyFileSync(join(dir, 'backup-1.db.signing.key'), join(restored, 'cli.test.signing.key'));
    const restoredConfig = join(restored, 'homeserver.yaml');
    writeFileSync(restoredConfig, `server_name: cli.test\nlisten: {host: 127.0.0.1, port: 0}\ndatabase: {path: ${join(restored, 'homeserver.db')}}\npassword_hashing: {memory_cost_kib: 64, time_cost: 1}\n`);
    const again = spawn(process.execPath, [BIN, 'start', '--config', restoredConfig], { stdio: ['ignore', 'pipe', 'pipe'] });
    running.add(again);
    const againUrl = await new Promise<string>((resolvePromise, reject) => {
      again.once('exit', (code) => reject(new Error(`restored server exited with ${code}`)));
      createInterface({ input: again.stdout! }).on('line', (line) => {
        const entry = JSON.parse(line) as { msg?: string; port?: number };
        if (entry.msg === 'ready' && entry.port) resolvePromise(`http://127.0.0.1:${entry.port}`);
      });
    });
    try {
      const token = (await loginAs(againUrl, 'backed-up', bot.password)).body.access_token;
      const download = await fetch(`${againUrl}/_matrix/client/v1/media/download/${mxc.slice('mxc://'.length)}`, { headers: { Authorization: `Bearer ${token}` } });
      expect(download.status).toBe(200);
      expect(await download.text()).toBe('kept in the backup');
      const keys = (await (await fetch(`${againUrl}/_matrix/key/v2/server`)).json()) as { verify_keys: Record<string, unknown> };
      const { readFileSync } = await import('node:fs');
      const keyId = readFileSync(join(dir, 'backup-1.db.signing.key'), 'utf8').split(' ').slice(0, 2).join(':');
      expect(Object.keys(keys.verify_keys)).toEqual([keyId]);
    } finally {
      again.kill('SIGTERM');
      await exited(again);
    }
  }, 60_000);

  it('says plainly what is wrong with the signing key, warns about a localhost server name, and shows unexpected errors in the sources', async () => {
    const badKey = join(dir, 'bad.key');
    writeFileSync(badKey, 'garbage\n');
    const keyConfig = join(dir, 'bad-key.yaml');
    writeFileSync(keyConfig, `database: {path: ${join(dir, 'bad-key', 'hs.db')}}\nsigning_key_path: ${badKey}\nlisten: {port: 0}\n`);
    const refused = cli('start', '--config', keyConfig);
    expect(refused.status).toBe(1);
    expect(refused.stderr).toContain('line 1: expected "ed25519 <key version> <base64 seed>"');
    expect(refused.stderr).not.toMatch(/\n\s+at /);

    // An error nobody planned for (the disk failing) is one sentence that says how to see more;
    // with --verbose, its stack names our TypeScript sources through the bundle's source map, not
    // minified chunks.
    const failingDisk = join(dir, 'failing-disk.mjs');
    writeFileSync(
      failingDisk,
      "import fs from 'node:fs'; import { syncBuiltinESMExports } from 'node:module';\n" +
        "fs.mkdirSync = () => { const err = new Error('EIO: i/o error (injected)'); err.code = 'EIO'; throw err; }; syncBuiltinESMExports();\n",
    );
    const crash = (...extra: string[]) => spawnSync(process.execPath, ['--import', pathToFileURL(failingDisk).href, BIN, 'migrate', '--config', keyConfig, ...extra], { encoding: 'utf8' });
    const crashed = crash();
    expect(crashed.status).toBe(1);
    expect(crashed.stderr.split('\n').at(-2)).toBe('bot-homeserver: EIO: i/o error (injected) (unexpected: run again with --verbose to see where it happened)');
    expect(crashed.stderr).not.toMatch(/\n\s+at /);
    const told = crash('--verbose');
    expect(told.status).toBe(1);
    expect(told.stderr).toContain('bot-homeserver: EIO: i/o error (injected)\n');
    expect(told.stderr).toMatch(/at openDatabase \(.*src\/storage\/database\.ts:\d+:\d+\)/);
    expect(told.stderr).not.toMatch(/\.mjs:\d+:\d{4,}/);

    // server_name still localhost: start says so at warn. Its log names the version and the database.
    const { child } = await startServerWith(join(dir, 'localhost.yaml'), `database: {path: ${join(dir, 'localhost', 'hs.db')}}\nlisten: {port: 0}\n`);
    try {
      expect(child.logLines.some((line) => line.level === 40 && String(line.msg).includes('server_name is still "localhost"'))).toBe(true);
      expect(child.logLines[0]!.msg).toMatch(/^bot-homeserver \d+\.\d+\.\d+\S* listening on http:\/\/127\.0\.0\.1:\d+$/);
      expect(child.logLines.find((line) => line.msg === 'configuration')?.database).toBe(`SQLite ${join(dir, 'localhost', 'hs.db')}`);
    } finally {
      child.process.kill('SIGTERM');
      await exited(child.process);
    }
  });

  it('ships every lazily loaded part of the bundle in a loadable state', async () => {
    // The renderers are split into chunks that load on first use, and feeds are parsed by a
    // worker of their own; code that cannot load would break webhooks or feeds only in the
    // installed command.
    // This build's own chunks: the build keeps the previous one's beside them (scripts/build.mjs).
    const chunksDir = join(ROOT, 'dist/bundle/chunks');
    const own = (JSON.parse(readFileSync(join(ROOT, 'dist/bundle/chunks.json'), 'utf8')) as { chunks: string[] }).chunks;
    const chunks = own.filter((name) => name.endsWith('.mjs'));
    expect(chunks.every((name) => readdirSync(chunksDir).includes(name))).toBe(true);
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
  }, 60_000);
});
