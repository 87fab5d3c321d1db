/**
 * Delivery to push gateways (HTTP pushers): what a message makes us POST to a gateway, the
 * `event_id_only` format, the badge after a read receipt, a rejected pushkey, a gateway down then
 * up, a restart, the address guard, and pushers removed with the session that set them.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { client, type Json, type TestClient } from '../support/client.js';
import { createUser, login, startTestHomeserver, type TestHomeserver } from '../support/homeserver.js';

interface Gateway {
  url: string;
  /** Bodies received, in order. */
  received: Json[];
  /** How the next requests are answered: a status and a body. */
  answer: (body: Json) => { status: number; body: Json };
  /** Resolves when `count` requests have come in total. */
  waitFor(count: number, timeoutMs?: number): Promise<Json[]>;
  close(): Promise<void>;
}

async function startGateway(): Promise<Gateway> {
  const received: Json[] = [];
  let waiters: Array<() => void> = [];
  const gateway: Gateway = {
    url: '',
    received,
    answer: () => ({ status: 200, body: {} }),
    waitFor: (count, timeoutMs = 10_000) =>
      new Promise((resolve, reject) => {
        const deadline = setTimeout(() => reject(new Error(`gateway: ${received.length} requests, waited for ${count}`)), timeoutMs);
        const check = (): void => {
          if (received.length >= count) {
            clearTimeout(deadline);
            resolve(received);
          } else {
            waiters.push(check);
          }
        };
        check();
      }),
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
  const server: Server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Json;
      const { status, body: answer } = gateway.answer(body);
      if (status === 200) received.push({ path: request.url, ...body });
      response.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(answer));
      const current = waiters;
      waiters = [];
      for (const waiter of current) waiter();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  gateway.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/_matrix/push/v1/notify`;
  return gateway;
}

const FAST_PUSH = { min_retry_interval: '50ms', max_retry_interval: '200ms' };
const OPEN_LOOPBACK = { ip_range_whitelist: ['127.0.0.1/32'], push: FAST_PUSH };

function pusher(url: string, extra: Json = {}): Json {
  return { pushkey: 'key-1', kind: 'http', app_id: 'org.example.app', app_display_name: 'App', device_display_name: 'Phone', lang: 'en', data: { url, extra: 'kept' }, ...extra };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('push gateways', () => {
  let hs: TestHomeserver;
  let gateway: Gateway;
  let alice: TestClient;
  let bob: TestClient;
  let roomId: string;

  beforeEach(async () => {
    gateway = await startGateway();
    hs = await startTestHomeserver(OPEN_LOOPBACK);
    alice = client(hs, await createUser(hs, 'alice'));
    bob = client(hs, await createUser(hs, 'bob'));
    roomId = await bob.createRoom({ name: 'Ops' });
    await bob.invite(roomId, alice.user.userId);
    await alice.join(roomId);
  });
  afterEach(async () => {
    await hs.close();
    await gateway.close();
  });

  it('POSTs one notification for a message, with the event, counts and device; then the badge after a receipt', async () => {
    await alice.ok('POST', '/pushers/set', pusher(gateway.url));
    const eventId = await bob.send(roomId, { msgtype: 'm.text', body: 'deploy done' });
    const [push] = await gateway.waitFor(1);
    expect(push!.path).toBe('/_matrix/push/v1/notify');
    expect(push!.notification).toMatchObject({
      event_id: eventId, id: eventId, room_id: roomId, type: 'm.room.message', sender: bob.user.userId, sender_display_name: 'bob',
      room_name: 'Ops', content: { msgtype: 'm.text', body: 'deploy done' }, prio: 'high', counts: { unread: 1 },
    });
    // The one-to-one rule's sound: prio high, as Synapse; data without url; tweaks from the actions.
    expect(push!.notification.devices).toEqual([{ app_id: 'org.example.app', pushkey: 'key-1', pushkey_ts: expect.any(Number), data: { extra: 'kept' }, tweaks: { sound: 'default' } }]);

    await alice.ok('POST', `/rooms/${encodeURIComponent(roomId)}/receipt/m.read/${encodeURIComponent(eventId)}`, {});
    const [, badge] = await gateway.waitFor(2);
    expect(badge!.notification.counts).toEqual({ unread: 0 });
    expect(badge!.notification.devices[0]).toMatchObject({ app_id: 'org.example.app', pushkey: 'key-1' });
    // A room without a name is named by its canonical alias.
    await bob.ok('PUT', `/rooms/${encodeURIComponent(roomId)}/state/m.room.name`, {});
    await bob.ok('PUT', `/directory/room/${encodeURIComponent('#ops:test.local')}`, { room_id: roomId });
    await bob.ok('PUT', `/rooms/${encodeURIComponent(roomId)}/state/m.room.canonical_alias`, { alias: '#ops:test.local' });
    await bob.send(roomId, { msgtype: 'm.text', body: 'named?' });
    const [, , named] = await gateway.waitFor(3);
    expect(named!.notification).toMatchObject({ room_name: '#ops:test.local', room_alias: '#ops:test.local' });
    // Nothing else: alice's own messages never notify her.
    await alice.send(roomId, { msgtype: 'm.text', body: 'thanks' });
    await sleep(200);
    expect(gateway.received).toHaveLength(3);
  });

  it('never pushes a room’s history from before the user joined it', async () => {
    await alice.ok('POST', '/pushers/set', pusher(gateway.url));
    const later = await bob.createRoom();
    await bob.send(later, { msgtype: 'm.text', body: 'before alice' });
    await bob.invite(later, alice.user.userId);
    const [invite] = await gateway.waitFor(1);
    expect(invite!.notification).toMatchObject({ type: 'm.room.member', membership: 'invite', user_is_target: true, room_id: later });
    await alice.join(later);
    const after = await bob.send(later, { msgtype: 'm.text', body: 'after alice' });
    await gateway.waitFor(2);
    await sleep(200);
    expect(gateway.received.map((push) => push.notification.content?.body ?? push.notification.type)).toEqual(['m.room.member', 'after alice']);
    expect(gateway.received[1]!.notification.event_id).toBe(after);
  });

  it('sends only ids and counts with format event_id_only', async () => {
    await alice.ok('POST', '/pushers/set', pusher(gateway.url, { data: { url: gateway.url, format: 'event_id_only' } }));
    const eventId = await bob.send(roomId, { msgtype: 'm.text', body: 'secret' });
    const [push] = await gateway.waitFor(1);
    expect(Object.keys(push!.notification).sort()).toEqual(['counts', 'devices', 'event_id', 'prio', 'room_id']);
    expect(push!.notification).toMatchObject({ event_id: eventId, room_id: roomId, counts: { unread: 1 } });
    expect(push!.notification.devices[0].data).toEqual({ format: 'event_id_only' });
  });

  it('removes a pusher whose pushkey the gateway rejects', async () => {
    await alice.ok('POST', '/pushers/set', pusher(gateway.url));
    gateway.answer = () => ({ status: 200, body: { rejected: ['key-1'] } });
    await bob.send(roomId);
    await gateway.waitFor(1);
    for (let i = 0; i < 50 && (await alice.ok('GET', '/pushers')).pushers.length > 0; i++) await sleep(20);
    expect((await alice.ok('GET', '/pushers')).pushers).toEqual([]);
  });

  it('retries while the gateway is down and delivers each notification once, in order', async () => {
    await alice.ok('POST', '/pushers/set', pusher(gateway.url));
    let refused = 0;
    gateway.answer = () => (refused++ < 3 ? { status: 502, body: {} } : { status: 200, body: {} });
    const first = await bob.send(roomId, { msgtype: 'm.text', body: 'one' });
    const second = await bob.send(roomId, { msgtype: 'm.text', body: 'two' });
    await gateway.waitFor(2);
    await sleep(300);
    expect(refused).toBeGreaterThanOrEqual(3);
    expect(gateway.received.map((push) => push.notification.event_id)).toEqual([first, second]);
  });

  it('does not push to an address the blacklist refuses', async () => {
    const guarded = await startTestHomeserver({ push: FAST_PUSH });
    try {
      const carol = client(guarded, await createUser(guarded, 'carol'));
      const dave = client(guarded, await createUser(guarded, 'dave'));
      const room = await dave.createRoom();
      await dave.invite(room, carol.user.userId);
      await carol.join(room);
      await carol.ok('POST', '/pushers/set', pusher(gateway.url));
      await dave.send(room);
      await sleep(300);
      expect(gateway.received).toEqual([]);
    } finally {
      await guarded.close();
    }
  });

  it('refuses a pusher URL that is not a push gateway’s', async () => {
    const answer = await alice.request('POST', '/pushers/set', pusher('http://127.0.0.1:1/elsewhere'));
    expect([answer.status, answer.body.errcode]).toEqual([400, 'M_INVALID_PARAM']);
    const notUrl = await alice.request('POST', '/pushers/set', pusher('not a url'));
    expect([notUrl.status, notUrl.body.errcode]).toEqual([400, 'M_INVALID_PARAM']);
  });

  it('removes the pushers of a session that logs out, and of the other sessions on a password change', async () => {
    const other = client(hs, { ...alice.user, accessToken: await login(hs, 'alice', alice.user.password) });
    await other.ok('POST', '/pushers/set', pusher(gateway.url, { pushkey: 'other' }));
    await alice.ok('POST', '/pushers/set', pusher(gateway.url));
    await alice.ok('POST', '/account/password', { new_password: 'new-password-1', auth: { type: 'm.login.password', identifier: { type: 'm.id.user', user: 'alice' }, password: alice.user.password } });
    expect((await alice.ok('GET', '/pushers')).pushers.map((p: Json) => p.pushkey)).toEqual(['key-1']);
    await alice.ok('POST', '/logout', {});
    const third = client(hs, { ...alice.user, accessToken: await login(hs, 'alice', 'new-password-1') });
    expect((await third.ok('GET', '/pushers')).pushers).toEqual([]);
  });
});

describe('push gateways across a restart', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'bhs-push-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('resumes from the stored position: what came while down is pushed, nothing twice', async () => {
    const gateway = await startGateway();
    const overrides = { ...OPEN_LOOPBACK, database: { path: join(dir, 'homeserver.db') } };
    let hs = await startTestHomeserver(overrides);
    try {
      const alice = client(hs, await createUser(hs, 'alice'));
      const bobUser = await createUser(hs, 'bob');
      const bob = client(hs, bobUser);
      const roomId = await bob.createRoom();
      await bob.invite(roomId, alice.user.userId);
      await alice.join(roomId);
      await alice.ok('POST', '/pushers/set', pusher(gateway.url));
      const first = await bob.send(roomId, { msgtype: 'm.text', body: 'one' });
      await gateway.waitFor(1);
      // The gateway is down when the server stops: the second one is owed.
      gateway.answer = () => ({ status: 503, body: {} });
      const second = await bob.send(roomId, { msgtype: 'm.text', body: 'two' });
      await sleep(150);
      await hs.close();

      gateway.answer = () => ({ status: 200, body: {} });
      hs = await startTestHomeserver(overrides);
      await gateway.waitFor(2);
      await sleep(300);
      expect(gateway.received.map((push) => push.notification.event_id)).toEqual([first, second]);
    } finally {
      await hs.close();
      await gateway.close();
    }
  });
});
