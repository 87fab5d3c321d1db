/**
 * What users must not be able to see or do, found by review: each test reproduces a hole that
 * existed and guards against its return.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createUser, startTestHomeserver, type TestHomeserver } from '../support/homeserver.js';
import { client, clientsFor, timelineOf, type Json, type TestClient } from '../support/client.js';
import { expectMatrixError } from '../support/spec-validator.js';

let hs: TestHomeserver;
let alice: TestClient;
let bob: TestClient;
let mallory: TestClient;

beforeEach(async () => {
  hs = await startTestHomeserver();
  [alice, bob, mallory] = await clientsFor(hs, 'alice', 'bob', 'mallory');
});
afterEach(() => hs.close());

const enc = encodeURIComponent;
const text = (body: string) => ({ msgtype: 'm.text', body });

describe('injection', () => {
  it('__proto__ in event content cannot reach object prototypes through event_fields', async () => {
    const own = await mallory.createRoom();
    const aliceRoom = await alice.createRoom();
    const raw = '{"msgtype":"m.text","body":"hi","__proto__":{"rooms":[],"newRoom":{"room_version":"10"}}}';
    const sent = await hs.http
      .put(`/_matrix/client/v3/rooms/${enc(own)}/send/m.room.message/p1`)
      .set('Content-Type', 'application/json')
      .auth(mallory.user.accessToken, { type: 'bearer' })
      .send(raw);
    expect(sent.status).toBe(200);
    await hs.http
      .get('/_matrix/client/v3/sync')
      .query({ filter: JSON.stringify({ event_fields: ['content.__proto__.rooms', 'content.__proto__.newRoom'] }) })
      .auth(mallory.user.accessToken, { type: 'bearer' });
    expect(({} as Json).rooms).toBeUndefined();
    expect(({} as Json).newRoom).toBeUndefined();
    expect(Object.keys((await alice.sync()).rooms.join)).toEqual([aliceRoom]);
    const stored = await mallory.ok('GET', `/rooms/${enc(own)}/event/${enc(sent.body.event_id)}`);
    expect(Object.hasOwn(stored.content, '__proto__')).toBe(false);
  });

  it('inline filters of the wrong shape are refused with 400, not 500', async () => {
    for (const filter of [{ room: { rooms: 5 } }, { room: { timeline: { types: 'x' } } }, { room: { timeline: { types: [1] } } }, { event_fields: 5 }]) {
      expectMatrixError(await alice.request('GET', '/sync', undefined, { filter: JSON.stringify(filter) }), 400, 'M_INVALID_PARAM');
    }
    const roomId = await alice.createRoom();
    expectMatrixError(await alice.request('GET', `/rooms/${enc(roomId)}/messages`, undefined, { filter: '{"types":"x"}' }), 400, 'M_INVALID_PARAM');
  });
});

describe('what leavers, outsiders and the banned see', () => {
  it('/context gives the state at the returned events, not what happened after the caller left', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    await alice.ok('POST', `/rooms/${enc(roomId)}/kick`, { user_id: bob.userId });
    const leave = (
      await hs.http.get(`/_matrix/client/v3/rooms/${enc(roomId)}/state/m.room.member/${enc(bob.userId)}`).query({ format: 'event' }).auth(alice.user.accessToken, { type: 'bearer' })
    ).body;
    await alice.setState(roomId, 'm.room.topic', '', { topic: 'secret plans' });
    await mallory.join(roomId);
    const context = await bob.ok('GET', `/rooms/${enc(roomId)}/context/${enc(leave.event_id)}`);
    const seen = JSON.stringify(context.state);
    expect(seen).not.toContain('secret plans');
    expect(seen).not.toContain(mallory.userId);
  });

  it('events are judged by the history visibility when they were sent', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat', initial_state: [{ type: 'm.room.history_visibility', content: { history_visibility: 'joined' } }] });
    const hidden = await alice.send(roomId, text('members only'));
    await alice.ok('PUT', `/rooms/${enc(roomId)}/state/m.room.history_visibility/`, { history_visibility: 'world_readable' });
    const open = await alice.send(roomId, text('for everyone'));
    const outsider = await mallory.ok('GET', `/rooms/${enc(roomId)}/messages`, undefined, { dir: 'b', limit: 50 });
    const ids = outsider.chunk.map((e: Json) => e.event_id);
    expect(ids).toContain(open);
    expect(ids).not.toContain(hidden);
  });

  it('an incremental sync across a leave and rejoin hides what was said while away', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat', initial_state: [{ type: 'm.room.history_visibility', content: { history_visibility: 'joined' } }] });
    await bob.join(roomId);
    const since = (await bob.sync()).next_batch;
    await bob.ok('POST', `/rooms/${enc(roomId)}/leave`, {});
    const away = await alice.send(roomId, text('while bob was away'));
    await bob.join(roomId);
    const back = await bob.sync({ since });
    expect(timelineOf(back, roomId).map((e) => e.event_id)).not.toContain(away);
  });

  it('a former member reads the state as it was when they left; someone never in gets 403', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat', topic: 'when bob was here' });
    await bob.join(roomId);
    await bob.ok('POST', `/rooms/${encodeURIComponent(roomId)}/leave`, {});
    await alice.setState(roomId, 'm.room.topic', '', { topic: 'after bob left' });
    const state = (await bob.ok('GET', `/rooms/${encodeURIComponent(roomId)}/state`)) as unknown as Json[];
    expect(state.find((event) => event.type === 'm.room.topic')?.content.topic).toBe('when bob was here');
    expect((await bob.ok('GET', `/rooms/${encodeURIComponent(roomId)}/state/m.room.topic/`)).topic).toBe('when bob was here');
    const members = (await bob.ok('GET', `/rooms/${encodeURIComponent(roomId)}/members`)).chunk as Json[];
    expect(members.find((event) => event.state_key === bob.userId)?.content.membership).toBe('leave');
    expectMatrixError(await mallory.request('GET', `/rooms/${encodeURIComponent(roomId)}/state`), 403, 'M_FORBIDDEN');
  });

  it('a banned former member gets 403 for the state, as in Synapse (their server learns of the ban so)', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    await alice.ok('POST', `/rooms/${enc(roomId)}/ban`, { user_id: bob.userId, reason: 'testing' });
    expectMatrixError(await bob.request('GET', `/rooms/${enc(roomId)}/state/m.room.member/${enc(bob.userId)}`), 403, 'M_FORBIDDEN');
    expectMatrixError(await bob.request('GET', `/rooms/${enc(roomId)}/state`), 403, 'M_FORBIDDEN');
    expectMatrixError(await bob.request('GET', `/rooms/${enc(roomId)}/members`), 403, 'M_FORBIDDEN');
    // Unbanned, bob is a former member again, who reads the state as it was when he left.
    await alice.ok('POST', `/rooms/${enc(roomId)}/unban`, { user_id: bob.userId });
    expect((await bob.ok('GET', `/rooms/${enc(roomId)}/state/m.room.member/${enc(bob.userId)}`)).membership).toBe('leave');
  });

  it('an event of a room one is not in is 404, as if it did not exist', async () => {
    const roomId = await alice.createRoom({ preset: 'private_chat' });
    const eventId = await alice.send(roomId, { msgtype: 'm.text', body: 'private' });
    expectMatrixError(await bob.request('GET', `/rooms/${encodeURIComponent(roomId)}/event/${encodeURIComponent(eventId)}`), 404, 'M_NOT_FOUND');
    expectMatrixError(await bob.request('GET', `/rooms/${encodeURIComponent(roomId)}/event/${encodeURIComponent('$nope')}`), 404, 'M_NOT_FOUND');
  });

  it('typing and receipts need membership, even in a world-readable room', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat', initial_state: [{ type: 'm.room.history_visibility', content: { history_visibility: 'world_readable' } }] });
    const eventId = await alice.send(roomId);
    expectMatrixError(await mallory.request('PUT', `/rooms/${enc(roomId)}/typing/${enc(mallory.userId)}`, { typing: true }), 403, 'M_FORBIDDEN');
    expectMatrixError(await mallory.request('POST', `/rooms/${enc(roomId)}/receipt/m.read/${enc(eventId)}`, {}), 403, 'M_FORBIDDEN');
  });

  it('a non-member learns nothing about who is invited or joined from invite, kick and unban', async () => {
    const roomId = await alice.createRoom();
    await alice.invite(roomId, bob.userId);
    expectMatrixError(await mallory.request('POST', `/rooms/${enc(roomId)}/invite`, { user_id: bob.userId }), 403, 'M_FORBIDDEN');
    const kickInvited = await mallory.request('POST', `/rooms/${enc(roomId)}/kick`, { user_id: bob.userId });
    const kickStranger = await mallory.request('POST', `/rooms/${enc(roomId)}/kick`, { user_id: '@nobody:test.local' });
    expect(kickInvited.body.error.replace(bob.userId, 'X')).toBe(kickStranger.body.error.replace('@nobody:test.local', 'X'));
  });
});

describe('redaction and state details', () => {
  it('a redacted state event does not survive as the next event\u2019s prev_content', async () => {
    const roomId = await alice.createRoom();
    const first = await alice.setState(roomId, 'm.room.topic', '', { topic: 'the password is hunter2' });
    await alice.setState(roomId, 'm.room.topic', '', { topic: 'nothing to see' });
    await alice.ok('PUT', `/rooms/${enc(roomId)}/redact/${enc(first)}/r1`, {});
    const res = await hs.http.get(`/_matrix/client/v3/rooms/${enc(roomId)}/state/m.room.topic/`).query({ format: 'event' }).auth(alice.user.accessToken, { type: 'bearer' });
    expect(JSON.stringify(res.body)).not.toContain('hunter2');
    const synced = await alice.sync();
    expect(JSON.stringify(synced)).not.toContain('hunter2');
    const history = await alice.ok('GET', `/rooms/${enc(roomId)}/messages`, undefined, { dir: 'b', limit: 50 });
    expect(JSON.stringify(history)).not.toContain('hunter2');
  });

  it('member state keys must be user ids; initial_state cannot carry members or a create event', async () => {
    const roomId = await alice.createRoom();
    expectMatrixError(await alice.request('PUT', `/rooms/${enc(roomId)}/state/m.room.member/foo`, { membership: 'ban' }), 400, 'M_INVALID_PARAM');
    expectMatrixError(
      await alice.request('POST', '/createRoom', { initial_state: [{ type: 'm.room.member', state_key: '@ghost:elsewhere', content: { membership: 'invite' } }] }),
      400,
      'M_INVALID_PARAM',
    );
  });

  it('joining again with nothing changed writes nothing', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    const before = await bob.ok('GET', `/rooms/${enc(roomId)}/state/m.room.member/${enc(bob.userId)}`, undefined, {});
    const token = (await bob.sync()).next_batch;
    await bob.join(roomId);
    expect((await bob.sync({ since: token })).next_batch).toBe(token);
    expect(await bob.ok('GET', `/rooms/${enc(roomId)}/state/m.room.member/${enc(bob.userId)}`)).toEqual(before);
  });
});

describe('transaction ids name one request path', () => {
  it('the same transaction id in two rooms, or for a send and a redaction, are different requests', async () => {
    const roomA = await alice.createRoom();
    const roomB = await alice.createRoom();
    const inA = await alice.send(roomA, text('a'), 'm.room.message', 'txn1');
    const inB = await alice.send(roomB, text('b'), 'm.room.message', 'txn1');
    expect(inB).not.toBe(inA);
    expect(await alice.send(roomB, text('b'), 'm.room.message', 'txn1')).toBe(inB);
    const redaction = await alice.ok('PUT', `/rooms/${enc(roomA)}/redact/${enc(inA)}/txn1`, {});
    expect(redaction.event_id).not.toBe(inA);
    expect((await alice.ok('GET', `/rooms/${enc(roomA)}/event/${enc(inA)}`)).content).toEqual({});
  });
});

describe('sync details', () => {
  it('a timeline filtered by type still brings the state changes it leaves out', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    const filter = JSON.stringify({ room: { timeline: { types: ['m.room.message'] } } });
    const since = (await alice.sync({ filter })).next_batch;
    await bob.join(roomId);
    await alice.setState(roomId, 'm.room.name', '', { name: 'Renamed' });
    await alice.send(roomId, text('hi'));
    const room = (await alice.sync({ since, filter })).rooms.join[roomId];
    expect(room.timeline.events.map((e: Json) => e.type)).toEqual(['m.room.message']);
    const state = room.state.events.map((e: Json) => `${e.type}|${e.state_key}`);
    expect(state).toEqual(expect.arrayContaining(['m.room.name|', `m.room.member|${bob.userId}`]));
  });

  it('a token from the future is replaced by one of ours, and no event is skipped after it', async () => {
    const roomId = await alice.createRoom();
    const stale = await alice.sync({ since: 's999999_0' });
    expect(stale.next_batch).not.toBe('s999999_0');
    const eventId = await alice.send(roomId, text('after the stale token'));
    const next = await alice.sync({ since: stale.next_batch });
    expect(timelineOf(next, roomId).map((e) => e.event_id)).toEqual([eventId]);
  });
});

describe('second review', () => {
  it('a ban long after leaving, or an invite never accepted, does not open /context', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    await bob.ok('POST', `/rooms/${enc(roomId)}/leave`, {});
    await alice.setState(roomId, 'm.room.topic', '', { topic: 'SECRET-TOPIC' });
    await mallory.join(roomId);
    await alice.ok('POST', `/rooms/${enc(roomId)}/ban`, { user_id: bob.userId });
    const ban = (await hs.http.get(`/_matrix/client/v3/rooms/${enc(roomId)}/state/m.room.member/${enc(bob.userId)}`).query({ format: 'event' }).auth(alice.user.accessToken, { type: 'bearer' })).body;
    expectMatrixError(await bob.request('GET', `/rooms/${enc(roomId)}/context/${enc(ban.event_id)}`), 404, 'M_NOT_FOUND');
    const history = await bob.ok('GET', `/rooms/${enc(roomId)}/messages`, undefined, { dir: 'b', limit: 50 });
    expect(JSON.stringify(history)).not.toContain('SECRET-TOPIC');

    const privateRoom = await alice.createRoom({ preset: 'private_chat', topic: 'PRIVATE-TOPIC' });
    await alice.invite(privateRoom, mallory.userId);
    await mallory.join(privateRoom);
    await alice.invite(privateRoom, bob.userId);
    const invite = (await hs.http.get(`/_matrix/client/v3/rooms/${enc(privateRoom)}/state/m.room.member/${enc(bob.userId)}`).query({ format: 'event' }).auth(alice.user.accessToken, { type: 'bearer' })).body;
    expectMatrixError(await bob.request('GET', `/rooms/${enc(privateRoom)}/context/${enc(invite.event_id)}`), 404, 'M_NOT_FOUND');
  });

  it('leaving and rejoining between two syncs brings the whole current state', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat', initial_state: [{ type: 'm.room.history_visibility', content: { history_visibility: 'joined' } }] });
    await bob.join(roomId);
    const since = (await bob.sync()).next_batch;
    await bob.ok('POST', `/rooms/${enc(roomId)}/leave`, {});
    await alice.setState(roomId, 'm.room.topic', '', { topic: 'changed while away' });
    await mallory.join(roomId);
    await bob.join(roomId);
    const room = (await bob.sync({ since })).rooms.join[roomId];
    const seen = [...room.state.events, ...room.timeline.events];
    expect(seen.find((e: Json) => e.type === 'm.room.topic')?.content).toEqual({ topic: 'changed while away' });
    expect(seen.some((e: Json) => e.type === 'm.room.member' && e.state_key === mallory.userId)).toBe(true);
    // An initial sync after the rejoin has the current state too, though its timeline starts earlier.
    const initial = (await bob.sync()).rooms.join[roomId];
    const all = [...initial.state.events, ...initial.timeline.events].filter((e: Json) => e.type === 'm.room.topic');
    expect(all.at(-1).content).toEqual({ topic: 'changed while away' });
  });

  it('an initial sync with a filtered timeline still has the current state', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat', name: 'Before' });
    await alice.send(roomId, text('first'));
    await alice.setState(roomId, 'm.room.name', '', { name: 'After' });
    await alice.send(roomId, text('second'));
    const room = (await alice.sync({ filter: JSON.stringify({ room: { timeline: { types: ['m.room.message'] } } }) })).rooms.join[roomId];
    const names = room.state.events.filter((e: Json) => e.type === 'm.room.name');
    expect(names.at(-1).content).toEqual({ name: 'After' });
  });

  it('/context gives the state as it was at the returned events', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await alice.setState(roomId, 'm.room.topic', '', { topic: 'one' });
    await alice.setState(roomId, 'm.room.topic', '', { topic: 'two' });
    const middle = await alice.send(roomId, text('between two and three'));
    await alice.setState(roomId, 'm.room.topic', '', { topic: 'three' });
    const context = await alice.ok('GET', `/rooms/${enc(roomId)}/context/${enc(middle)}`, undefined, { limit: 0 });
    expect(context.state.find((e: Json) => e.type === 'm.room.topic').content).toEqual({ topic: 'two' });
  });

  it('unread counts survive a display name change, drop on redaction and on a private receipt', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    const counts = (answer: Json) => answer.rooms.join[roomId]?.unread_notifications?.notification_count;
    let answer = await bob.sync();
    await alice.send(roomId, text('1'));
    const second = await alice.send(roomId, text('2'));
    const third = await alice.send(roomId, text('3'));
    answer = await bob.sync({ since: answer.next_batch });
    expect(counts(answer)).toBe(3);
    await bob.ok('PUT', `/profile/${enc(bob.userId)}/displayname`, { displayname: 'Bob 2' });
    answer = await bob.sync({ since: answer.next_batch });
    expect(counts(answer)).toBe(3);
    expect(counts(await bob.sync())).toBe(3);
    await alice.ok('PUT', `/rooms/${enc(roomId)}/redact/${enc(second)}/r`, {});
    answer = await bob.sync({ since: answer.next_batch });
    expect(counts(answer)).toBe(2);
    await bob.ok('POST', `/rooms/${enc(roomId)}/receipt/m.read.private/${enc(third)}`, {});
    answer = await bob.sync({ since: answer.next_batch });
    expect(counts(answer)).toBe(0);
  });

  it('kicked and invited again between two syncs: the room is under both leave and invite', async () => {
    const roomId = await alice.createRoom({ preset: 'private_chat' });
    await alice.invite(roomId, bob.userId);
    await bob.join(roomId);
    const since = (await bob.sync()).next_batch;
    await alice.ok('POST', `/rooms/${enc(roomId)}/kick`, { user_id: bob.userId });
    await alice.invite(roomId, bob.userId);
    const answer = await bob.sync({ since });
    expect(Object.keys(answer.rooms.invite)).toEqual([roomId]);
    expect(answer.rooms.leave[roomId].timeline.events.at(-1)).toMatchObject({ type: 'm.room.member', state_key: bob.userId, content: { membership: 'leave' } });
  });

  it('deleting an alias takes it out of the canonical alias when the deleter may change it', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat', room_alias_name: 'home' });
    expect(await alice.ok('GET', `/rooms/${enc(roomId)}/state/m.room.canonical_alias`)).toEqual({ alias: '#home:test.local' });
    expect(await alice.ok('DELETE', `/directory/room/${enc('#home:test.local')}`)).toEqual({});
    expect(await alice.ok('GET', `/rooms/${enc(roomId)}/state/m.room.canonical_alias`)).toEqual({});
    // Bob made an alias that became canonical; he may delete it but not change the canonical
    // alias event, which then keeps naming it (as in Synapse).
    await bob.join(roomId);
    await bob.ok('PUT', `/directory/room/${enc('#bobs:test.local')}`, { room_id: roomId });
    await alice.ok('PUT', `/directory/room/${enc('#other:test.local')}`, { room_id: roomId });
    await alice.setState(roomId, 'm.room.canonical_alias', '', { alias: '#bobs:test.local', alt_aliases: ['#other:test.local'] });
    expect(await bob.ok('DELETE', `/directory/room/${enc('#bobs:test.local')}`)).toEqual({});
    expectMatrixError(await alice.request('GET', `/directory/room/${enc('#bobs:test.local')}`), 404, 'M_NOT_FOUND');
    // A server admin outside the room may delete any alias.
    const admin = client(hs, await createUser(hs, 'admin', { admin: true }));
    expect(await admin.ok('DELETE', `/directory/room/${enc('#other:test.local')}`)).toEqual({});
  });

  it('a banned user drops off the typing list at once', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    await bob.ok('PUT', `/rooms/${enc(roomId)}/typing/${enc(bob.userId)}`, { typing: true, timeout: 60_000 });
    await alice.ok('POST', `/rooms/${enc(roomId)}/ban`, { user_id: bob.userId });
    const typing = (await alice.sync()).rooms.join[roomId].ephemeral.events.find((e: Json) => e.type === 'm.typing');
    expect(typing?.content.user_ids ?? []).toEqual([]);
  });

  it('a failing database answers every waiting send with an error instead of hanging', async () => {
    const roomId = await alice.createRoom();
    const storage = hs.services.storage;
    const original = storage.transaction.bind(storage);
    // On PostgreSQL a batch of messages is one statement outside any transaction.
    const oneStatement = storage.rooms.insertEventsMovingHead.bind(storage.rooms);
    storage.transaction = () => Promise.reject(new Error('disk gone'));
    storage.rooms.insertEventsMovingHead = () => Promise.reject(new Error('disk gone'));
    try {
      const answers = await Promise.all([1, 2, 3].map((i) => alice.request('PUT', `/rooms/${enc(roomId)}/send/m.room.message/fail${i}`, text('x'))));
      for (const answer of answers) expectMatrixError(answer, 500, 'M_UNKNOWN');
    } finally {
      storage.transaction = original;
      storage.rooms.insertEventsMovingHead = oneStatement;
    }
    // The retry goes through once the database is back.
    expect(await alice.send(roomId, text('x'), 'm.room.message', 'fail1')).toEqual(expect.any(String));
  });

  it('redactions go through /redact, not /send', async () => {
    const roomId = await alice.createRoom();
    expectMatrixError(await alice.request('PUT', `/rooms/${enc(roomId)}/send/m.room.redaction/x`, { redacts: '$x' }), 400, 'M_BAD_JSON');
  });
});

describe('third review', () => {
  it('a rejected or withdrawn invite, or a ban while invited, reaches the user under leave', async () => {
    for (const end of ['reject', 'withdraw', 'ban'] as const) {
      const roomId = await alice.createRoom();
      const since = (await bob.sync()).next_batch;
      await alice.invite(roomId, bob.userId);
      if (end === 'reject') await bob.ok('POST', `/rooms/${enc(roomId)}/leave`, {});
      if (end === 'withdraw') await alice.ok('POST', `/rooms/${enc(roomId)}/kick`, { user_id: bob.userId });
      if (end === 'ban') await alice.ok('POST', `/rooms/${enc(roomId)}/ban`, { user_id: bob.userId });
      const answer = await bob.sync({ since });
      const last = answer.rooms.leave[roomId]?.timeline.events.at(-1);
      expect(last, end).toMatchObject({ type: 'm.room.member', state_key: bob.userId, content: { membership: end === 'ban' ? 'ban' : 'leave' } });
    }
  });

  it('a ban long after leaving shows nothing, and the room is not listed empty', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    await bob.ok('POST', `/rooms/${enc(roomId)}/leave`, {});
    const since = (await bob.sync()).next_batch;
    await alice.ok('POST', `/rooms/${enc(roomId)}/ban`, { user_id: bob.userId });
    const answer = await bob.sync({ since });
    expect(answer.rooms.leave).toEqual({});
  });

  it('an older private receipt does not bring read messages back into the count', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    const first = await alice.send(roomId, text('1'));
    await alice.send(roomId, text('2'));
    const third = await alice.send(roomId, text('3'));
    await bob.ok('POST', `/rooms/${enc(roomId)}/receipt/m.read/${enc(third)}`, {});
    await bob.ok('POST', `/rooms/${enc(roomId)}/receipt/m.read.private/${enc(first)}`, {});
    expect((await bob.sync()).rooms.join[roomId].unread_notifications.notification_count).toBe(0);
  });
});
