/**
 * Two server processes on one PostgreSQL database (here two apps in one test process, each with
 * its own pool, caches and coordinator connection, so everything between them goes through
 * PostgreSQL as between processes; test/e2e/cluster.test.ts runs real processes and kills one).
 * Runs on PostgreSQL whichever engine the rest of the run uses.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { holdExclusiveUse, openDatabase, DatabaseInUseError } from '../../src/storage/index.js';
import { client, type Json, type TestClient } from '../support/client.js';
import { createUser, startTestHomeserver, type TestHomeserver } from '../support/homeserver.js';
import { expectMatrixError } from '../support/spec-validator.js';
import { command, createWebhook, roomWithBridge } from '../support/bridge.js';
import { CrossSigningKey } from '../support/device-identity.js';
import { dropSchemas, TEST_SCHEMA_PREFIX } from '../support/postgres-setup.js';

const POSTGRES = process.env.BHS_TEST_POSTGRES ?? 'postgres://postgres@127.0.0.1:5432/test';
const schema = `${TEST_SCHEMA_PREFIX}${process.pid}_cluster`;
const dir = mkdtempSync(join(tmpdir(), 'bhs-cluster-'));
// One server, two processes: the same database, signing key and media store.
const shared = { database: { path: ':memory:', url: POSTGRES, schema, pool_size: 4 }, signing_key_path: join(dir, 'signing.key'), media_store_path: join(dir, 'media'), ip_range_whitelist: ['127.0.0.1/32'] };

let one: TestHomeserver;
let two: TestHomeserver;
beforeAll(async () => {
  one = await startTestHomeserver(shared);
  two = await startTestHomeserver(shared);
});
afterAll(async () => {
  await one?.close();
  await two?.close();
  await dropSchemas(POSTGRES, [schema]);
  rmSync(dir, { recursive: true, force: true });
});

/** The same account, as seen through each process. */
async function onBoth(localpart: string): Promise<[TestClient, TestClient]> {
  const user = await createUser(one, localpart);
  return [client(one, user), client(two, user)];
}

const path = (roomId: string) => `/rooms/${encodeURIComponent(roomId)}`;

describe('two processes on one database', () => {
  it('sends through both and long-polls through one: every event once, in stream order', async () => {
    const [aliceOne] = await onBoth('alice');
    const [, bobTwo] = await onBoth('bob');
    const roomId = await aliceOne.createRoom({ preset: 'public_chat' });
    await bobTwo.join(roomId);
    const first = await bobTwo.sync({ filter: JSON.stringify({ room: { timeline: { limit: 1 } } }) });
    let since = first.next_batch as string;
    const seen: string[] = [];
    const sends: Array<Promise<string>> = [];
    for (let i = 0; i < 40; i++) {
      sends.push(aliceOne.send(roomId, { msgtype: 'm.text', body: `one ${i}` }));
      sends.push(bobTwo.send(roomId, { msgtype: 'm.text', body: `two ${i}` }));
    }
    const polling = (async () => {
      const deadline = Date.now() + 20_000;
      while (seen.length < 80 && Date.now() < deadline) {
        const answer = await bobTwo.sync({ since, timeout: 5_000, filter: JSON.stringify({ room: { timeline: { limit: 100 } } }) });
        since = answer.next_batch as string;
        const timeline = answer.rooms?.join?.[roomId]?.timeline;
        // A limited timeline would mean a gap: the filter asks for more than is ever sent at once.
        if (timeline) expect(timeline.limited).toBe(false);
        for (const event of (timeline?.events ?? []) as Json[]) if (event.type === 'm.room.message') seen.push(event.event_id as string);
      }
    })();
    const sent = await Promise.all(sends);
    await polling;
    expect(seen).toHaveLength(80);
    expect(new Set(seen).size).toBe(80);
    expect(new Set(seen)).toEqual(new Set(sent));
    // In the order the room's history has them.
    const history = await aliceOne.ok('GET', `${path(roomId)}/messages`, undefined, { dir: 'f', limit: 200, from: first.rooms.join[roomId].timeline.prev_batch ?? '' });
    const ordered = (history.chunk as Json[]).filter((event) => event.type === 'm.room.message').map((event) => event.event_id as string);
    expect(seen).toEqual(ordered.slice(-80));
  });

  it('checks every write against what the other process wrote just before', async () => {
    const [aliceOne] = await onBoth('carol-admin');
    const [, malloryTwo] = await onBoth('mallory');
    const roomId = await aliceOne.createRoom({ preset: 'public_chat' });
    await malloryTwo.join(roomId);
    await malloryTwo.send(roomId, { msgtype: 'm.text', body: 'hello' });
    await aliceOne.ok('POST', `${path(roomId)}/ban`, { user_id: malloryTwo.userId, reason: 'spam' });
    expectMatrixError(await malloryTwo.request('PUT', `${path(roomId)}/send/m.room.message/after-ban`, { msgtype: 'm.text', body: 'still here?' }), 403, 'M_FORBIDDEN');
    // And the other way round: a name set through one is the state the other reads.
    await aliceOne.setState(roomId, 'm.room.name', '', { name: 'Ops' });
    const state = await client(two, aliceOne.user).ok('GET', `${path(roomId)}/state/m.room.name/`);
    expect(state.name).toBe('Ops');
  });

  it('lets a user send through one process right after joining through the other, before it has heard of the join', async () => {
    const [ownerOne] = await onBoth('join-then-send-owner');
    const [joinerOne, joinerTwo] = await onBoth('join-then-send');
    const roomId = await ownerOne.createRoom({ preset: 'public_chat' });
    // Process one hears of nothing the other commits until released: its caches stay behind.
    const cluster = one.services.cluster as unknown as { receive(payload: string): void };
    const receive = cluster.receive.bind(cluster);
    const held: string[] = [];
    cluster.receive = (payload) => void held.push(payload);
    let answer: Awaited<ReturnType<TestClient['request']>>;
    try {
      await joinerTwo.join(roomId);
      const sent = joinerOne.request('PUT', `${path(roomId)}/send/m.room.message/right-after-join`, { msgtype: 'm.text', body: 'hello' });
      // Judged on what process one knows, the sender is no member: the send must wait for the
      // join (under the lock, which catches up first), not be refused.
      await new Promise((resolve) => setTimeout(resolve, 100));
      cluster.receive = receive;
      for (const payload of held) receive(payload);
      answer = await sent;
    } finally {
      cluster.receive = receive;
    }
    expect(answer.status, JSON.stringify(answer.body)).toBe(200);
  });

  it('gives one event for a transaction id sent to both processes at once', async () => {
    const [daveOne, daveTwo] = await onBoth('dave');
    const roomId = await daveOne.createRoom({});
    const body = { msgtype: 'm.text', body: 'once' };
    const [a, b] = await Promise.all([daveOne.send(roomId, body, 'm.room.message', 'same-txn'), daveTwo.send(roomId, body, 'm.room.message', 'same-txn')]);
    expect(a).toBe(b);
    const history = await daveTwo.ok('GET', `${path(roomId)}/messages`, undefined, { dir: 'b', limit: 10 });
    expect((history.chunk as Json[]).filter((event) => event.content?.body === 'once')).toHaveLength(1);
  });

  it('wakes a sync parked on one process for typing, account data and to-device sent through the other', async () => {
    const [erinOne, erinTwo] = await onBoth('erin');
    const [frankOne, frankTwo] = await onBoth('frank');
    const roomId = await erinOne.createRoom({ preset: 'public_chat' });
    await frankOne.join(roomId);
    const start = (await frankTwo.sync()).next_batch as string;
    const typing = frankTwo.sync({ since: start, timeout: 10_000 });
    await erinOne.ok('PUT', `${path(roomId)}/typing/${encodeURIComponent(erinOne.userId)}`, { typing: true, timeout: 30_000 });
    const typed = await typing;
    const ephemeral = (typed.rooms?.join?.[roomId]?.ephemeral?.events ?? []) as Json[];
    expect(ephemeral.find((event) => event.type === 'm.typing')?.content.user_ids).toEqual([erinOne.userId]);

    const accountData = frankTwo.sync({ since: typed.next_batch, timeout: 10_000 });
    await frankOne.ok('PUT', `/user/${encodeURIComponent(frankOne.userId)}/account_data/org.example.settings`, { colour: 'teal' });
    const data = await accountData;
    expect((data.account_data?.events as Json[]).find((event) => event.type === 'org.example.settings')?.content).toEqual({ colour: 'teal' });
    // The cached account data of the other process was dropped too.
    expect((await frankTwo.ok('GET', `/user/${encodeURIComponent(frankOne.userId)}/account_data/org.example.settings`)).colour).toBe('teal');

    const toDevice = erinTwo.sync({ since: (await erinTwo.sync()).next_batch, timeout: 10_000 });
    await frankOne.ok('PUT', '/sendToDevice/org.example.ping/td1', { messages: { [erinOne.userId]: { [erinOne.user.deviceId]: { n: 1 } } } });
    const delivered = await toDevice;
    expect((delivered.to_device?.events as Json[]).map((event) => event.content)).toEqual([{ n: 1 }]);
  });

  it('tells a user syncing through one process of the signature of another’s master key they made through the other', async () => {
    const [ivyOne, ivyTwo] = await onBoth('ivy');
    const [jackOne] = await onBoth('jack');
    const master = new CrossSigningKey(ivyOne.userId, 'master');
    const userSigning = new CrossSigningKey(ivyOne.userId, 'user_signing');
    await ivyOne.ok('POST', '/keys/device_signing/upload', { master_key: master.object(), user_signing_key: userSigning.object(master) });
    const jackMaster = new CrossSigningKey(jackOne.userId, 'master');
    await jackOne.ok('POST', '/keys/device_signing/upload', { master_key: jackMaster.object() });
    // A sync through the second process after a change written there: that process has read the
    // newest device-list change, and must learn of the next one from the first process's commit.
    const start = (await ivyTwo.sync()).next_batch as string;
    await ivyTwo.ok('PUT', `/user/${encodeURIComponent(ivyTwo.userId)}/account_data/org.example.settings`, { colour: 'plum' });
    const before = await ivyTwo.sync({ since: start });
    const signed = ivyTwo.sync({ since: before.next_batch, timeout: 10_000 });
    await ivyOne.ok('POST', '/keys/signatures/upload', { [jackOne.userId]: { [jackMaster.publicKey]: userSigning.sign(jackMaster.object()) } });
    expect((await signed).device_lists?.changed).toEqual([jackOne.userId]);
  });

  it('wakes a peek (/events?room_id= of a world-readable room) parked on one process for a message and typing through the other', async () => {
    const [ginaOne] = await onBoth('gina');
    const [, hankTwo] = await onBoth('hank');
    const roomId = await ginaOne.createRoom({ preset: 'public_chat', initial_state: [{ type: 'm.room.history_visibility', state_key: '', content: { history_visibility: 'world_readable' } }] });
    const start = (await hankTwo.ok('GET', '/events', undefined, { room_id: roomId, timeout: 0 })).end as string;
    const parked = hankTwo.ok('GET', '/events', undefined, { room_id: roomId, from: start, timeout: 10_000 });
    await new Promise((resolve) => setTimeout(resolve, 200));
    const sentAt = performance.now();
    const sent = await ginaOne.send(roomId, { msgtype: 'm.text', body: 'over there' });
    const woken = await parked;
    expect((woken.chunk as Json[]).map((event) => event.event_id)).toContain(sent);
    // Woken by the commit, not answered at the timeout.
    expect(performance.now() - sentAt).toBeLessThan(8_000);
    // (Not through the test client: its spec check wants every chunk entry a room event, and the
    // legacy stream carries typing and receipts as Synapse's does.)
    const typing = two.http
      .get(`/_matrix/client/v3/events?room_id=${encodeURIComponent(roomId)}&from=${encodeURIComponent(woken.end as string)}&timeout=10000`)
      .auth(hankTwo.user.accessToken, { type: 'bearer' })
      .then((res) => res);
    await new Promise((resolve) => setTimeout(resolve, 200));
    const typedAt = performance.now();
    await ginaOne.ok('PUT', `${path(roomId)}/typing/${encodeURIComponent(ginaOne.userId)}`, { typing: true, timeout: 30_000 });
    expect(((await typing).body.chunk as Json[]).find((event) => event.type === 'm.typing')?.content.user_ids).toEqual([ginaOne.userId]);
    expect(performance.now() - typedAt).toBeLessThan(8_000);
  });

  it('has the process that sends look at its outboxes after a message written through the other', async () => {
    const [ruthOne] = await onBoth('ruth');
    const roomId = await ruthOne.createRoom({});
    const [sender, writer] = one.services.federationSender.running ? [one, two] : [two, one];
    expect(writer.services.federationSender.running).toBe(false);
    let looks = 0;
    const lookAgain = sender.services.federationSender.lookAgain.bind(sender.services.federationSender);
    sender.services.federationSender.lookAgain = async () => {
      looks++;
      await lookAgain();
    };
    try {
      await client(writer, ruthOne.user).send(roomId, { msgtype: 'm.text', body: 'for the other servers, if any' });
      await expect.poll(() => looks, { timeout: 5_000 }).toBeGreaterThan(0);
    } finally {
      sender.services.federationSender.lookAgain = lookAgain;
    }
  });

  it('ends a session everywhere when it is logged out through one process', async () => {
    const [graceOne, graceTwo] = await onBoth('grace');
    await graceTwo.ok('GET', '/account/whoami');
    await graceOne.ok('POST', '/logout', {});
    const deadline = Date.now() + 5_000;
    let answer = await graceTwo.request('GET', '/account/whoami');
    // The other process hears of it through the token trigger's notification, within milliseconds.
    while (answer.status === 200 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      answer = await graceTwo.request('GET', '/account/whoami');
    }
    expectMatrixError(answer, 401, 'M_UNKNOWN_TOKEN');
  });

  it('runs each job in exactly one process, and the other takes it over when that one stops', async () => {
    const jobs = ['maintenance', 'federation-sender', 'appservice-sender', 'pusher-sender'];
    const holders = async () => {
      const deadline = Date.now() + 5_000;
      for (;;) {
        const held = jobs.map((job) => [one, two].filter((hs) => hs.services.cluster?.holds(job)).length);
        if (held.every((count) => count === 1) || Date.now() > deadline) return held;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    };
    expect(await holders()).toEqual([1, 1, 1, 1]);
    const third = await startTestHomeserver(shared);
    try {
      expect(jobs.map((job) => third.services.cluster?.holds(job))).toEqual([false, false, false, false]);
      // The holders stop; the third process takes every job over within a few seconds.
      await one.close();
      await two.close();
      const deadline = Date.now() + 10_000;
      while (!jobs.every((job) => third.services.cluster?.holds(job)) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
      expect(jobs.map((job) => third.services.cluster?.holds(job))).toEqual([true, true, true, true]);
      expect(third.services.federationSender.running).toBe(true);
    } finally {
      await third.close();
      one = await startTestHomeserver(shared);
      two = await startTestHomeserver(shared);
    }
  });

  it('pushes each notification once, from the process that holds the pusher lease, whichever process the pusher and message came through', async () => {
    const pushes: Json[] = [];
    const gateway = createServer((request, response) => {
      const chunks: Buffer[] = [];
      request.on('data', (chunk: Buffer) => chunks.push(chunk));
      request.on('end', () => {
        pushes.push(JSON.parse(Buffer.concat(chunks).toString('utf8')) as Json);
        response.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      });
    });
    await new Promise<void>((resolve) => gateway.listen(0, '127.0.0.1', resolve));
    try {
      const url = `http://127.0.0.1:${(gateway.address() as AddressInfo).port}/_matrix/push/v1/notify`;
      const [carolOne, carolTwo] = await onBoth('pushed');
      const [, daveTwo] = await onBoth('pusher');
      const roomId = await daveTwo.createRoom();
      await daveTwo.invite(roomId, carolOne.userId);
      await carolOne.join(roomId);
      // Set through the process that does not deliver, if it is the second.
      const setter = two.services.pusherSender.running ? carolOne : carolTwo;
      await setter.ok('POST', '/pushers/set', { pushkey: 'k', kind: 'http', app_id: 'app', app_display_name: 'App', device_display_name: 'Phone', lang: 'en', data: { url } });
      await new Promise((resolve) => setTimeout(resolve, 300));
      const sent = [await daveTwo.send(roomId, { msgtype: 'm.text', body: 'a' }), await carolOne.send(roomId, { msgtype: 'm.text', body: 'mine' }), await daveTwo.send(roomId, { msgtype: 'm.text', body: 'b' })];
      const deadline = Date.now() + 10_000;
      while (pushes.length < 2 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(pushes.map((push) => push.notification.event_id)).toEqual([sent[0], sent[2]]);
    } finally {
      await new Promise((resolve) => gateway.close(resolve));
    }
  });

  it('keeps migrate-to-postgres out while servers run on the database', async () => {
    const db = openDatabase({ path: ':memory:', url: POSTGRES, schema, pool_size: 2, synchronous: 'full' });
    try {
      await expect(holdExclusiveUse(db)).rejects.toBeInstanceOf(DatabaseInUseError);
    } finally {
      await db.destroy();
    }
  });
});

describe('rate limits across processes', () => {
  it('counts failed logins made through one process when the next comes through the other', async () => {
    const limitedSchema = `${schema}_limits`;
    const limited = {
      ...shared,
      database: { ...shared.database, schema: limitedSchema },
      ratelimiting_enabled: true,
      rc_message: { per_second: 1000, burst_count: 1000 },
      rc_login: { address: { per_second: 1000, burst_count: 1000 }, account: { per_second: 1000, burst_count: 1000 }, failed_attempts: { per_second: 0.01, burst_count: 3 } },
    };
    const first = await startTestHomeserver(limited);
    const second = await startTestHomeserver(limited);
    try {
      await first.services.accounts.createUser({ localpart: 'heidi', password: 'right-password' });
      const attempt = (hs: TestHomeserver, password: string) =>
        hs.http.post('/_matrix/client/v3/login').send({ type: 'm.login.password', identifier: { type: 'm.id.user', user: 'heidi' }, password });
      for (let i = 0; i < 3; i++) expect((await attempt(first, `guess-${i}`)).status).toBe(403);
      // The other process hears of the three (a notification each, within milliseconds)...
      const deadline = Date.now() + 5_000;
      while (second.services.limiters.loginFailed.size === 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
      await new Promise((resolve) => setTimeout(resolve, 50));
      // ...so the fourth guess, its first, is refused.
      expectMatrixError(await attempt(second, 'guess-3'), 429, 'M_LIMIT_EXCEEDED');
    } finally {
      await first.close();
      await second.close();
      await dropSchemas(POSTGRES, [limitedSchema]);
    }
  });
});

describe('the bridge across processes', () => {
  it('serves a webhook through every process, and stops in all of them when it is removed', async () => {
    const bridgeSchema = `${schema}_bridge`;
    const config = { ...shared, database: { ...shared.database, schema: bridgeSchema }, bridge: { enabled: true } };
    const first = await startTestHomeserver(config);
    const second = await startTestHomeserver(config);
    try {
      // The first process runs the bridge (it took the lease); the webhook works in both.
      expect(first.services.cluster?.holds('bridge')).toBe(true);
      const owner = client(first, await createUser(first, 'ivan'));
      const roomId = await roomWithBridge(first, owner);
      const webhook = await createWebhook(first, owner, roomId, 'ci');
      expect((await second.http.post(webhook.path).send({ text: 'through the second process' })).status).toBe(200);
      await owner.waitForEvent(roomId, (event) => event.content?.body === 'through the second process');
      // Removed through the bridge (in the first process): the second forgets the webhook it cached.
      await command(first, owner, roomId, '!bridge webhook remove ci');
      const deadline = Date.now() + 5_000;
      let status = (await second.http.post(webhook.path).send({ text: 'too late' })).status;
      while (status === 200 && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 20));
        status = (await second.http.post(webhook.path).send({ text: 'too late' })).status;
      }
      expect(status).toBe(404);
    } finally {
      await first.close();
      await second.close();
      await dropSchemas(POSTGRES, [bridgeSchema]);
    }
  });
});

describe('federation transactions across processes', () => {
  /** The transaction a.test sends when its first attempt timed out and the retry reached the other process. */
  const transactionTo = (user: { userId: string; deviceId: string }, body: string) => ({
    origin: 'a.test',
    pdus: [],
    edus: [{ edu_type: 'm.direct_to_device', content: { sender: '@bot:a.test', type: 'm.room_key_request', message_id: body, messages: { [user.userId]: { [user.deviceId]: { body } } } } }],
  });

  /**
   * Makes one process slow to apply transactions (and, with `fail`, fail before it applied
   * anything), as a busy process, or one going down, would be.
   */
  function slowTransactions(hs: TestHomeserver, fail = false): () => void {
    const federation = hs.services.roomFederation as unknown as { applyPdus(origin: string, pdus: unknown[]): Promise<unknown> };
    const original = federation.applyPdus;
    federation.applyPdus = async (origin, pdus) => {
      await new Promise((resolve) => setTimeout(resolve, 300));
      if (fail) throw new Error('the process went down mid-transaction');
      return original.call(federation, origin, pdus);
    };
    return () => {
      federation.applyPdus = original;
    };
  }

  it('applies a transaction sent to both processes at once in one of them, and answers both', async () => {
    const user = await createUser(one, 'judy');
    const restore = slowTransactions(one);
    try {
      const body = transactionTo(user, 'once');
      const first = one.services.roomFederation.transaction('a.test', 'retried-1', body);
      await new Promise((resolve) => setTimeout(resolve, 50));
      const second = await two.services.roomFederation.transaction('a.test', 'retried-1', body);
      expect(second).toEqual(await first);
    } finally {
      restore();
    }
    expect(await one.services.storage.deviceInbox.countFor(user.userId, user.deviceId)).toBe(1);
  });

  it('applies it in the other process when the first let it go unanswered', async () => {
    const user = await createUser(one, 'kim');
    const restore = slowTransactions(one, true);
    try {
      const body = transactionTo(user, 'after a failure');
      const first = one.services.roomFederation.transaction('a.test', 'retried-2', body).catch((err: Error) => err);
      await new Promise((resolve) => setTimeout(resolve, 50));
      const second = await two.services.roomFederation.transaction('a.test', 'retried-2', body);
      expect(await first).toBeInstanceOf(Error);
      expect(second).toEqual({ pdus: {} });
    } finally {
      restore();
    }
    expect(await one.services.storage.deviceInbox.countFor(user.userId, user.deviceId)).toBe(1);
  });
});
