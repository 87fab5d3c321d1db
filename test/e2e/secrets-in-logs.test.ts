/**
 * No secret reaches a log. Each process this project runs (the server with the bridge in it, and
 * `bot-homeserver bridge` as an appservice of another homeserver) goes through a whole story at
 * `trace`, the most verbose level: logins, bot secrets, tokens in headers and in the query string
 * (as Synapse before the authenticated appservice paths sends its hs_token), webhooks plain and
 * signed, posts that fail, appservice transactions. Then everything the process wrote (stdout and
 * stderr) is searched for every secret it was given. Runs the compiled build (`npm test` builds
 * first).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHmac } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { stringify as toYaml } from 'yaml';
import { startTestHomeserver, type TestHomeserver } from '../../src/testing/index.js';
import { freePort } from '../support/ports.js';
import { persistentDatabase } from '../support/test-schemas.js';
import { SqliteDriver } from '../../src/storage/database.js';
import { openStoreKey } from '../../src/bridge/crypto/store-key.js';

const ROOT = resolve(import.meta.dirname, '../..');
const BIN = join(ROOT, 'bin/bot-homeserver.js');
const AS_TOKEN = 'as-token-never-logged-0123456789';
const HS_TOKEN = 'hs-token-never-logged-0123456789';
const WEBHOOK_SECRET = 'webhook-secret-never-logged-0123';
const PASSWORD = 'password-never-logged-0123';

type Json = Record<string, any>;

interface Process {
  child: ChildProcess;
  /** Everything it wrote, stdout and stderr. */
  output: () => string;
  /** Its JSON log lines so far. */
  lines: () => Json[];
}

beforeAll(() => {
  if (!existsSync(join(ROOT, 'dist/bundle/main.mjs'))) throw new Error('build first: npm run build (npm test does it)');
});

let dir: string;
let children: ChildProcess[] = [];
let servers: Server[] = [];
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'bhs-secrets-'));
});
afterEach(async () => {
  for (const child of children) if (child.exitCode === null) child.kill('SIGKILL');
  for (const server of servers) {
    server.closeAllConnections();
    await new Promise((done) => server.close(done));
  }
  children = [];
  servers = [];
  rmSync(dir, { recursive: true, force: true });
});

/** Starts the command; resolves once it logged `ready` (with the line). */
function run(args: string[], ready: string): Promise<{ process: Process; entry: Json }> {
  const child = spawn(process.execPath, [BIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, BOT_HOMESERVER_CONFIG: '' } });
  children.push(child);
  let output = '';
  const proc: Process = {
    child,
    output: () => output,
    lines: () => output.split('\n').flatMap((line) => parseLine(line)),
  };
  return new Promise((resolvePromise, reject) => {
    child.once('exit', (code) => reject(new Error(`${args[0]} exited with ${code}: ${output}`)));
    const take = (chunk: Buffer) => {
      output += chunk.toString();
      const entry = proc.lines().find((line) => line.msg === ready);
      if (entry) resolvePromise({ process: proc, entry });
    };
    child.stdout!.on('data', take);
    child.stderr!.on('data', take);
  });
}

/**
 * A log line as an object: a JSON line as it is, a pretty one (`[time] LEVEL: msg {fields}`, see
 * logging.format) as its fields and message.
 */
function parseLine(line: string): Json[] {
  if (line.startsWith('{')) return [JSON.parse(line) as Json];
  const pretty = /^\[[^\]]+\] ([A-Z]+): (.*?)(?: (\{.*\}))?$/.exec(line);
  if (!pretty) return [];
  return [{ ...(pretty[3] ? (JSON.parse(pretty[3]) as Json) : {}), levelName: pretty[1], msg: pretty[2] }];
}

async function stop(proc: Process): Promise<void> {
  if (proc.child.exitCode !== null) return;
  const exited = new Promise((done) => proc.child.once('exit', done));
  proc.child.kill('SIGTERM');
  await exited;
}

async function until<T>(what: string, check: () => Promise<T | undefined> | T | undefined, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const found = await check();
    if (found !== undefined && found !== false) return found;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((done) => setTimeout(done, 50));
  }
}

/**
 * The bridge's crypto store key, opened from the database with its key file, in the spellings a
 * log could show it (SQLite only: on PostgreSQL the key file alone is looked for).
 */
function cryptoStoreKey(databaseFile: string, keyFile: string, alwaysSqlite = false): Record<string, string> {
  if (process.env.BHS_TEST_POSTGRES && !alwaysSqlite) return {};
  const db = new SqliteDriver(databaseFile, { readonly: true });
  try {
    const row = db.prepare("SELECT value FROM bridge_state WHERE key = 'crypto_store_key_sealed'").get() as { value: string } | undefined;
    const key = row && openStoreKey(Buffer.from(keyFile, 'base64'), row.value);
    if (!key) throw new Error('the bridge has no crypto store key in its database');
    return { 'crypto store key (base64)': key.toString('base64'), 'crypto store key (hex)': key.toString('hex') };
  } finally {
    db.close();
  }
}

/** The secrets found in a process's output, by name. */
function leaked(output: string, secrets: Record<string, string>): string[] {
  return Object.entries(secrets).flatMap(([name, secret]) => (output.includes(secret) || output.includes(encodeURIComponent(secret)) ? [name] : []));
}

/** A stand-in appservice: records the transactions pushed to it (with the hs_token). */
async function startAppservice(): Promise<{ url: string; transactions: string[] }> {
  const transactions: string[] = [];
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      if (req.headers.authorization !== `Bearer ${HS_TOKEN}`) return void res.writeHead(403).end('{}');
      if (req.method === 'PUT' && req.url!.includes('/transactions/')) transactions.push(req.url!);
      res.writeHead(req.method === 'PUT' ? 200 : 404, { 'content-type': 'application/json' }).end('{}');
    });
  });
  servers.push(server);
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, transactions };
}

describe('the server, with the bridge in it', () => {
  // Pretty logs (logging.format) are written from the same redacted entries as JSON ones.
  it.each(['json', 'pretty'] as const)('logs none of the secrets it was given or made, in %s', async (format) => {
    const appservice = await startAppservice();
    const registration = join(dir, 'appservice.yaml');
    writeFileSync(
      registration,
      toYaml({ id: 'leak-test', url: appservice.url, as_token: AS_TOKEN, hs_token: HS_TOKEN, sender_localpart: 'leakbot', namespaces: { users: [{ exclusive: true, regex: '@_leak_.*' }], aliases: [], rooms: [] } }),
    );
    const signingKey = join(dir, 'signing.key');
    const config = join(dir, 'homeserver.yaml');
    writeFileSync(
      config,
      toYaml({
        server_name: 'secrets.test',
        listen: { host: '127.0.0.1', port: 0 },
        ...persistentDatabase(join(dir, 'homeserver.db')),
        signing_key_path: signingKey,
        password_hashing: { memory_cost_kib: 64, time_cost: 1 },
        ratelimiting_enabled: false,
        logging: { level: 'trace', format },
        app_service_config_files: [registration],
      }),
    );
    const cli = (...args: string[]) => {
      const result = spawnSync(process.execPath, [BIN, ...args, '--config', config], { encoding: 'utf8', env: { ...process.env, BOT_HOMESERVER_CONFIG: '' } });
      if (result.status !== 0) throw new Error(`${args.join(' ')}: ${result.stderr}`);
      return result.stdout;
    };
    const bot = JSON.parse(cli('create-bot', 'hello', '--json')) as { password: string };
    cli('create-user', 'person', '--password', PASSWORD);

    const { process: server, entry } = await run(['start', '--config', config], 'ready');
    const url = `http://127.0.0.1:${entry.port}`;
    const call = async (token: string | undefined, method: string, path: string, body?: unknown, inQuery = false): Promise<{ status: number; body: Json }> => {
      const separator = path.includes('?') ? '&' : '?';
      const target = `${url}/_matrix/client/v3${path}${token && inQuery ? `${separator}access_token=${encodeURIComponent(token)}` : ''}`;
      const res = await fetch(target, {
        method,
        headers: { 'content-type': 'application/json', ...(token && !inQuery ? { authorization: `Bearer ${token}` } : {}) },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      return { status: res.status, body: (await res.json()) as Json };
    };
    const ok = async (...args: Parameters<typeof call>): Promise<Json> => {
      const answer = await call(...args);
      if (answer.status !== 200) throw new Error(`${args[1]} ${args[2]} → ${answer.status} ${JSON.stringify(answer.body)}`);
      return answer.body;
    };
    const login = async (user: string, password: string) =>
      (await ok(undefined, 'POST', '/login', { type: 'm.login.password', identifier: { type: 'm.id.user', user }, password })).access_token as string;

    const personToken = await login('person', PASSWORD);
    const botToken = await login('hello', bot.password);
    expect((await call(undefined, 'POST', '/login', { type: 'm.login.password', identifier: { type: 'm.id.user', user: 'person' }, password: `${PASSWORD}-wrong` })).status).toBe(403);
    // Tokens in the query string, as old clients and appservices send them.
    await ok(botToken, 'GET', '/account/whoami', undefined, true);
    await ok(botToken, 'GET', '/sync?timeout=0', undefined, true);
    await ok(AS_TOKEN, 'GET', '/account/whoami', undefined, true);
    await ok(AS_TOKEN, 'POST', '/register', { type: 'm.login.application_service', username: '_leak_alice', inhibit_login: true });

    const roomId = (await ok(personToken, 'POST', '/createRoom', { preset: 'public_chat', invite: ['@bridge:secrets.test'] })).room_id as string;
    const room = encodeURIComponent(roomId);
    await ok(personToken, 'PUT', `/rooms/${room}/state/m.room.power_levels/`, { users: { '@person:secrets.test': 100, '@bridge:secrets.test': 50 } });
    await ok(AS_TOKEN, 'POST', `/join/${room}?user_id=${encodeURIComponent('@_leak_alice:secrets.test')}`, {}, true);
    await ok(botToken, 'POST', `/join/${room}`, {});
    const messages = async (roomId: string) => ((await ok(personToken, 'GET', `/rooms/${encodeURIComponent(roomId)}/messages?dir=b&limit=50`)).chunk as Json[]).map((event) => String(event.content?.body ?? ''));
    await until('the bridge to greet', async () => (await messages(roomId)).some((body) => body.includes('!bridge help')));

    // Two webhooks, one signed; their URLs come by DM.
    let txn = 0;
    const say = (body: string) => ok(personToken, 'PUT', `/rooms/${room}/send/m.room.message/say-${++txn}`, { msgtype: 'm.text', body });
    await say('!bridge webhook alerts');
    const dm = await until('the DM', async () => {
      const sync = await ok(personToken, 'GET', '/sync?timeout=0');
      return Object.keys(sync.rooms?.invite ?? {})[0] ?? Object.keys(sync.rooms?.join ?? {}).find((id) => id !== roomId);
    });
    await ok(personToken, 'POST', `/join/${encodeURIComponent(dm)}`, {});
    const webhookUrl = (name: string) =>
      until(`the URL of ${name}`, async () => {
        const body = (await messages(dm)).find((text) => text.startsWith(`Your webhook "${name}"`));
        return body === undefined ? undefined : /(http:\/\/\S+\/webhook\/[A-Za-z0-9_-]+)/.exec(body)?.[1];
      });
    const alerts = await webhookUrl('alerts');
    await say(`!bridge webhook signed secret ${WEBHOOK_SECRET}`);
    const signed = await webhookUrl('signed');

    const post = (target: string, body: string, headers: Record<string, string> = {}) => fetch(target, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
    expect((await post(alerts, '{"text": "deploy finished"}')).status).toBe(200);
    expect((await post(alerts, 'not json')).status).toBe(400);
    expect((await post(`${alerts.slice(0, -4)}XXXX`, '{"text": "to nobody"}')).status).toBe(404);
    const body = '{"text": "signed"}';
    expect((await post(signed, body, { 'x-hub-signature-256': `sha256=${createHmac('sha256', WEBHOOK_SECRET).update(body).digest('hex')}` })).status).toBe(200);
    expect((await post(signed, body, { 'x-hub-signature-256': `sha256=${'0'.repeat(64)}` })).status).toBe(403);
    await until('the posts in the room', async () => (await messages(roomId)).includes('signed'));
    await until('a transaction to the appservice', () => appservice.transactions.length > 0);
    // An encrypted room: the bridge's crypto device encrypts its greeting there.
    const encryptedRoom = (await ok(personToken, 'POST', '/createRoom', {
      preset: 'private_chat',
      invite: ['@bridge:secrets.test'],
      initial_state: [{ type: 'm.room.encryption', state_key: '', content: { algorithm: 'm.megolm.v1.aes-sha2' } }],
    })).room_id as string;
    await until('the encrypted greeting', async () =>
      ((await ok(personToken, 'GET', `/rooms/${encodeURIComponent(encryptedRoom)}/messages?dir=b&limit=50`)).chunk as Json[]).some((event) => event.sender === '@bridge:secrets.test' && event.type === 'm.room.encrypted'),
    );
    await stop(server);

    const output = server.output();
    const seed = readFileSync(signingKey, 'utf8').trim().split(/\s+/)[2]!;
    const cryptoKeyFile = readFileSync(join(dir, 'secrets.test.bridge-crypto.key'), 'utf8').trim();
    expect(
      leaked(output, {
        password: PASSWORD,
        'bot secret': bot.password,
        'person access token': personToken,
        'bot access token': botToken,
        as_token: AS_TOKEN,
        hs_token: HS_TOKEN,
        'webhook id (alerts)': alerts.split('/webhook/')[1]!,
        'webhook id (signed)': signed.split('/webhook/')[1]!,
        'webhook secret': WEBHOOK_SECRET,
        'signing key seed': seed,
        'bridge crypto key file': cryptoKeyFile,
        ...cryptoStoreKey(join(dir, 'homeserver.db'), cryptoKeyFile),
      }),
    ).toEqual([]);
    // The failed post is logged under the webhook's name, which the operator knows it by.
    expect(server.lines().find((line) => line.msg === 'request' && line.status === 400 && line.webhook === 'alerts')).toBeDefined();
    // Each format is what it says, and the start line names the version.
    expect(output.split('\n').filter((line) => line !== '').every((line) => line.startsWith('{') === (format === 'json'))).toBe(true);
    expect(server.lines().filter((line) => /^bot-homeserver \d+\.\d+\.\d+\S* listening on http:\/\/127\.0\.0\.1:\d+$/.test(String(line.msg)))).toHaveLength(1);
  }, 60_000);
});

describe('bot-homeserver bridge, as an appservice of another homeserver', () => {
  let main: TestHomeserver | undefined;
  afterEach(async () => {
    await main?.close();
    main = undefined;
  });

  it('logs none of the secrets it was given or made, whichever way the homeserver sends its token', async () => {
    const port = await freePort();
    const mainPort = await freePort();
    const configFile = join(dir, 'bridge.yaml');
    writeFileSync(
      configFile,
      toYaml({
        database: { path: join(dir, 'bridge.db') },
        listen: { host: '127.0.0.1', port },
        logging: { level: 'trace' },
        ratelimiting_enabled: false,
        bridge: { appservice: { homeserver_url: `http://127.0.0.1:${mainPort}`, server_name: 'localhost', as_token: AS_TOKEN, hs_token: HS_TOKEN, url: `http://127.0.0.1:${port}` } },
      }),
    );
    const registration = join(dir, 'bridge-registration.yaml');
    const printed = spawnSync(process.execPath, [BIN, 'bridge', 'registration', '--config', configFile], { encoding: 'utf8', env: { ...process.env, BOT_HOMESERVER_CONFIG: '' } });
    expect(printed.status).toBe(0);
    writeFileSync(registration, printed.stdout);
    main = await startTestHomeserver({ port: mainPort, config: { app_service_config_files: [registration], bridge: { enabled: false }, federation: { min_retry_interval: '20ms', max_retry_interval: '200ms' } } });
    const { process: bridge } = await run(['bridge', '--config', configFile], 'bridge ready');

    const person = await main.createUser('person');
    const roomId = await main.createRoom(person, { preset: 'public_chat', invite: ['@bridge:localhost'] });
    await main.setState(person, roomId, 'm.room.power_levels', '', { users: { [person.userId]: 100, '@bridge:localhost': 50 } });
    await main.waitFor(roomId, (e) => e.sender === '@bridge:localhost' && String(e.content.body).includes('!bridge help'));
    await main.send(person, roomId, '!bridge webhook alerts');
    const direct = await until('the DM', async () => (await main!.services.accountData.get('@bridge:localhost', undefined, 'm.direct').catch((): Json => ({})))[person.userId] as string[] | undefined);
    const credentials = await main.waitFor(direct[0]!, (e) => e.sender === '@bridge:localhost' && String(e.content.body).includes('/webhook/'));
    const alerts = /(http:\/\/\S+\/webhook\/[A-Za-z0-9_-]+)/.exec(String(credentials.content.body))![1]!;

    const post = (target: string, body: string) => fetch(target, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    expect((await post(alerts, '{"text": "deploy finished"}')).status).toBe(200);
    expect((await post(alerts, 'not json')).status).toBe(400);
    expect((await post(`${alerts.slice(0, -4)}XXXX`, '{"text": "to nobody"}')).status).toBe(404);
    await main.waitFor(roomId, (e) => e.sender === '@bridge:localhost' && e.content.body === 'deploy finished');

    // Synapse before the authenticated appservice paths: the legacy paths, the token in the query.
    const bridgeUrl = `http://127.0.0.1:${port}`;
    const legacy = (method: string, path: string, body?: unknown) =>
      fetch(`${bridgeUrl}${path}?access_token=${HS_TOKEN}`, { method, headers: { 'content-type': 'application/json' }, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
    const answers: Json[] = [];
    for (const path of ['/transactions/legacy-1', '/_matrix/app/v1/transactions/legacy-2']) {
      answers.push({ path, status: (await legacy('PUT', path, { events: [] })).status });
    }
    // It makes no users or aliases on request, whichever path asks.
    for (const path of ['/users/%40nobody%3Alocalhost', '/rooms/%23nowhere%3Alocalhost', '/_matrix/app/v1/users/%40nobody%3Alocalhost', '/_matrix/app/v1/rooms/%23nowhere%3Alocalhost']) {
      const answer = await legacy('GET', path);
      answers.push({ path, status: answer.status, errcode: ((await answer.json()) as Json).errcode });
    }
    await stop(bridge);

    // The crypto device's key file (beside the bridge's database) and the store key it seals.
    const keyFileName = readdirSync(dir).find((name) => name.endsWith('.bridge-crypto.key'))!;
    const cryptoKeyFile = readFileSync(join(dir, keyFileName), 'utf8').trim();
    expect(
      leaked(bridge.output(), {
        as_token: AS_TOKEN,
        hs_token: HS_TOKEN,
        'webhook id': alerts.split('/webhook/')[1]!,
        'person access token': person.accessToken,
        'bridge crypto key file': cryptoKeyFile,
        ...cryptoStoreKey(join(dir, 'bridge.db'), cryptoKeyFile, true),
      }),
    ).toEqual([]);
    expect(bridge.lines().find((line) => line.msg === 'request' && line.status === 400 && line.webhook === 'alerts')).toBeDefined();
    expect(answers).toEqual([
      { path: '/transactions/legacy-1', status: 200 },
      { path: '/_matrix/app/v1/transactions/legacy-2', status: 200 },
      { path: '/users/%40nobody%3Alocalhost', status: 404, errcode: 'M_NOT_FOUND' },
      { path: '/rooms/%23nowhere%3Alocalhost', status: 404, errcode: 'M_NOT_FOUND' },
      { path: '/_matrix/app/v1/users/%40nobody%3Alocalhost', status: 404, errcode: 'M_NOT_FOUND' },
      { path: '/_matrix/app/v1/rooms/%23nowhere%3Alocalhost', status: 404, errcode: 'M_NOT_FOUND' },
    ]);
  }, 60_000);
});
