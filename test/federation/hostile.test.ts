/**
 * A hostile server on the open federation (a fake homeserver signing with its own key, no code of
 * ours in its answers) against a.test, with b.test as an honest member server: what it may read,
 * what it may join, and what one of its events may do to a room.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import { createServer as createNetServer, type Socket } from 'node:net';
import { MAX_DEPTH, type Pdu } from '../../src/rooms/pdu.js';
import { client, type Json, type TestClient } from '../support/client.js';
import { createUser, startFederation, type Federation, type FederatedServer } from '../support/federation.js';
import { startHostileServer, type HostileServer } from '../support/hostile-server.js';

let federation: Federation;
let a: FederatedServer;
let b: FederatedServer;
let evil: HostileServer;
let botA: TestClient;
let aliceB: TestClient;

beforeAll(async () => {
  // A short deadline for what a transaction may make us fetch, so the test of a sender that never
  // answers ends soon.
  federation = await startFederation(['a.test', 'b.test'], () => ({ federation: { inbound_fetch: { deadline: '4s' } } }));
  a = federation.servers.get('a.test')!;
  b = federation.servers.get('b.test')!;
  evil = await startHostileServer(federation);
  botA = client(a.hs, await createUser(a.hs, 'bot'));
  aliceB = client(b.hs, await createUser(b.hs, 'alice'));
});
afterAll(async () => {
  await evil?.close();
  await federation?.close();
});

const enc = encodeURIComponent;

async function roomOnA(roomId: string) {
  return (await a.services.roomCache.room(roomId))!;
}

/** What `asker` gets for a federation GET/POST to a.test (status and errcode, or the body). */
async function ask(asker: { client: { request: (d: string, r: { method: 'GET' | 'POST' | 'PUT'; path: string; body?: unknown }) => Promise<unknown> } }, method: 'GET' | 'POST', path: string, body?: unknown) {
  try {
    return { status: 200, body: (await asker.client.request('a.test', { method, path, ...(body === undefined ? {} : { body }) })) as Json };
  } catch (err) {
    const failure = err as { status?: number; errcode?: string };
    return { status: failure.status, errcode: failure.errcode };
  }
}

describe('room reads answer only servers in the room', () => {
  it('refuses /state, /state_ids, /event_auth, /backfill and /get_missing_events of an invite-only room to a server never let in', async () => {
    const roomId = await botA.createRoom({ preset: 'private_chat', name: 'Secret plans', topic: 'nobody else' });
    await botA.invite(roomId, aliceB.userId);
    await aliceB.join(roomId);
    await botA.waitForEvent(roomId, (event) => event.type === 'm.room.member' && event.state_key === aliceB.userId && event.content.membership === 'join');
    const room = await roomOnA(roomId);
    const eventId = room.head.extremities[0]!;
    const reads: Array<['GET' | 'POST', string, unknown?]> = [
      ['GET', `/_matrix/federation/v1/state/${enc(roomId)}?event_id=${enc(eventId)}`],
      ['GET', `/_matrix/federation/v1/state_ids/${enc(roomId)}?event_id=${enc(eventId)}`],
      ['GET', `/_matrix/federation/v1/event_auth/${enc(roomId)}/${enc(eventId)}`],
      ['GET', `/_matrix/federation/v1/backfill/${enc(roomId)}?v=${enc(eventId)}&limit=10`],
      ['POST', `/_matrix/federation/v1/get_missing_events/${enc(roomId)}`, { earliest_events: [], latest_events: [eventId], limit: 10 }],
    ];
    for (const [method, path, body] of reads) {
      expect(await ask(evil, method, path, body), path).toEqual({ status: 403, errcode: 'M_FORBIDDEN' });
      // The member server still gets its answers.
      const honest = await ask({ client: b.services.federation.client }, method, path, body);
      expect(honest.status, path).toBe(200);
    }
    const honestState = await ask({ client: b.services.federation.client }, 'GET', reads[0]![1]);
    expect(JSON.stringify(honestState.body)).toContain('Secret plans');
    // /event held already: it checks history visibility.
    expect((await ask(evil, 'GET', `/_matrix/federation/v1/event/${enc(eventId)}`)).status).toBe(404);
  });
});

describe('restricted rooms', () => {
  it('does not countersign a send_join for a joiner who is in none of the allowed rooms', async () => {
    const allowed = await botA.createRoom({ preset: 'private_chat', name: 'Members only' });
    const roomId = await botA.createRoom({
      room_version: '10',
      preset: 'private_chat',
      initial_state: [{ type: 'm.room.join_rules', state_key: '', content: { join_rule: 'restricted', allow: [{ type: 'm.room_membership', room_id: allowed }] } }],
    });
    const joiner = '@mallory:evil.test';
    // make_join refuses, as it always did.
    const made = await ask(evil, 'GET', `/_matrix/federation/v1/make_join/${enc(roomId)}/${enc(joiner)}?ver=10`);
    expect(made).toMatchObject({ status: 400, errcode: 'M_UNABLE_TO_AUTHORISE_JOIN' });
    // A join built by hand, naming our bot as the one who vouches for it.
    const room = await roomOnA(roomId);
    const { pdu, eventId } = evil.pdu('10', {
      room_id: roomId,
      sender: joiner,
      type: 'm.room.member',
      state_key: joiner,
      content: { membership: 'join', join_authorised_via_users_server: botA.userId },
      origin_server_ts: Date.now(),
      depth: room.head.depth + 1,
      prev_events: [...room.head.extremities],
      auth_events: ['m.room.create', 'm.room.power_levels', 'm.room.join_rules'].map((type) => room.get(type)!.eventId).concat(room.get('m.room.member', botA.userId)!.eventId),
    });
    const sent = await evil.client
      .request('a.test', { method: 'PUT', path: `/_matrix/federation/v2/send_join/${enc(roomId)}/${enc(eventId)}`, body: pdu })
      .catch((err: { status?: number; errcode?: string }) => err);
    expect(sent).toMatchObject({ status: 403, errcode: 'M_FORBIDDEN' });
    expect((await roomOnA(roomId)).membership(joiner)).not.toBe('join');
    expect((await ask(evil, 'GET', `/_matrix/federation/v1/backfill/${enc(roomId)}?v=${enc(room.head.extremities[0]!)}&limit=10`)).status).toBe(403);
  });
});

describe('an event at the depth limit', () => {
  it('leaves the room usable: local events are built at the limit, not past it', async () => {
    const roomId = await botA.createRoom({ preset: 'public_chat' });
    const mallory = '@mallory:evil.test';
    const joined = await evil.join('a.test', roomId, mallory);
    const room = await roomOnA(roomId);
    expect(room.membership(mallory)).toBe('join');
    const { pdu, eventId } = evil.pdu(joined.roomVersion, {
      room_id: roomId,
      sender: mallory,
      type: 'm.room.message',
      content: { msgtype: 'm.text', body: 'deep' },
      origin_server_ts: Date.now(),
      depth: Number.MAX_SAFE_INTEGER,
      prev_events: [...room.head.extremities],
      auth_events: [room.get('m.room.create')!.eventId, room.get('m.room.power_levels')!.eventId, joined.eventId],
    });
    const answer = await evil.send('a.test', [pdu]);
    // Valid by the spec (Synapse takes it too): the room goes on from there.
    expect(answer.pdus[eventId]).toEqual({});
    const after = await botA.send(roomId, { msgtype: 'm.text', body: 'still here' });
    expect(Number((await a.services.storage.rooms.getEvent(after))!.depth)).toBe(MAX_DEPTH);
    await botA.send(roomId, { msgtype: 'm.text', body: 'and again' });
    await botA.ok('POST', `/rooms/${enc(roomId)}/ban`, { user_id: mallory, reason: 'deep' });
    const other = client(a.hs, await createUser(a.hs, 'other'));
    await other.join(roomId);
    await other.ok('POST', `/rooms/${enc(roomId)}/leave`, {});
    // The timeline reads in order at the limit: arrival decides among equal depths.
    const page = await botA.ok('GET', `/rooms/${enc(roomId)}/messages`, undefined, { dir: 'b', limit: 5 });
    expect((page.chunk as Json[]).map((event) => event.content?.body ?? event.content?.membership)).toEqual(['leave', 'join', 'ban', 'and again', 'still here']);
  });
});

describe('one room\'s events as another\'s history', () => {
  it('an event whose prev_events name an event of another room is rejected, and that room\'s state stays out', async () => {
    const roomA = await botA.createRoom({ preset: 'public_chat', name: 'room A' });
    const roomB = await botA.createRoom({ preset: 'public_chat', name: 'room B' });
    const mallory = '@mallory:evil.test';
    await evil.join('a.test', roomA, mallory);
    const joinedB = await evil.join('a.test', roomB, mallory);
    const room = await roomOnA(roomA);
    const { pdu, eventId } = evil.pdu(joinedB.roomVersion, {
      room_id: roomA,
      sender: mallory,
      type: 'm.room.message',
      content: { msgtype: 'm.text', body: 'built on room B' },
      origin_server_ts: Date.now(),
      depth: room.head.depth + 1,
      prev_events: [joinedB.eventId],
      auth_events: [room.get('m.room.create')!.eventId, room.get('m.room.power_levels')!.eventId, room.get('m.room.member', mallory)!.eventId],
    });
    await evil.send('a.test', [pdu]);
    const stored = await a.services.storage.rooms.getEvent(eventId);
    expect(stored?.rejected ?? 'not stored').not.toBeNull();
    const name = await botA.ok('GET', `/rooms/${enc(roomA)}/state/m.room.name/`);
    expect(name.name).toBe('room A');
    const after = await botA.send(roomA, { msgtype: 'm.text', body: 'still room A' });
    expect(JSON.parse((await a.services.storage.rooms.getEvent(after))!.prev_events!)).not.toContain(eventId);
  });
  it('a pulled event built on another room\'s event is a dead end: its room pages back to it, never into the other room', async () => {
    // SyTest's 34room-backfill "cross-room back-pagination": P in room 1; Q in room 2 built on P;
    // R on Q, S on R. S is pushed; R comes from get_missing_events; Q from /backfill.
    const room1 = await botA.createRoom({ preset: 'public_chat', name: 'room one' });
    const room2 = await botA.createRoom({ preset: 'public_chat', name: 'room two' });
    const mallory = '@mallory:evil.test';
    const joined1 = await evil.join('a.test', room1, mallory);
    const joined2 = await evil.join('a.test', room2, mallory);
    const one = await roomOnA(room1);
    const two = await roomOnA(room2);
    const auth1 = [one.get('m.room.create')!.eventId, one.get('m.room.power_levels')!.eventId, joined1.eventId];
    const auth2 = [two.get('m.room.create')!.eventId, two.get('m.room.power_levels')!.eventId, joined2.eventId];
    const message = (roomId: string, body: string, prev: string[], depth: number, authEvents: string[]) =>
      evil.pdu(joined2.roomVersion, { room_id: roomId, sender: mallory, type: 'm.room.message', content: { msgtype: 'm.text', body }, origin_server_ts: Date.now(), depth, prev_events: prev, auth_events: authEvents });
    const P = message(room1, 'event P', [...one.head.extremities], one.head.depth + 1, auth1);
    const Q = message(room2, 'event Q', [P.eventId], two.head.depth + 2, auth2);
    const R = message(room2, 'event R', [Q.eventId], two.head.depth + 3, auth2);
    const S = message(room2, 'event S', [R.eventId], two.head.depth + 4, auth2);
    const state2 = [...two.stateEvents()].map((event) => event.eventId);
    const served = new Map([[Q.eventId, Q.pdu], [R.eventId, R.pdu], [P.eventId, P.pdu]]);
    evil.route('POST', `/_matrix/federation/v1/get_missing_events/${enc(room2)}`, () => ({ body: { events: [R.pdu] } }));
    evil.route('GET', `/_matrix/federation/v1/state_ids/${enc(room2)}`, (request) =>
      request.path.includes(enc(Q.eventId)) ? { body: { pdu_ids: state2, auth_chain_ids: auth2 } } : undefined,
    );
    evil.route('GET', '/_matrix/federation/v1/event/', (request) => {
      const pdu = served.get(decodeURIComponent(request.path.split('/').pop()!.split('?')[0]!));
      return pdu ? { body: { origin: 'evil.test', origin_server_ts: Date.now(), pdus: [pdu] } } : undefined;
    });
    // Asked in the background as soon as the gap opens, it does not know yet (SyTest answers 404
    // until the test waits for the request); asked again when /messages pages back to the gap.
    let backfills = 0;
    evil.route('GET', `/_matrix/federation/v1/backfill/${enc(room2)}`, () =>
      ++backfills === 1 ? { status: 404, body: { errcode: 'M_NOT_FOUND', error: 'not yet' } } : { body: { origin: 'evil.test', origin_server_ts: Date.now(), pdus: [Q.pdu] } },
    );
    evil.requests.length = 0;
    const answer = await evil.send('a.test', [S.pdu]);
    expect(answer.pdus[S.eventId]).toEqual({});
    // The state the gap is placed on is asked at Q, the prev we lack.
    expect(asked().some((request) => request.path.startsWith(`/_matrix/federation/v1/state_ids/${enc(room2)}?event_id=${enc(Q.eventId)}`))).toBe(true);
    await expect.poll(() => backfills).toBe(1);
    await a.services.backfiller.idle();
    expect((await evil.send('a.test', [P.pdu])).pdus[P.eventId]).toEqual({});
    const sync = await botA.sync({ timeout: 0, filter: JSON.stringify({ room: { timeline: { limit: 2 } } }) });
    const timeline = sync.rooms.join[room2].timeline as Json;
    expect((timeline.events as Json[]).map((event) => event.content?.body)).toEqual(['event R', 'event S']);
    const page = await botA.ok('GET', `/rooms/${enc(room2)}/messages`, undefined, { dir: 'b', from: timeline.prev_batch as string, limit: 10 });
    const chunk = page.chunk as Json[];
    // Q, then Mallory's join: room 1's P never shows in room 2.
    expect(chunk.slice(0, 2).map((event) => event.content?.body ?? event.content?.membership)).toEqual(['event Q', 'join']);
    expect(chunk.some((event) => event.event_id === P.eventId)).toBe(false);
    expect(backfills).toBe(2);
    expect(JSON.stringify(await botA.ok('GET', `/rooms/${enc(room2)}/state/m.room.name/`))).toContain('room two');
  });
});

/** An event id nobody has (a hash of nothing). */
function fakeId(): string {
  return `$${randomBytes(32).toString('base64url')}`;
}

/** Rows a.test holds of the room, all kinds (outliers, rejected and shown). */
async function storedIn(roomId: string): Promise<number> {
  const row = await a.services.storage.db.selectFrom('events').select((eb) => eb.fn.countAll<number>().as('n')).where('room_id', '=', roomId).executeTakeFirstOrThrow();
  return Number(row.n);
}

/** What a.test asked of the hostile server (its key listing, and transactions a.test sends it, aside). */
function asked(): typeof evil.requests {
  return evil.requests.filter((request) => !request.path.startsWith('/_matrix/key/') && !request.path.startsWith('/_matrix/federation/v1/send/'));
}

describe('what one transaction may make us fetch', () => {
  /** Messages of mallory in the room, each naming `prevs` events nobody has. */
  function baitPdus(roomId: string, versionId: string, authEvents: string[], count: number, prevs: number, depth: number): Pdu[] {
    return Array.from({ length: count }, (_, i) =>
      evil.pdu(versionId, {
        room_id: roomId,
        sender: '@mallory:evil.test',
        type: 'm.room.message',
        content: { msgtype: 'm.text', body: `bait ${i}` },
        origin_server_ts: Date.now(),
        depth: depth + i,
        prev_events: Array.from({ length: prevs }, fakeId),
        auth_events: authEvents,
      }).pdu,
    );
  }

  it('a server with no member in the room is asked nothing; what it sends that needs asking is refused unstored', async () => {
    const roomId = await botA.createRoom({ preset: 'public_chat' });
    const room = await roomOnA(roomId);
    const before = await storedIn(roomId);
    evil.requests.length = 0;
    const pdus = baitPdus(roomId, room.version.id, [room.get('m.room.create')!.eventId, room.get('m.room.power_levels')!.eventId], 50, 20, room.head.depth + 1);
    const answer = await evil.send('a.test', pdus);
    expect(Object.keys(answer.pdus)).toHaveLength(50);
    for (const result of Object.values(answer.pdus)) expect(result.error).toBeDefined();
    expect(asked()).toEqual([]);
    expect(await storedIn(roomId)).toBe(before);
  });

  // 50 PDUs spend the events allowed on get_missing_events alone; 3 go on to state_ids, /state
  // and /event until the requests allowed are spent.
  it.each([50, 3])('a member server answering with ever more missing events costs at most the budget (%i PDUs)', async (count) => {
    const roomId = await botA.createRoom({ preset: 'public_chat' });
    const joined = await evil.join('a.test', roomId, '@mallory:evil.test');
    const room = await roomOnA(roomId);
    const authEvents = [room.get('m.room.create')!.eventId, room.get('m.room.power_levels')!.eventId, joined.eventId];
    // What it answers: every gap names 20 more events nobody has, every state it gives has 2,000
    // real events of its own (which cost us to check and store), all of them served.
    const served = new Map<string, Pdu>();
    const stateEvents = Array.from({ length: 2000 }, (_, i) =>
      evil.pdu(joined.roomVersion, {
        room_id: roomId,
        sender: `@sock${i}:evil.test`,
        type: 'm.room.member',
        state_key: `@sock${i}:evil.test`,
        content: { membership: 'join', displayname: 'x'.repeat(200) },
        origin_server_ts: Date.now(),
        depth: 5,
        prev_events: [fakeId()],
        auth_events: authEvents.slice(0, 2),
      }),
    );
    for (const event of stateEvents) served.set(event.eventId, event.pdu);
    let bytesServed = 0;
    const json = (body: unknown) => {
      bytesServed += Buffer.byteLength(JSON.stringify(body));
      return { body };
    };
    evil.route('POST', '/_matrix/federation/v1/get_missing_events/', () =>
      json({ events: baitPdus(roomId, joined.roomVersion, authEvents, 20, 20, room.head.depth + 1) }),
    );
    evil.route('GET', '/_matrix/federation/v1/state_ids/', () => json({ pdu_ids: stateEvents.map((event) => event.eventId), auth_chain_ids: [] }));
    evil.route('GET', '/_matrix/federation/v1/state/', () => json({ pdus: stateEvents.map((event) => event.pdu), auth_chain: [] }));
    evil.route('GET', '/_matrix/federation/v1/event/', (request) => {
      const pdu = served.get(decodeURIComponent(request.path.split('/').pop()!.split('?')[0]!));
      return pdu ? json({ origin: 'evil.test', origin_server_ts: Date.now(), pdus: [pdu] }) : undefined;
    });
    const before = await storedIn(roomId);
    evil.requests.length = 0;
    const started = Date.now();
    const answer = await evil.send('a.test', baitPdus(roomId, joined.roomVersion, authEvents, count, 20, room.head.depth + 1));
    const took = Date.now() - started;
    for (const result of Object.values(answer.pdus)) expect(result.error).toBeDefined();
    // The bounds (federation.inbound_fetch's defaults): 60 requests, 1,000 events, 8 MiB, 4 s here.
    expect(asked().length).toBeLessThanOrEqual(60);
    expect(await storedIn(roomId)).toBeLessThanOrEqual(before + 1000);
    expect(bytesServed).toBeLessThan(2 * 8 * 1024 * 1024);
    expect(took).toBeLessThan(60_000);
    // The room goes on for its honest members.
    await botA.send(roomId, { msgtype: 'm.text', body: 'still fine' });
  }, 120_000);

  it('events in the name of fifty servers that never answer cost one deadline and few key fetches, not fifty timeouts', async () => {
    // Fifty server names, all at one address that takes connections and never says a word (not
    // even TLS): a key fetch there lasts until its timeout, 10 s.
    const held = new Set<Socket>();
    const silent = createNetServer((socket) => {
      held.add(socket);
      socket.on('error', () => undefined);
    });
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const names = Array.from({ length: 50 }, (_, i) => `silent${i}.test`);
    for (const name of names) federation.addPeer(name, (silent.address() as { port: number }).port);
    try {
      const roomId = await botA.createRoom({ preset: 'public_chat' });
      const joined = await evil.join('a.test', roomId, '@mallory:evil.test');
      const room = await roomOnA(roomId);
      const authEvents = [room.get('m.room.create')!.eventId, room.get('m.room.power_levels')!.eventId, joined.eventId];
      // Each event claims a sender on another of them, and carries a "signature" of its server:
      // checking it means fetching that server's keys.
      const pdus = names.map((name, i) => {
        const { pdu } = evil.pdu(joined.roomVersion, {
          room_id: roomId,
          sender: `@someone:${name}`,
          type: 'm.room.message',
          content: { msgtype: 'm.text', body: `from ${name}` },
          origin_server_ts: Date.now(),
          depth: room.head.depth + 1 + i,
          prev_events: [joined.eventId],
          auth_events: authEvents,
        });
        return { ...pdu, signatures: { ...pdu.signatures, [name]: { 'ed25519:x': 'A'.repeat(86) } } };
      });
      const started = Date.now();
      const answer = await evil.send('a.test', pdus);
      const took = Date.now() - started;
      expect(Object.keys(answer.pdus)).toHaveLength(50);
      for (const result of Object.values(answer.pdus)) expect(result.error).toMatch(/^not signed by silent\d+\.test$/);
      // The transaction's deadline (4 s here), not fifty key fetches of 10 s one after another.
      expect(took).toBeLessThan(15_000);
      // At most the requests one inbound request may make (60 by default); here the first fetch
      // outlasts the deadline and nothing more is asked.
      expect(held.size).toBeLessThanOrEqual(60);
      expect(held.size).toBeGreaterThan(0);
      await botA.send(roomId, { msgtype: 'm.text', body: 'still fine' });
    } finally {
      for (const socket of held) socket.destroy();
      await new Promise<void>((resolve) => silent.close(() => resolve()));
    }
  }, 60_000);

  it('a sender that never answers holds up only its own events, not another server\u2019s', async () => {
    const roomId = await botA.createRoom({ preset: 'public_chat' });
    await aliceB.join(roomId);
    await botA.waitForEvent(roomId, (event) => event.type === 'm.room.member' && event.state_key === aliceB.userId);
    const joined = await evil.join('a.test', roomId, '@mallory:evil.test');
    const room = await roomOnA(roomId);
    for (const path of ['/_matrix/federation/v1/get_missing_events/', '/_matrix/federation/v1/state_ids/', '/_matrix/federation/v1/state/', '/_matrix/federation/v1/event/']) {
      evil.hang(path.includes('get_missing') ? 'POST' : 'GET', path);
    }
    const authEvents = [room.get('m.room.create')!.eventId, room.get('m.room.power_levels')!.eventId, joined.eventId];
    let settled = false;
    const pending = evil.send('a.test', baitPdus(roomId, joined.roomVersion, authEvents, 5, 3, room.head.depth + 1)).finally(() => (settled = true));
    await expect.poll(() => asked().length).toBeGreaterThan(0);
    // B's message arrives while the hostile transaction still waits on its questions.
    await aliceB.send(roomId, { msgtype: 'm.text', body: 'honest' });
    await botA.waitForEvent(roomId, (event) => event.content?.body === 'honest', 5000);
    expect(settled).toBe(false);
    // And the hostile transaction ends at its deadline, refused.
    const answer = await pending;
    for (const result of Object.values(answer.pdus)) expect(result.error).toBeDefined();
  }, 60_000);
});
