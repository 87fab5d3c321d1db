/** GET /sync through HTTP: long-polling, sections, filters, ephemeral data, account data, restarts. */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createUser, login, startTestHomeserver, type TestHomeserver } from '../support/homeserver.js';
import { client, clientsFor, timelineOf, type Json, type TestClient } from '../support/client.js';
import { expectMatrixError, validateEvent } from '../support/spec-validator.js';
import { persistentDatabase } from '../support/test-schemas.js';

let hs: TestHomeserver;
let alice: TestClient;
let bob: TestClient;
let carol: TestClient;

beforeEach(async () => {
  hs = await startTestHomeserver();
  [alice, bob, carol] = await clientsFor(hs, 'alice', 'bob', 'carol');
});
afterEach(() => hs.close());

const enc = encodeURIComponent;
const text = (body: string) => ({ msgtype: 'm.text', body });
/** A message that mentions the user as clients do since Matrix 1.7 (the default rules highlight it). */
const mention = (body: string, userId: string) => ({ msgtype: 'm.text', body, 'm.mentions': { user_ids: [userId] } });

/** Resolves once the server holds `count` parked syncs (no sleeps: it yields to the event loop). */
async function parked(count: number): Promise<void> {
  for (let i = 0; i < 1000 && hs.services.notifier.parkedCount() < count; i++) await new Promise((r) => setTimeout(r, 2));
  expect(hs.services.notifier.parkedCount()).toBe(count);
}

describe('long-polling', () => {
  it('the first sync returns at once even with a timeout; a parked sync is woken by a send from another request', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    const started = performance.now();
    const first = await bob.sync({ timeout: 30_000 });
    expect(performance.now() - started).toBeLessThan(10_000);
    const waiting = bob.sync({ since: first.next_batch, timeout: 30_000 });
    await parked(1);
    const eventId = await alice.send(roomId, text('wake up'));
    const woken = await waiting;
    expect(timelineOf(woken, roomId).map((e) => e.event_id)).toEqual([eventId]);
    expect(woken.next_batch).not.toBe(first.next_batch);
    expect(hs.services.notifier.parkedCount()).toBe(0);
  });

  it('times out with the same next_batch when nothing happened for the user, even if other rooms moved', async () => {
    const other = await carol.createRoom();
    const first = await bob.sync();
    const waiting = bob.sync({ since: first.next_batch, timeout: 300 });
    await parked(1);
    await carol.send(other, text('not for bob'));
    const answer = await waiting;
    expect(answer.next_batch).toBe(first.next_batch);
    expect(answer.rooms.join).toEqual({});
  });

  it('a client that disconnects frees its waiter', async () => {
    const first = await bob.sync();
    const request = hs.http
      .get('/_matrix/client/v3/sync')
      .query({ since: first.next_batch, timeout: 60_000 })
      .auth(bob.user.accessToken, { type: 'bearer' });
    const pending = request.then(
      () => 'answered',
      () => 'aborted',
    );
    await parked(1);
    request.abort();
    expect(await pending).toBe('aborted');
    for (let i = 0; i < 500 && hs.services.notifier.parkedCount() > 0; i++) await new Promise((r) => setTimeout(r, 2));
    expect(hs.services.notifier.parkedCount()).toBe(0);
  });

  it('timeout is capped by max_sync_timeout, and a missing timeout means 0', async () => {
    await hs.close();
    hs = await startTestHomeserver({ max_sync_timeout: 200 });
    bob = client(hs, await createUser(hs, 'bob'));
    const first = await bob.sync();
    const started = performance.now();
    const answer = await bob.sync({ since: first.next_batch, timeout: 600_000 });
    expect(answer.next_batch).toBe(first.next_batch);
    expect(performance.now() - started).toBeLessThan(30_000);
    const immediate = await bob.sync({ since: first.next_batch });
    expect(immediate.next_batch).toBe(first.next_batch);
    expectMatrixError(await bob.request('GET', '/sync', undefined, { timeout: 'soon' }), 400, 'M_INVALID_PARAM');
  });

  it('many parked syncs of one user are all woken; users of other rooms are not', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    const bobSince = (await bob.sync()).next_batch;
    const carolSince = (await carol.sync()).next_batch;
    const bobs = [1, 2, 3].map(() => bob.sync({ since: bobSince, timeout: 30_000 }));
    const carols = carol.sync({ since: carolSince, timeout: 400 });
    await parked(4);
    const eventId = await alice.send(roomId, text('to bob'));
    for (const answer of await Promise.all(bobs)) expect(timelineOf(answer, roomId).map((e) => e.event_id)).toEqual([eventId]);
    expect((await carols).next_batch).toBe(carolSince);
  });
});

describe('sections', () => {
  it('an invite carries stripped state and the invitee\u2019s own member event with sender and is_direct', async () => {
    await alice.ok('PUT', `/profile/${enc(alice.userId)}/displayname`, { displayname: 'Alice' });
    const since = (await bob.sync()).next_batch;
    const roomId = await alice.createRoom({ name: 'DM', invite: [bob.userId], is_direct: true });
    const answer = await bob.sync({ since });
    const events = answer.rooms.invite[roomId].invite_state.events as Json[];
    expect(events.map((e) => e.type)).toEqual(expect.arrayContaining(['m.room.create', 'm.room.join_rules', 'm.room.name', 'm.room.member']));
    const own = events.find((e) => e.type === 'm.room.member' && e.state_key === bob.userId)!;
    expect(own).toMatchObject({ sender: alice.userId, content: { membership: 'invite', is_direct: true } });
    const inviter = events.find((e) => e.type === 'm.room.member' && e.state_key === alice.userId)!;
    expect(inviter.content).toMatchObject({ membership: 'join', displayname: 'Alice' });
    expect(answer.rooms.join).toEqual({});
    // Joining moves the room to join, with the whole room and the join in the timeline.
    await bob.join(roomId);
    const joined = await bob.sync({ since: answer.next_batch });
    expect(joined.rooms.invite).toEqual({});
    const room = joined.rooms.join[roomId];
    expect(room.timeline.events.at(-1)).toMatchObject({ type: 'm.room.member', state_key: bob.userId, content: { membership: 'join', is_direct: true } });
    const typesSeen = [...room.state.events, ...room.timeline.events].map((e: Json) => e.type);
    expect(typesSeen).toEqual(expect.arrayContaining(['m.room.create', 'm.room.power_levels', 'm.room.name']));
  });

  it('a kicked user gets the room under leave with the kick in the timeline, and nothing after it', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    const since = (await bob.sync()).next_batch;
    await alice.send(roomId, text('before'));
    await alice.ok('POST', `/rooms/${enc(roomId)}/kick`, { user_id: bob.userId, reason: 'bye' });
    await alice.send(roomId, text('after'));
    const answer = await bob.sync({ since });
    const left = answer.rooms.leave[roomId];
    const bodies = left.timeline.events.map((e: Json) => e.content.body ?? e.content.membership);
    expect(bodies).toEqual(['before', 'leave']);
    expect(answer.rooms.join).toEqual({});
    // Initial syncs leave left rooms out unless asked.
    expect((await bob.sync()).rooms.leave).toEqual({});
    const withLeave = await bob.sync({ filter: JSON.stringify({ room: { include_leave: true } }) });
    expect(Object.keys(withLeave.rooms.leave)).toEqual([roomId]);
  });

  it('a limited timeline has a prev_batch that /messages continues from, and state as of the timeline start', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat', name: 'Old name' });
    const since = (await alice.sync()).next_batch;
    await alice.setState(roomId, 'm.room.name', '', { name: 'Middle name' });
    const sent: string[] = [];
    for (let i = 0; i < 6; i++) sent.push(await alice.send(roomId, text(`n${i}`)));
    await alice.setState(roomId, 'm.room.topic', '', { topic: 'late topic' });
    const answer = await alice.sync({ since, filter: JSON.stringify({ room: { timeline: { limit: 3 } } }) });
    const room = answer.rooms.join[roomId];
    expect(room.timeline.limited).toBe(true);
    expect(room.timeline.events.map((e: Json) => e.event_id)).toEqual([sent[4], sent[5], expect.any(String)]);
    // The name changed in the gap, so it is in state; the topic is in the timeline, so not in state.
    expect(room.state.events.map((e: Json) => e.type)).toEqual(['m.room.name']);
    expect(room.state.events[0].content).toEqual({ name: 'Middle name' });
    const more = await alice.ok('GET', `/rooms/${enc(roomId)}/messages`, undefined, { dir: 'b', from: room.timeline.prev_batch, limit: 2 });
    expect(more.chunk.map((e: Json) => e.event_id)).toEqual([sent[3], sent[2]]);
  });

  it('every event in an initial sync is valid, and has room_id, unsigned.age and state keys where due', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat', name: 'Valid', topic: 't' });
    await bob.join(roomId);
    await alice.send(roomId, text('hello'));
    await alice.setState(roomId, 'm.room.topic', '', { topic: 't2' });
    const answer = await alice.sync();
    const room = answer.rooms.join[roomId];
    for (const event of [...room.state.events, ...room.timeline.events] as Json[]) {
      expect(validateEvent(event, { roomId })).toEqual([]);
      expect(event.room_id).toBe(roomId);
      expect(typeof event.unsigned.age).toBe('number');
      expect(Number.isInteger(event.origin_server_ts)).toBe(true);
    }
    const topic = room.timeline.events.find((e: Json) => e.type === 'm.room.topic' && e.content.topic === 't2');
    expect(topic.unsigned.prev_content).toEqual({ topic: 't' });
    // A named room has no heroes (see 'the room summary').
    expect(room.summary).toEqual({ 'm.joined_member_count': 2, 'm.invited_member_count': 0 });
    // An initial sync carries the push rules (the defaults, here), as Synapse's does.
    expect((answer.account_data.events as Json[]).map((e) => e.type)).toEqual(['m.push_rules']);
    expect(answer.account_data.events[0].content.global.override[0].rule_id).toBe('.m.rule.master');
    // Presence of those sharing a room (see presence.test.ts for when it changes).
    for (const event of answer.presence.events as Json[]) expect(event).toMatchObject({ type: 'm.presence', sender: expect.any(String), content: { presence: expect.any(String) } });
  });

  it('counts unread messages until a read receipt', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    await alice.send(roomId, text('one'));
    const last = await alice.send(roomId, mention(`two, ${bob.userId}`, bob.userId));
    expect((await bob.sync()).rooms.join[roomId].unread_notifications).toEqual({ notification_count: 2, highlight_count: 1 });
    await bob.ok('POST', `/rooms/${enc(roomId)}/receipt/m.read/${enc(last)}`, {});
    expect((await bob.sync()).rooms.join[roomId].unread_notifications).toEqual({ notification_count: 0, highlight_count: 0 });
  });
});

describe('unread counts across incremental syncs', () => {
  it('carry forward between syncs and restart from a new read receipt', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    const counts = (answer: Json) => answer.rooms.join[roomId]?.unread_notifications;
    let answer = await bob.sync();
    expect(counts(answer)).toEqual({ notification_count: 0, highlight_count: 0 });
    await alice.send(roomId, text('one'));
    await alice.send(roomId, mention(`two for ${bob.userId}`, bob.userId));
    answer = await bob.sync({ since: answer.next_batch });
    expect(counts(answer)).toEqual({ notification_count: 2, highlight_count: 1 });
    const third = await alice.send(roomId, text('three'));
    await bob.send(roomId, text('my own message does not count'));
    answer = await bob.sync({ since: answer.next_batch });
    expect(counts(answer)).toEqual({ notification_count: 3, highlight_count: 1 });
    await bob.ok('POST', `/rooms/${enc(roomId)}/receipt/m.read/${enc(third)}`, {});
    answer = await bob.sync({ since: answer.next_batch });
    expect(counts(answer)).toEqual({ notification_count: 0, highlight_count: 0 });
    await alice.send(roomId, text('four'));
    answer = await bob.sync({ since: answer.next_batch });
    expect(counts(answer)).toEqual({ notification_count: 1, highlight_count: 0 });
    // A fresh count from scratch agrees with the carried one.
    expect(counts(await bob.sync())).toEqual({ notification_count: 1, highlight_count: 0 });
  });
});

describe('filters', () => {
  it('POST and GET a filter; sync applies it by id or inline', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    const other = await alice.createRoom({ preset: 'public_chat' });
    await alice.send(roomId, text('m'));
    await alice.send(roomId, { x: 1 }, 'org.example.custom');
    const definition = { room: { rooms: [roomId], timeline: { types: ['m.room.message'], limit: 5 } }, event_fields: ['type', 'content.body', 'event_id'] };
    const { filter_id: filterId } = await alice.ok('POST', `/user/${enc(alice.userId)}/filter`, definition);
    expect(filterId).toBe('0');
    expect(await alice.ok('GET', `/user/${enc(alice.userId)}/filter/${filterId}`)).toEqual(definition);
    // Checked raw: event_fields trims events below what the schema requires.
    const byId = (await hs.http.get('/_matrix/client/v3/sync').query({ filter: filterId }).auth(alice.user.accessToken, { type: 'bearer' })).body;
    expect(Object.keys(byId.rooms.join)).toEqual([roomId]);
    expect(byId.rooms.join[roomId].timeline.events).toEqual([{ type: 'm.room.message', content: { body: 'm' }, event_id: expect.any(String) }]);
    const inline = await alice.sync({ filter: JSON.stringify({ room: { not_rooms: [roomId] } }) });
    expect(Object.keys(inline.rooms.join)).toEqual([other]);
    const notTypes = await alice.sync({ filter: JSON.stringify({ room: { timeline: { not_types: ['m.room.*'] } } }) });
    expect(timelineOf(notTypes, roomId).map((e) => e.type)).toEqual(['org.example.custom']);
  });

  it('unknown filter ids do not break sync; others\u2019 filters and bad filters are refused', async () => {
    expect((await alice.sync({ filter: '12345' })).next_batch).toEqual(expect.any(String));
    expectMatrixError(await alice.request('GET', `/user/${enc(alice.userId)}/filter/77`), 404, 'M_NOT_FOUND');
    expectMatrixError(await alice.request('POST', `/user/${enc(bob.userId)}/filter`, {}), 403, 'M_FORBIDDEN');
    expectMatrixError(await alice.request('GET', `/user/${enc(bob.userId)}/filter/0`), 403, 'M_FORBIDDEN');
    expectMatrixError(await alice.request('POST', `/user/${enc(alice.userId)}/filter`, { room: { timeline: { limit: 'ten' } } }), 400, 'M_BAD_JSON');
    expectMatrixError(await alice.request('GET', '/sync', undefined, { filter: '{not json' }), 400, 'M_INVALID_PARAM');
    // Room and sender lists hold ids (as Synapse checks).
    expectMatrixError(await alice.request('POST', `/user/${enc(alice.userId)}/filter`, { room: { rooms: ['not_a_room_id'] } }), 400, 'M_INVALID_PARAM');
    expectMatrixError(await alice.request('POST', `/user/${enc(alice.userId)}/filter`, { room: { timeline: { senders: ['nobody'] } } }), 400, 'M_INVALID_PARAM');
    expectMatrixError(await alice.request('GET', '/sync', undefined, { filter: JSON.stringify({ room: { not_rooms: ['#alias:test.local'] } }) }), 400, 'M_INVALID_PARAM');
    expect((await alice.request('POST', `/user/${enc(alice.userId)}/filter`, { room: { rooms: ['!abc:test.local'], timeline: { not_senders: ['@x:test.local'] } } })).status).toBe(200);
  });

  it('applies each user their own stored filter, also when the ids are the same, and a filter id made after first use', async () => {
    const aliceRoom = await alice.createRoom({ preset: 'public_chat' });
    const bobRoom = await bob.createRoom({ preset: 'public_chat' });
    await bob.join(aliceRoom);
    const aliceFilter = (await alice.ok('POST', `/user/${enc(alice.userId)}/filter`, { room: { rooms: [aliceRoom] } })).filter_id as string;
    let bobFilter = (await bob.ok('POST', `/user/${enc(bob.userId)}/filter`, { room: { rooms: [bobRoom] } })).filter_id as string;
    // Ids count per user: make Bob's filter the one with Alice's id.
    while (Number(bobFilter) < Number(aliceFilter)) {
      bobFilter = (await bob.ok('POST', `/user/${enc(bob.userId)}/filter`, { room: { rooms: [bobRoom] } })).filter_id as string;
    }
    expect(bobFilter).toBe(aliceFilter);
    // Twice each: the second answer comes from the compiled filter the first one left behind.
    for (let round = 0; round < 2; round++) {
      expect(Object.keys((await alice.sync({ filter: aliceFilter })).rooms.join)).toEqual([aliceRoom]);
      expect(Object.keys((await bob.sync({ filter: bobFilter })).rooms.join)).toEqual([bobRoom]);
    }
    // Bob asks for a filter id he has not made yet: unfiltered. Once he makes it, it applies.
    const nextId = String(Number(bobFilter) + 1);
    expect(Object.keys((await bob.sync({ filter: nextId })).rooms.join).sort()).toEqual([aliceRoom, bobRoom].sort());
    const made = (await bob.ok('POST', `/user/${enc(bob.userId)}/filter`, { room: { rooms: [aliceRoom] } })).filter_id as string;
    expect(made).toBe(nextId);
    expect(Object.keys((await bob.sync({ filter: nextId })).rooms.join)).toEqual([aliceRoom]);
  });

  it('lazy_load_members keeps only the members who sent timeline events', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    await carol.join(roomId);
    for (let i = 0; i < 3; i++) await bob.send(roomId, text(`b${i}`));
    const answer = await alice.sync({ filter: JSON.stringify({ room: { timeline: { limit: 3 }, state: { lazy_load_members: true } } }) });
    const members = answer.rooms.join[roomId].state.events.filter((e: Json) => e.type === 'm.room.member').map((e: Json) => e.state_key);
    expect(members.sort()).toEqual([alice.userId, bob.userId].sort());
  });
});

describe('account data, typing and receipts', () => {
  it('account data: 404 when unset, echoed in the next sync, global and per room, own only', async () => {
    const roomId = await alice.createRoom();
    expectMatrixError(await alice.request('GET', `/user/${enc(alice.userId)}/account_data/m.direct`), 404, 'M_NOT_FOUND');
    const since = (await alice.sync()).next_batch;
    const waiting = alice.sync({ since, timeout: 30_000 });
    await parked(1);
    expect(await alice.ok('PUT', `/user/${enc(alice.userId)}/account_data/m.direct`, { [bob.userId]: [roomId] })).toEqual({});
    const echoed = await waiting;
    expect(echoed.account_data.events).toEqual([{ type: 'm.direct', content: { [bob.userId]: [roomId] } }]);
    expect(await alice.ok('GET', `/user/${enc(alice.userId)}/account_data/m.direct`)).toEqual({ [bob.userId]: [roomId] });
    await alice.ok('PUT', `/user/${enc(alice.userId)}/rooms/${enc(roomId)}/account_data/m.tag`, { tags: { work: {} } });
    const roomLevel = await alice.sync({ since: echoed.next_batch });
    expect(roomLevel.rooms.join[roomId].account_data.events).toEqual([{ type: 'm.tag', content: { tags: { work: {} } } }]);
    expect(await alice.ok('GET', `/user/${enc(alice.userId)}/rooms/${enc(roomId)}/account_data/m.tag`)).toEqual({ tags: { work: {} } });
    expectMatrixError(await bob.request('PUT', `/user/${enc(alice.userId)}/account_data/x`, {}), 403, 'M_FORBIDDEN');
    expectMatrixError(await bob.request('PUT', `/user/${enc(bob.userId)}/rooms/${enc(roomId)}/account_data/x`, {}), 403, 'M_FORBIDDEN');
    expectMatrixError(await alice.request('PUT', `/user/${enc(alice.userId)}/account_data/m.push_rules`, {}), 400, 'M_BAD_JSON');
  });

  it('typing reaches the room, answers {}, and ends', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    const since = (await bob.sync()).next_batch;
    const path = `/rooms/${enc(roomId)}/typing/${enc(alice.userId)}`;
    expect((await alice.request('PUT', path, { typing: true, timeout: 10_000 })).body).toEqual({});
    const typing = await bob.sync({ since, timeout: 5000 });
    expect(typing.rooms.join[roomId].ephemeral.events).toEqual([{ type: 'm.typing', content: { user_ids: [alice.userId] } }]);
    await alice.ok('PUT', path, { typing: false });
    const stopped = await bob.sync({ since: typing.next_batch, timeout: 5000 });
    expect(stopped.rooms.join[roomId].ephemeral.events).toEqual([{ type: 'm.typing', content: { user_ids: [] } }]);
    expectMatrixError(await bob.request('PUT', path, { typing: true }), 403, 'M_FORBIDDEN');
    expectMatrixError(await carol.request('PUT', `/rooms/${enc(roomId)}/typing/${enc(carol.userId)}`, { typing: true }), 403, 'M_FORBIDDEN');
  });

  it('receipts and read markers answer {} and reach the room; private receipts only their owner', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    const eventId = await alice.send(roomId, text('read me'));
    const since = (await alice.sync()).next_batch;
    expect((await bob.request('POST', `/rooms/${enc(roomId)}/receipt/m.read/${enc(eventId)}`, {})).body).toEqual({});
    const seen = await alice.sync({ since, timeout: 5000 });
    const receipt = seen.rooms.join[roomId].ephemeral.events.find((e: Json) => e.type === 'm.receipt');
    expect(receipt.content[eventId]['m.read'][bob.userId]).toEqual({ ts: expect.any(Number) });
    expect(await bob.ok('POST', `/rooms/${enc(roomId)}/read_markers`, { 'm.fully_read': eventId, 'm.read.private': eventId })).toEqual({});
    const bobView = await bob.sync();
    expect(bobView.rooms.join[roomId].account_data.events).toEqual([{ type: 'm.fully_read', content: { event_id: eventId } }]);
    const aliceView = await alice.sync({ since: seen.next_batch });
    expect(JSON.stringify(aliceView)).not.toContain('m.read.private');
    expectMatrixError(await bob.request('POST', `/rooms/${enc(roomId)}/receipt/m.bogus/${enc(eventId)}`, {}), 400, 'M_INVALID_PARAM');
    expectMatrixError(await carol.request('POST', `/rooms/${enc(roomId)}/receipt/m.read/${enc(eventId)}`, {}), 403, 'M_FORBIDDEN');
  });
});

describe('tokens', () => {
  it('garbage and future tokens give a usable answer rather than an error', async () => {
    const garbage = await alice.sync({ since: 'not-a-token' });
    expect(garbage.next_batch).toMatch(/^s\d+_\d+$/);
    const future = await alice.sync({ since: 's999999_0' });
    expect(future.next_batch).toMatch(/^s\d+_\d+$/);
  });

  it('r0 with ?access_token= works the same', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    const res = await hs.http.get('/_matrix/client/r0/sync').query({ access_token: alice.user.accessToken, _cacheBuster: 1 });
    expect(res.status).toBe(200);
    expect(Object.keys(res.body.rooms.join)).toEqual([roomId]);
  });
});

describe('a file database', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'bhs-sync-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('rooms, events, tokens, filters and account data survive a restart', async () => {
    const overrides = { ...persistentDatabase(join(dir, 'hs.db')) };
    await hs.close();
    hs = await startTestHomeserver(overrides);
    alice = client(hs, await createUser(hs, 'alice'));
    bob = client(hs, await createUser(hs, 'bob'));
    const roomId = await alice.createRoom({ preset: 'public_chat', room_alias_name: 'kept' });
    await bob.join(roomId);
    const before = await alice.send(roomId, text('before restart'), 'm.room.message', 'txn-restart');
    const { filter_id: filterId } = await bob.ok('POST', `/user/${enc(bob.userId)}/filter`, { room: { timeline: { limit: 1 } } });
    await bob.ok('PUT', `/user/${enc(bob.userId)}/account_data/m.direct`, { x: ['y'] });
    const token = (await bob.sync({ filter: filterId })).next_batch;
    await hs.close();

    hs = await startTestHomeserver(overrides);
    // The sessions survive too (a new login would be a new device: a device-list change to sync).
    alice = client(hs, alice.user);
    bob = client(hs, bob.user);
    // The old token still works: nothing new, same token.
    expect((await bob.sync({ since: token, filter: filterId })).next_batch).toBe(token);
    const waiting = bob.sync({ since: token, filter: filterId, timeout: 30_000 });
    await parked(1);
    const after = await alice.send(roomId, text('after restart'));
    const woken = await waiting;
    expect(timelineOf(woken, roomId).map((e) => e.event_id)).toEqual([after]);
    expect(woken.next_batch).not.toBe(token);
    expect(await bob.ok('GET', `/user/${enc(bob.userId)}/account_data/m.direct`)).toEqual({ x: ['y'] });
    expect((await alice.ok('GET', `/directory/room/${enc('#kept:test.local')}`)).room_id).toBe(roomId);
    expect((await alice.ok('GET', `/rooms/${enc(roomId)}/event/${enc(before)}`)).content.body).toBe('before restart');
    await hs.close();
    hs = await startTestHomeserver();
  });
});

describe('typing across a restart', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'bhs-typing-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('a token from before the restart still sees typing that starts after it', async () => {
    const overrides = { ...persistentDatabase(join(dir, 'hs.db')) };
    await hs.close();
    hs = await startTestHomeserver(overrides);
    alice = client(hs, await createUser(hs, 'alice'));
    bob = client(hs, await createUser(hs, 'bob'));
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    const otherRoom = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    await bob.join(otherRoom);
    for (let i = 0; i < 5; i++) {
      await alice.ok('PUT', `/rooms/${enc(roomId)}/typing/${enc(alice.userId)}`, { typing: i % 2 === 0 });
    }
    const token = (await alice.sync()).next_batch;
    await hs.close();

    hs = await startTestHomeserver(overrides);
    alice = client(hs, { ...alice.user, accessToken: await login(hs, 'alice', alice.user.password) });
    bob = client(hs, { ...bob.user, accessToken: await login(hs, 'bob', bob.user.password) });
    await bob.ok('PUT', `/rooms/${enc(roomId)}/typing/${enc(bob.userId)}`, { typing: true, timeout: 30_000 });
    // More typing changes elsewhere than happened before the restart: serials must not be compared
    // across the restart as if they were one counter.
    for (let i = 0; i < 8; i++) {
      await bob.ok('PUT', `/rooms/${enc(otherRoom)}/typing/${enc(bob.userId)}`, { typing: i % 2 === 0 });
    }
    const answer = await alice.sync({ since: token });
    const typing = answer.rooms.join[roomId]?.ephemeral.events.find((e: Json) => e.type === 'm.typing');
    expect(typing?.content.user_ids).toEqual([bob.userId]);
    await hs.close();
    hs = await startTestHomeserver();
  });
});

describe('full_state', () => {
  it('with a token gives the whole state but only the new timeline events', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat', name: 'Full' });
    const since = (await alice.sync()).next_batch;
    const eventId = await alice.send(roomId, text('new'));
    const answer = await alice.sync({ since, full_state: true });
    const room = answer.rooms.join[roomId];
    expect(room.timeline.events.map((e: Json) => e.event_id)).toEqual([eventId]);
    expect(room.state.events.map((e: Json) => e.type)).toEqual(expect.arrayContaining(['m.room.create', 'm.room.name', 'm.room.power_levels']));
    // Nothing new and full_state: the room is still listed, whole.
    const again = await alice.sync({ since: answer.next_batch, full_state: true });
    expect(again.rooms.join[roomId].timeline.events).toEqual([]);
    expect(again.rooms.join[roomId].state.events.length).toBeGreaterThan(3);
  });
});

describe('incremental timelines from memory', () => {
  it('show a redaction of a recent event, and the redacted prev_content of the state that replaced it', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat', name: 'Before' });
    await bob.join(roomId);
    const since = (await bob.sync()).next_batch as string;
    const message = await alice.send(roomId, text('secret'));
    const firstTopic = await alice.setState(roomId, 'm.room.topic', '', { topic: 'private words' });
    await alice.setState(roomId, 'm.room.topic', '', { topic: 'public words' });
    await alice.ok('PUT', `/rooms/${enc(roomId)}/redact/${enc(message)}/r1`, {});
    await alice.ok('PUT', `/rooms/${enc(roomId)}/redact/${enc(firstTopic)}/r2`, {});

    const timeline = timelineOf(await bob.sync({ since }), roomId);
    const redacted = timeline.find((event) => event.event_id === message)!;
    expect(redacted.content).toEqual({});
    expect(redacted.unsigned.redacted_because.type).toBe('m.room.redaction');
    const topics = timeline.filter((event) => event.type === 'm.room.topic');
    expect(topics[0]!.content).toEqual({});
    expect(topics[1]!.content).toEqual({ topic: 'public words' });
    expect(topics[1]!.unsigned.prev_content).toEqual({});
    // The same as the stored row.
    expect(JSON.parse((await hs.services.storage.rooms.getEvent(message))!.content)).toEqual({});
  });
});

describe('unread counts kept between syncs', () => {
  it('stay right for a room counted earlier while syncs for other rooms moved the token on', async () => {
    const first = await alice.createRoom({ preset: 'public_chat' });
    const second = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(first);
    await bob.join(second);
    let since = (await bob.sync()).next_batch as string;
    const countsIn = (answer: Json, roomId: string) => answer.rooms?.join?.[roomId]?.unread_notifications;
    const step = async () => {
      const answer = await bob.sync({ since });
      since = answer.next_batch;
      return answer;
    };
    await alice.send(first, text('one'));
    expect(countsIn(await step(), first)).toEqual({ notification_count: 1, highlight_count: 0 });
    await alice.send(second, text('elsewhere'));
    expect(countsIn(await step(), second)).toEqual({ notification_count: 1, highlight_count: 0 });
    await alice.send(first, mention(`two, for ${bob.userId}`, bob.userId));
    const unreadCandidates = hs.services.storage.rooms.unreadCandidates.bind(hs.services.storage.rooms);
    let queried = 0;
    hs.services.storage.rooms.unreadCandidates = async (...args) => {
      queried++;
      return unreadCandidates(...args);
    };
    expect(countsIn(await step(), first)).toEqual({ notification_count: 2, highlight_count: 1 });
    // Carried forward from memory, not counted again.
    expect(queried).toBe(0);
  });
});

describe('a filtered timeline', () => {
  it('is limited only when a matching event was left out', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    const since = (await bob.sync()).next_batch as string;
    await alice.send(roomId, text('the only message'));
    for (let i = 0; i < 3; i++) await alice.send(roomId, { n: i }, 'org.example.other');
    const filter = JSON.stringify({ room: { timeline: { limit: 1, types: ['m.room.message'] } } });
    const timeline = (await bob.sync({ since, filter })).rooms.join[roomId].timeline;
    expect((timeline.events as Json[]).map((event) => event.content.body)).toEqual(['the only message']);
    expect(timeline.limited).toBe(false);
    // The same from the database (an initial sync reads the room's history there).
    const initial = (await bob.sync({ filter })).rooms.join[roomId].timeline;
    expect((initial.events as Json[]).map((event) => event.content.body)).toEqual(['the only message']);
    expect(initial.limited).toBe(false);
    await alice.send(roomId, text('a second one'));
    const both = (await bob.sync({ since, filter })).rooms.join[roomId].timeline;
    expect((both.events as Json[]).map((event) => event.content.body)).toEqual(['a second one']);
    expect(both.limited).toBe(true);
  });

  it('of a room joined since the token is limited, even holding every event (as Synapse marks it)', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    for (let i = 0; i < 3; i++) await alice.send(roomId, text(`before ${i}`));
    const filter = JSON.stringify({ room: { timeline: { limit: 10, types: ['m.room.message'] }, state: { types: [] } } });
    const since = (await bob.sync({ filter })).next_batch as string;
    await bob.join(roomId);
    const answer = await bob.sync({ since, filter });
    const joined = answer.rooms.join[roomId].timeline;
    expect((joined.events as Json[]).map((event) => event.content.body)).toEqual(['before 0', 'before 1', 'before 2']);
    expect(joined.limited).toBe(true);
    // Then, joined throughout: limited only when something was left out.
    await alice.send(roomId, text('after'));
    const next = (await bob.sync({ since: answer.next_batch as string, filter })).rooms.join[roomId].timeline;
    expect((next.events as Json[]).map((event) => event.content.body)).toEqual(['after']);
    expect(next.limited).toBe(false);
  });
});

describe('the leave section', () => {
  it('invited, joined and left between two syncs: the state as of the leave; the filter applies to the timeline', async () => {
    const roomId = await alice.createRoom({ preset: 'private_chat', name: 'Passing through' });
    const since = (await bob.sync()).next_batch as string;
    await alice.invite(roomId, bob.userId);
    await bob.join(roomId);
    await bob.ok('POST', `/rooms/${enc(roomId)}/leave`, {});
    await alice.setState(roomId, 'm.room.name', '', { name: 'After bob left' });
    const left = (await bob.sync({ since })).rooms.leave[roomId];
    const stateNames = (left.state.events as Json[]).filter((event) => event.type === 'm.room.name').map((event) => event.content.name);
    expect(stateNames).toEqual(['Passing through']);
    expect((left.state.events as Json[]).some((event) => event.type === 'm.room.create')).toBe(true);
    // A timeline filtered to nothing shows nothing, not even the leave; the room is still listed.
    for (const types of [[], ['m.room.message']]) {
      const filtered = (await bob.sync({ since, filter: JSON.stringify({ room: { timeline: { types } } }) })).rooms.leave[roomId];
      expect(filtered.timeline.events).toEqual([]);
      expect(filtered.state.events.length).toBeGreaterThan(0);
    }
  });
});

describe('a room with nothing to show', () => {
  it('is left out of an incremental sync whose new events the filter all leaves out', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    const filter = JSON.stringify({ room: { timeline: { types: ['m.room.message'] } } });
    const since = (await bob.sync({ filter })).next_batch as string;
    for (let i = 0; i < 3; i++) await alice.send(roomId, { n: i }, 'org.example.other');
    const answer = await bob.sync({ since, filter });
    expect(answer.rooms.join[roomId]).toBeUndefined();
    // Also when the room's recent events are not in memory (read from the database).
    hs.services.roomCache.forgetRoom(roomId);
    expect((await bob.sync({ since, filter })).rooms.join[roomId]).toBeUndefined();
  });
});

describe('a filtered timeline that scans long runs of other events', () => {
  it('still lists the room, limited, when it stops scanning before finding a match', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    const since = (await bob.sync()).next_batch as string;
    await alice.send(roomId, text('the one'));
    for (let i = 0; i < 100; i++) await alice.send(roomId, { n: i }, 'org.example.noise');
    const filter = JSON.stringify({ room: { timeline: { types: ['m.room.message'], limit: 1 } } });
    const room = (await bob.sync({ since, filter })).rooms?.join?.[roomId];
    expect(room).toBeDefined();
    const found = (room.timeline.events as Json[]).some((event) => event.content.body === 'the one');
    expect(found || room.timeline.limited === true).toBe(true);
    if (!found) expect(typeof room.timeline.prev_batch).toBe('string');
  });
});

describe('a rejoin', () => {
  it('with history visibility "joined": state and timeline together end in the true current state', async () => {
    // alice made the room; carol is invited while bob is in it; bob leaves; carol joins while bob
    // is out (he may not see that); bob rejoins.
    const roomId = await alice.createRoom({ preset: 'public_chat', initial_state: [{ type: 'm.room.history_visibility', state_key: '', content: { history_visibility: 'joined' } }] });
    await bob.join(roomId);
    const since = (await bob.sync()).next_batch as string;
    await alice.invite(roomId, carol.userId);
    await bob.ok('POST', `/rooms/${enc(roomId)}/leave`, {});
    await carol.join(roomId);
    await bob.join(roomId);

    const room = (await bob.sync({ since })).rooms.join[roomId];
    // What a client does: the state, then the timeline over it.
    const members = new Map<string, string>();
    for (const event of [...(room.state.events as Json[]), ...(room.timeline.events as Json[])]) {
      if (event.type === 'm.room.member') members.set(event.state_key as string, event.content.membership as string);
    }
    expect(members.get(carol.userId)).toBe('join');
    expect(members.get(bob.userId)).toBe('join');
    // Carol's join, which bob could not see happen, is in his timeline all the same: it is the
    // room's current state (as Synapse shows it; SyTest 06state.pl). Her invite, which bob saw,
    // but which is no longer current, is not repeated.
    expect((room.timeline.events as Json[]).some((event) => event.state_key === carol.userId && event.content.membership === 'join')).toBe(true);
  });

  it('does not bring back a room for a profile change that the filter leaves out', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await alice.setState(roomId, 'a.madeup.test.state', '', { my_key: 1 });
    const filter = JSON.stringify({ room: { timeline: { types: [] }, state: { types: ['a.madeup.test.state'] }, ephemeral: { types: [] } }, presence: { types: [] } });
    const first = await alice.sync({ filter });
    expect(first.rooms.join[roomId].state.events).toHaveLength(1);
    await alice.setState(roomId, 'm.room.member', alice.userId, { membership: 'join', displayname: 'boris' });
    await alice.send(roomId, text('a message the filter leaves out too'));
    expect((await alice.sync({ filter, since: first.next_batch })).rooms.join).toEqual({});
  });
});

describe('lazy-loaded members over a gap', () => {
  it('sends the membership changes of the gap, and not the members the device already has', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    await carol.join(roomId);
    await bob.send(roomId, text('hello from bob'));
    const filter = JSON.stringify({ room: { state: { lazy_load_members: true }, timeline: { limit: 5 } } });
    const first = await alice.sync({ filter });
    const firstRoom = first.rooms.join[roomId];
    const firstMembers = ([...firstRoom.state.events, ...firstRoom.timeline.events] as Json[]).filter((e) => e.type === 'm.room.member').map((e) => e.state_key);
    expect(firstMembers).toContain(bob.userId);

    await carol.ok('POST', `/rooms/${enc(roomId)}/leave`, {});
    for (let i = 0; i < 10; i++) await bob.send(roomId, text(`gap ${i}`));
    const next = (await alice.sync({ since: first.next_batch, filter })).rooms.join[roomId];
    expect(next.timeline.limited).toBe(true);
    const memberships = (next.state.events as Json[]).filter((e) => e.type === 'm.room.member').map((e) => [e.state_key, e.content.membership]);
    expect(memberships).toContainEqual([carol.userId, 'leave']);
    // include_redundant_members defaults to false: bob's join went to this device already.
    expect(memberships.map(([user]) => user)).not.toContain(bob.userId);
    // With it true, bob's join comes again.
    const redundant = JSON.stringify({ room: { state: { lazy_load_members: true, include_redundant_members: true }, timeline: { limit: 5 } } });
    const again = (await alice.sync({ since: first.next_batch, filter: redundant })).rooms.join[roomId];
    expect((again.state.events as Json[]).some((e) => e.type === 'm.room.member' && e.state_key === bob.userId)).toBe(true);
  });
});

describe('the room summary', () => {
  it('names heroes only while the room has neither a name nor a canonical alias (as Synapse)', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    expect((await alice.sync()).rooms.join[roomId].summary).toEqual({ 'm.heroes': [bob.userId], 'm.joined_member_count': 2, 'm.invited_member_count': 0 });
    await alice.setState(roomId, 'm.room.name', '', { name: 'A room name' });
    await carol.join(roomId);
    expect((await alice.sync()).rooms.join[roomId].summary).toEqual({ 'm.joined_member_count': 3, 'm.invited_member_count': 0 });
    // An emptied name is no name.
    await alice.setState(roomId, 'm.room.name', '', {});
    expect((await alice.sync()).rooms.join[roomId].summary['m.heroes']).toEqual([bob.userId, carol.userId]);
  });
});

describe('event_format: federation', () => {
  it('gives timeline and state events as PDUs, with event_id and unsigned', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    const sent = await alice.send(roomId, text('Test message'));
    const filterId = (await alice.ok('POST', `/user/${enc(alice.userId)}/filter`, { event_format: 'federation', room: { timeline: { limit: 1 } } })).filter_id as string;
    const room = (await alice.sync({ filter: filterId })).rooms.join[roomId];
    expect(room.timeline.events).toHaveLength(1);
    const event = room.timeline.events[0] as Json;
    expect(event).toMatchObject({ event_id: sent, room_id: roomId, sender: alice.userId, type: 'm.room.message', content: text('Test message') });
    for (const key of ['prev_events', 'auth_events', 'depth', 'hashes', 'signatures', 'origin_server_ts', 'unsigned']) expect(event).toHaveProperty(key);
    for (const state of room.state.events as Json[]) expect(state).toHaveProperty('auth_events');
    // The client format stays the default.
    expect((await alice.sync()).rooms.join[roomId].timeline.events[0]).not.toHaveProperty('prev_events');
  });
});

describe('history visibility changes', () => {
  it('are seen by a new member where the visibility before or after lets them (as the spec asks)', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    const hv = (value: string) => alice.setState(roomId, 'm.room.history_visibility', '', { history_visibility: value });
    await hv('joined');
    await alice.send(roomId, text('1'));
    await hv('invited');
    await alice.send(roomId, text('2'));
    await hv('shared');
    await alice.send(roomId, text('3'));
    await hv('joined'); // (so that the change to shared is not the current state, shown anyway)
    await bob.join(roomId);
    const events = (await bob.sync()).rooms.join[roomId].timeline.events as Json[];
    expect(events.slice(-5).map((e) => [e.type, e.content.history_visibility ?? e.content.body ?? e.content.membership])).toEqual([
      ['m.room.history_visibility', 'joined'],
      ['m.room.history_visibility', 'shared'],
      ['m.room.message', '3'],
      ['m.room.history_visibility', 'joined'],
      ['m.room.member', 'join'],
    ]);
  });
});
