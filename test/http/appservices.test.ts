/**
 * Application services on this server: registration files, the client API as an appservice
 * (as_token, masquerading, registering namespaced users, exclusive namespaces, ping), and the
 * transactions pushed to it, in order and surviving restarts of either side.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { client, type Json } from '../support/client.js';
import { createUser, SERVER_NAME, startTestHomeserver, type TestHomeserver } from '../support/homeserver.js';
import { expectMatchesSpec, expectMatrixError, validateAppserviceTransaction } from '../support/spec-validator.js';
import { persistentDatabase } from '../support/test-schemas.js';

/** A stand-in appservice: records what the homeserver sends, answers as told. */
class FakeAppservice {
  readonly transactions: Array<{ txnId: string; body: Json; auth: string | undefined }> = [];
  readonly queries: string[] = [];
  /** Every transaction tried, answered or not: its id and its events' ids. */
  readonly attempts: Array<{ txnId: string; eventIds: string[] }> = [];
  status = 200;
  onQuery: (path: string) => Promise<number> = async () => 404;
  private server: Server | undefined;
  port = 0;

  async start(port = 0): Promise<void> {
    this.server = createServer((req, res) => void this.handle(req).then(([status, body]) => res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body))));
    await new Promise<void>((resolve) => this.server!.listen(port, '127.0.0.1', resolve));
    this.port = (this.server!.address() as AddressInfo).port;
  }

  async stop(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
    this.server = undefined;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  events(): Json[] {
    return this.transactions.flatMap((txn) => txn.body.events as Json[]);
  }

  async waitFor<T>(check: () => T | undefined, what: string): Promise<T> {
    const deadline = Date.now() + 10_000;
    for (;;) {
      const value = check();
      if (value !== undefined && value !== false) return value;
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  private async handle(req: IncomingMessage): Promise<[number, unknown]> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const path = decodeURIComponent(req.url!.split('?')[0]!);
    const auth = req.headers.authorization;
    if (auth !== 'Bearer hs-secret') return [403, { errcode: 'M_FORBIDDEN' }];
    if (req.method === 'PUT' && path.startsWith('/_matrix/app/v1/transactions/')) {
      const txnId = path.slice('/_matrix/app/v1/transactions/'.length);
      const body = JSON.parse(Buffer.concat(chunks).toString()) as Json;
      this.attempts.push({ txnId, eventIds: (body.events as Json[]).map((e) => e.event_id as string) });
      if (this.status !== 200) return [this.status, {}];
      this.transactions.push({ txnId, body, auth });
      return [200, {}];
    }
    if (req.method === 'POST' && path === '/_matrix/app/v1/ping') return [this.status, {}];
    if (req.method === 'GET') {
      this.queries.push(path);
      return [await this.onQuery(path), {}];
    }
    return [404, { errcode: 'M_UNRECOGNIZED' }];
  }
}

let dir: string;
let appservice: FakeAppservice;
let hs: TestHomeserver | undefined;

function registrationFile(url: string | null, extra = ''): string {
  const file = join(dir, 'registration.yaml');
  writeFileSync(
    file,
    `id: irc-bridge
url: ${url === null ? 'null' : url}
as_token: as-secret
hs_token: hs-secret
sender_localpart: ircbot
rate_limited: false
receive_ephemeral: true
namespaces:
  users:
    - exclusive: true
      regex: '@_irc_.*:${SERVER_NAME.replace('.', '\\.')}'
  aliases:
    - exclusive: true
      regex: '#_irc_.*'
  rooms: []
${extra}`,
  );
  return file;
}

async function start(url: string | null = appservice.url): Promise<TestHomeserver> {
  hs = await startTestHomeserver({
    app_service_config_files: [registrationFile(url)],
    ...persistentDatabase(join(dir, 'homeserver.db')),
    federation: { min_retry_interval: '20ms', max_retry_interval: '100ms' },
  });
  return hs;
}

/** A client of the appservice: its as_token, optionally acting as one of its users. */
function asAppservice(server: TestHomeserver, userId?: string) {
  const query = userId === undefined ? '' : `${'?'}user_id=${encodeURIComponent(userId)}`;
  return {
    get: (path: string) => server.http.get(`/_matrix/client/v3${path}${query}`).set('authorization', 'Bearer as-secret'),
    post: (path: string, body: object) => server.http.post(`/_matrix/client/v3${path}${query}`).set('authorization', 'Bearer as-secret').send(body),
    put: (path: string, body: object) => server.http.put(`/_matrix/client/v3${path}${query}`).set('authorization', 'Bearer as-secret').send(body),
  };
}

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'bhs-appservice-'));
  appservice = new FakeAppservice();
  await appservice.start();
});
afterEach(async () => {
  await hs?.close();
  hs = undefined;
  await appservice.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('the client API as an appservice', () => {
  it('acts as its sender, registers users of its namespace and masquerades as them', async () => {
    const server = await start();
    const as = asAppservice(server);
    const whoami0 = await as.get('/account/whoami');
    expect(whoami0.body).toEqual({ user_id: `@ircbot:${SERVER_NAME}`, is_guest: false });
    expectMatchesSpec('GET', '/_matrix/client/v3/account/whoami', whoami0);

    // Registering: only in its namespace; no password, no login unless asked.
    const registered = await as.post('/register', { type: 'm.login.application_service', username: '_irc_alice' });
    expect(registered.status).toBe(200);
    expect(registered.body).toMatchObject({ user_id: `@_irc_alice:${SERVER_NAME}`, access_token: expect.any(String) });
    expectMatchesSpec('POST', '/_matrix/client/v3/register', registered);
    expectMatrixError(await as.post('/register', { type: 'm.login.application_service', username: 'alice' }), 400, 'M_EXCLUSIVE');
    // SDKs register the sender as well and take "in use" as "there already".
    expectMatrixError(await as.post('/register', { type: 'm.login.application_service', username: 'ircbot' }), 400, 'M_USER_IN_USE');
    expectMatrixError(await server.http.post('/_matrix/client/v3/login').send({ type: 'm.login.password', user: 'ircbot', password: 'anything' }), 403, 'M_FORBIDDEN');
    expectMatrixError(await server.http.post('/_matrix/client/v3/register').send({ type: 'm.login.application_service', username: '_irc_bob' }), 401, 'M_MISSING_TOKEN');

    // Logging in (spec v1.2): a device of its own for its sender or a user of its namespace, by as_token only.
    const login = await as.post('/login', { type: 'm.login.application_service', identifier: { type: 'm.id.user', user: 'ircbot' }, device_id: 'BRIDGEDEVICE' });
    expect(login.status).toBe(200);
    expect(login.body).toMatchObject({ user_id: `@ircbot:${SERVER_NAME}`, device_id: 'BRIDGEDEVICE', access_token: expect.any(String) });
    expectMatchesSpec('POST', '/_matrix/client/v3/login', login);
    const byDevice = await server.http.get('/_matrix/client/v3/account/whoami').set('authorization', `Bearer ${login.body.access_token}`);
    expect(byDevice.body).toEqual({ user_id: `@ircbot:${SERVER_NAME}`, device_id: 'BRIDGEDEVICE', is_guest: false });
    expectMatrixError(await as.post('/login', { type: 'm.login.application_service', identifier: { type: 'm.id.user', user: 'alice' } }), 403, 'M_FORBIDDEN');
    expectMatrixError(await server.http.post('/_matrix/client/v3/login').send({ type: 'm.login.application_service', identifier: { type: 'm.id.user', user: 'ircbot' } }), 401, 'M_MISSING_TOKEN');

    // Masquerading: as a registered user of its namespace only.
    const alice = asAppservice(server, `@_irc_alice:${SERVER_NAME}`);
    expect((await alice.get('/account/whoami')).body.user_id).toBe(`@_irc_alice:${SERVER_NAME}`);
    expectMatrixError(await asAppservice(server, `@_irc_nobody:${SERVER_NAME}`).get('/account/whoami'), 403, 'M_FORBIDDEN');
    const person = await createUser(server, 'person');
    expectMatrixError(await asAppservice(server, person.userId).get('/account/whoami'), 403, 'M_FORBIDDEN');
    // Only an as_token may masquerade: a user's ?user_id= is ignored.
    const whoami = await server.http.get(`/_matrix/client/v3/account/whoami?user_id=${encodeURIComponent(`@_irc_alice:${SERVER_NAME}`)}`).set('authorization', `Bearer ${person.accessToken}`);
    expect(whoami.body.user_id).toBe(person.userId);

    // The sender is a service user: nobody may register it or log in as it.
    const roomId = (await alice.post('/createRoom', { preset: 'public_chat' })).body.room_id as string;
    const sent = await alice.put(`/rooms/${encodeURIComponent(roomId)}/send/m.room.message/t1`, { msgtype: 'm.text', body: 'from IRC' });
    expect(sent.status).toBe(200);
    // Transaction ids are the appservice's: the same one again is the same event.
    const again = await alice.put(`/rooms/${encodeURIComponent(roomId)}/send/m.room.message/t1`, { msgtype: 'm.text', body: 'from IRC' });
    expect(again.body.event_id).toBe(sent.body.event_id);
  });

  it('keeps exclusive namespaces from everyone else', async () => {
    const server = await start();
    await server.close();
    hs = await startTestHomeserver({ app_service_config_files: [registrationFile(appservice.url)], enable_registration: true });
    const open = await hs.http.post('/_matrix/client/v3/register').send({ username: '_irc_mallory', password: 'a long password', auth: { type: 'm.login.dummy' } });
    expect(open.status).toBe(400);
    const person = client(hs, await createUser(hs, 'person'));
    const roomId = await person.createRoom({});
    const aliasClaim = await hs.http.put(`/_matrix/client/v3/directory/room/${encodeURIComponent(`#_irc_chan:${SERVER_NAME}`)}`).set('authorization', `Bearer ${person.user.accessToken}`).send({ room_id: roomId });
    expectMatrixError(aliasClaim, 400, 'M_EXCLUSIVE');
    expectMatrixError(await hs.http.post('/_matrix/client/v3/createRoom').set('authorization', `Bearer ${person.user.accessToken}`).send({ room_alias_name: '_irc_other' }), 400, 'M_EXCLUSIVE');
    // The appservice itself may.
    const sender = asAppservice(hs);
    const own = (await sender.post('/createRoom', { room_alias_name: '_irc_ours' })).body;
    expect(own.room_id).toEqual(expect.any(String));
  });

  it('asks the appservice about unknown users and aliases of its namespaces', async () => {
    const server = await start();
    const as = asAppservice(server);
    appservice.onQuery = async (path) => {
      if (path === `/_matrix/app/v1/users/@_irc_carol:${SERVER_NAME}`) {
        await as.post('/register', { type: 'm.login.application_service', username: '_irc_carol', inhibit_login: true });
        return 200;
      }
      if (path === `/_matrix/app/v1/rooms/#_irc_lobby:${SERVER_NAME}`) {
        const roomId = (await as.post('/createRoom', { room_alias_name: '_irc_lobby' })).body.room_id;
        return roomId ? 200 : 500;
      }
      return 404;
    };
    const person = client(server, await createUser(server, 'person'));
    const profile = await person.ok('GET', `/profile/${encodeURIComponent(`@_irc_carol:${SERVER_NAME}`)}`);
    expect(profile.displayname).toBe('_irc_carol');
    const resolved = await person.ok('GET', `/directory/room/${encodeURIComponent(`#_irc_lobby:${SERVER_NAME}`)}`);
    expect(resolved.room_id).toEqual(expect.any(String));
    expect((await server.http.get(`/_matrix/client/v3/profile/${encodeURIComponent(`@_irc_dave:${SERVER_NAME}`)}`)).status).toBe(404);
    expect(appservice.queries).toEqual([`/_matrix/app/v1/users/@_irc_carol:${SERVER_NAME}`, `/_matrix/app/v1/rooms/#_irc_lobby:${SERVER_NAME}`, `/_matrix/app/v1/users/@_irc_dave:${SERVER_NAME}`]);
  });

  it('pings the appservice, and says why when it cannot', async () => {
    const server = await start();
    const ping = await server.http.post('/_matrix/client/v1/appservice/irc-bridge/ping').set('authorization', 'Bearer as-secret').send({ transaction_id: 'p1' });
    expect(ping.status).toBe(200);
    expect(ping.body.duration_ms).toEqual(expect.any(Number));
    expectMatchesSpec('POST', '/_matrix/client/v1/appservice/irc-bridge/ping', ping);
    appservice.status = 500;
    expectMatrixError(await server.http.post('/_matrix/client/v1/appservice/irc-bridge/ping').set('authorization', 'Bearer as-secret').send({}), 502, 'M_BAD_STATUS');
    await appservice.stop();
    expectMatrixError(await server.http.post('/_matrix/client/v1/appservice/irc-bridge/ping').set('authorization', 'Bearer as-secret').send({}), 502, 'M_CONNECTION_FAILED');
    const person = await createUser(server, 'person');
    expectMatrixError(await server.http.post('/_matrix/client/v1/appservice/irc-bridge/ping').set('authorization', `Bearer ${person.accessToken}`).send({}), 403, 'M_FORBIDDEN');
  });
});

describe('transactions to the appservice', () => {
  it('carry the events of its rooms in order, with typing and receipts, and nothing of other rooms', async () => {
    const server = await start();
    const as = asAppservice(server);
    await as.post('/register', { type: 'm.login.application_service', username: '_irc_alice', inhibit_login: true });
    const person = client(server, await createUser(server, 'person'));
    const shared = await person.createRoom({ preset: 'public_chat' });
    const elsewhere = await person.createRoom({ preset: 'public_chat' });
    const alice = asAppservice(server, `@_irc_alice:${SERVER_NAME}`);
    expect((await alice.post(`/join/${encodeURIComponent(shared)}`, {})).status).toBe(200);
    const sent: string[] = [];
    for (let i = 0; i < 5; i++) sent.push(await person.send(shared, { msgtype: 'm.text', body: `hello ${i}` }));
    await person.send(elsewhere, { msgtype: 'm.text', body: 'not for the bridge' });
    await person.ok('PUT', `/rooms/${encodeURIComponent(shared)}/typing/${encodeURIComponent(person.userId)}`, { typing: true, timeout: 10_000 });

    await appservice.waitFor(() => sent.every((id) => appservice.events().some((e) => e.event_id === id)), 'the messages');
    const ids = appservice.events().map((e) => e.event_id);
    expect(ids.filter((id) => sent.includes(id))).toEqual(sent);
    expect(new Set(ids).size).toBe(ids.length);
    expect(appservice.events().some((e) => e.room_id === elsewhere)).toBe(false);
    // Every transaction is what the Application Service API says a homeserver sends.
    for (const txn of appservice.transactions) expect(validateAppserviceTransaction(txn.body)).toEqual([]);
    expect(validateAppserviceTransaction({ events: [{ type: 'm.room.message' }] })).not.toEqual([]);
    expect(appservice.events().find((e) => e.type === 'm.room.member' && e.state_key === `@_irc_alice:${SERVER_NAME}`)).toBeDefined();
    const typing = await appservice.waitFor(() => appservice.transactions.flatMap((t) => (t.body.ephemeral ?? []) as Json[]).find((e) => e.type === 'm.typing'), 'typing');
    expect(typing).toMatchObject({ room_id: shared, content: { user_ids: [person.userId] } });
  });

  it('lose nothing while the appservice is down or the homeserver restarts, and keep a retried transaction whole', async () => {
    let server = await start();
    const as = asAppservice(server);
    await as.post('/register', { type: 'm.login.application_service', username: '_irc_alice', inhibit_login: true });
    const person = client(server, await createUser(server, 'person', { password: 'pw-person-1' }));
    const roomId = await person.createRoom({ preset: 'public_chat' });
    await asAppservice(server, `@_irc_alice:${SERVER_NAME}`).post(`/join/${encodeURIComponent(roomId)}`, {});
    await appservice.waitFor(() => appservice.events().length > 0, 'the join');
    const seenBefore = appservice.events().length;

    appservice.status = 503;
    const sent: string[] = [];
    for (let i = 0; i < 3; i++) sent.push(await person.send(roomId, { msgtype: 'm.text', body: `while down ${i}` }));
    // The homeserver restarts while the appservice is down: the queue is on disk.
    await server.close();
    server = hs = await start();
    const again = client(server, { ...person.user, accessToken: (await server.http.post('/_matrix/client/v3/login').send({ type: 'm.login.password', user: 'person', password: 'pw-person-1' })).body.access_token });
    sent.push(await again.send(roomId, { msgtype: 'm.text', body: 'after restart' }));
    appservice.status = 200;
    await appservice.waitFor(() => sent.every((id) => appservice.events().some((e) => e.event_id === id)), 'every message');
    const after = appservice.events().slice(seenBefore).map((e) => e.event_id);
    expect(after.filter((id) => sent.includes(id))).toEqual(sent);
    expect(new Set(appservice.transactions.map((t) => t.txnId)).size).toBe(appservice.transactions.length);
    // The transaction refused first came again whole, under the same id, after the restart too.
    const refused = appservice.attempts.find((a) => a.eventIds.includes(sent[0]!))!;
    const taken = appservice.transactions.find((t) => t.txnId === refused.txnId)!;
    expect((taken.body.events as Json[]).map((e) => e.event_id)).toEqual(refused.eventIds);
  });
});

describe('an appservice back after a failure', () => {
  it('gets its waiting transaction when it makes a request of its own, not at the end of the wait', async () => {
    // A wait of an hour after a failure: only the appservice's own request can bring the retry forward.
    hs = await startTestHomeserver({ app_service_config_files: [registrationFile(appservice.url)], federation: { min_retry_interval: '1h', max_retry_interval: '1h' } });
    const person = client(hs, await createUser(hs, 'person'));
    const roomId = await person.createRoom({ preset: 'public_chat' });
    const as = asAppservice(hs);
    await as.post('/register', { type: 'm.login.application_service', username: '_irc_alice', inhibit_login: true });
    expect((await asAppservice(hs, `@_irc_alice:${SERVER_NAME}`).post(`/join/${encodeURIComponent(roomId)}`, {})).status).toBe(200);
    await appservice.waitFor(() => appservice.transactions.length > 0, 'the join');
    appservice.status = 503;
    const attempted = appservice.attempts.length;
    const sent = await person.send(roomId, { msgtype: 'm.text', body: 'while it restarts' });
    await appservice.waitFor(() => appservice.attempts.length > attempted, 'the refused attempt');
    appservice.status = 200;
    // Back up (as a bridge starting): its first request tells the homeserver so.
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    expect((await as.get('/account/whoami')).status).toBe(200);
    await appservice.waitFor(() => appservice.events().some((event) => event.event_id === sent), 'the message after the whoami');
  });

  it('gets it a second after the failure when its request comes sooner (a bridge restarted at once)', async () => {
    hs = await startTestHomeserver({ app_service_config_files: [registrationFile(appservice.url)], federation: { min_retry_interval: '1h', max_retry_interval: '1h' } });
    const person = client(hs, await createUser(hs, 'person'));
    const roomId = await person.createRoom({ preset: 'public_chat' });
    const as = asAppservice(hs);
    await as.post('/register', { type: 'm.login.application_service', username: '_irc_alice', inhibit_login: true });
    expect((await asAppservice(hs, `@_irc_alice:${SERVER_NAME}`).post(`/join/${encodeURIComponent(roomId)}`, {})).status).toBe(200);
    await appservice.waitFor(() => appservice.transactions.length > 0, 'the join');
    appservice.status = 503;
    const attempted = appservice.attempts.length;
    const sent = await person.send(roomId, { msgtype: 'm.text', body: 'while it restarts' });
    await appservice.waitFor(() => appservice.attempts.length > attempted, 'the refused attempt');
    appservice.status = 200;
    // Its only request comes at once, within the second after the failure; nothing else follows.
    expect((await as.get('/account/whoami')).status).toBe(200);
    const before = appservice.attempts.length;
    await appservice.waitFor(() => appservice.events().some((event) => event.event_id === sent), 'the message a second after the failure');
    // One try, at the end of the second, not one per request.
    expect(appservice.attempts.length - before).toBe(1);
  });
});

describe('registration files', () => {
  it('are refused at start with the file and key named', async () => {
    const file = registrationFile(appservice.url);
    const broken = join(dir, 'broken.yaml');
    writeFileSync(broken, 'id: x\nas_token: a\nhs_token: b\nsender_localpart: s\nnamespaces:\n  users:\n    - exclusive: maybe\n      regex: "@x_.*"\n');
    await expect(startTestHomeserver({ app_service_config_files: [broken] })).rejects.toThrow(/broken\.yaml: namespaces\.users\[0\]\.exclusive must be true or false/);
    await expect(startTestHomeserver({ app_service_config_files: [file, file] })).rejects.toThrow(/id is also used by/);
    await expect(startTestHomeserver({ app_service_config_files: [join(dir, 'missing.yaml')] })).rejects.toThrow(/cannot read .*missing\.yaml/);
    // The bridge run as an appservice of this server: its user is not also this server's own bridge.
    const bridge = join(dir, 'bridge.yaml');
    writeFileSync(bridge, 'id: bridge\nurl: null\nas_token: bridge-as\nhs_token: bridge-hs\nsender_localpart: bridge\nnamespaces:\n  users: []\n');
    await expect(startTestHomeserver({ app_service_config_files: [bridge], bridge: { enabled: true } })).rejects.toThrow(/bridge\.yaml: the appservice claims @bridge:\S+, the user of this server's own bridge.*set bridge\.enabled: false/);
    // The registration "bot-homeserver bridge registration" prints: the bridge user in its exclusive namespace.
    writeFileSync(bridge, 'id: bridge\nurl: null\nas_token: bridge-as\nhs_token: bridge-hs\nsender_localpart: bridge-appservice\nnamespaces:\n  users:\n    - exclusive: true\n      regex: "^@bridge:.*$"\n');
    await expect(startTestHomeserver({ app_service_config_files: [bridge], bridge: { enabled: true } })).rejects.toThrow(/the appservice claims @bridge:\S+, the user of this server's own bridge/);
  });

  it('refuse a namespace that backtracks catastrophically, and /register/available stays a normal answer', async () => {
    // With this namespace, /register/available?username=<32 a's> (no account needed) held the
    // event loop for 12 s, tripling with every two more characters.
    const slow = join(dir, 'slow.yaml');
    writeFileSync(slow, `id: slow\nas_token: slow-as\nhs_token: slow-hs\nsender_localpart: slowbot\nnamespaces:\n  users:\n    - exclusive: true\n      regex: '@(a+)+b:hs\\.test'\n`);
    await expect(startTestHomeserver({ app_service_config_files: [slow], enable_registration: true })).rejects.toThrow(
      /slow\.yaml: namespaces\.users\[0\]\.regex "@\(a\+\)\+b:hs\\\\.test" could take exponential time/,
    );
    hs = await startTestHomeserver({ app_service_config_files: [registrationFile(null)], enable_registration: true });
    const available = await hs.http.get('/_matrix/client/v3/register/available').query({ username: 'a'.repeat(32) });
    expect(available.status).toBe(200);
    expect(available.body).toEqual({ available: true });
    const tooLong = await hs.http.get('/_matrix/client/v3/register/available').query({ username: 'a'.repeat(300) });
    expectMatrixError(tooLong, 400, 'M_INVALID_USERNAME');
  });
});
