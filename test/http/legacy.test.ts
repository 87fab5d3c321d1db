/**
 * The legacy endpoints Synapse still serves and SyTest sets up with: POST send and redact without a
 * transaction id, GET /events/{eventId}, the initial syncs and the event stream (GET /events).
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createUser, startTestHomeserver, type TestHomeserver, type TestUser } from '../support/homeserver.js';
import { expectMatrixError } from '../support/spec-validator.js';

let hs: TestHomeserver;
let alice: TestUser;
let bob: TestUser;
let room: string;
const bearer = { type: 'bearer' } as const;
type Event = { type: string; event_id?: string; room_id?: string; sender?: string; state_key?: string; content: Record<string, unknown> };

beforeEach(async () => {
  hs = await startTestHomeserver();
  alice = await createUser(hs, 'alice');
  bob = await createUser(hs, 'bob');
  room = (await hs.http.post('/_matrix/client/v3/createRoom').auth(alice.accessToken, bearer).send({ preset: 'public_chat', visibility: 'public', name: 'Old ways' })).body
    .room_id as string;
});
afterEach(() => hs.close());

const send = async (user: TestUser, body: string, prefix = 'v3') =>
  hs.http.post(`/_matrix/client/${prefix}/rooms/${encodeURIComponent(room)}/send/m.room.message`).auth(user.accessToken, bearer).send({ msgtype: 'm.text', body });

describe('POST send and redact without a transaction id', () => {
  it('sends a new event each time, under v3 and r0', async () => {
    const first = await send(alice, 'one');
    const second = await send(alice, 'one', 'r0');
    expect(first.status).toBe(200);
    expect(second.status).toBe(200);
    expect(first.body.event_id).toMatch(/^\$/);
    expect(second.body.event_id).not.toBe(first.body.event_id);
    const messages = await hs.http.get(`/_matrix/client/v3/rooms/${encodeURIComponent(room)}/messages?dir=b&limit=2`).auth(alice.accessToken, bearer);
    expect((messages.body.chunk as Event[]).map((e) => e.content.body)).toEqual(['one', 'one']);
  });

  it('redacts, and refuses what the sender may not do', async () => {
    const sent = (await send(alice, 'secret')).body.event_id as string;
    const redacted = await hs.http.post(`/_matrix/client/r0/rooms/${encodeURIComponent(room)}/redact/${encodeURIComponent(sent)}`).auth(alice.accessToken, bearer).send({ reason: 'oops' });
    expect(redacted.status).toBe(200);
    expect(redacted.body.event_id).toMatch(/^\$/);
    const event = await hs.http.get(`/_matrix/client/v3/rooms/${encodeURIComponent(room)}/event/${encodeURIComponent(sent)}`).auth(alice.accessToken, bearer);
    expect(event.body.content).toEqual({});
    // Not in the room: no sending, no redacting.
    expectMatrixError(await send(bob, 'hi'), 403, 'M_FORBIDDEN');
    expectMatrixError(
      await hs.http.post(`/_matrix/client/v3/rooms/${encodeURIComponent(room)}/redact/${encodeURIComponent(sent)}`).auth(bob.accessToken, bearer).send({}),
      403,
      'M_FORBIDDEN',
    );
    expectMatrixError(await hs.http.post(`/_matrix/client/v3/rooms/${encodeURIComponent(room)}/send/m.room.message`).auth(alice.accessToken, bearer).send('[1]'), 400, 'M_BAD_JSON');
  });
});

describe('GET /events/{eventId}', () => {
  it('answers an event of a room the user may read, 404 otherwise', async () => {
    const sent = (await send(alice, 'hello')).body.event_id as string;
    const got = await hs.http.get(`/_matrix/client/v3/events/${encodeURIComponent(sent)}`).auth(alice.accessToken, bearer);
    expect(got.status).toBe(200);
    expect(got.body).toMatchObject({ event_id: sent, room_id: room, type: 'm.room.message', content: { body: 'hello' }, user_id: alice.userId, age: expect.any(Number) });
    // Bob is not in the room (and its history is shared, not world-readable): nothing to learn.
    expectMatrixError(await hs.http.get(`/_matrix/client/r0/events/${encodeURIComponent(sent)}`).auth(bob.accessToken, bearer), 404, 'M_NOT_FOUND');
    expectMatrixError(await hs.http.get(`/_matrix/client/v3/events/${encodeURIComponent('$nothing')}`).auth(alice.accessToken, bearer), 404, 'M_NOT_FOUND');
  });
});

describe('initial syncs', () => {
  it('GET /initialSync: rooms with state, messages, visibility and account data; presence; limit', async () => {
    await hs.http.put(`/_matrix/client/v3/user/${encodeURIComponent(alice.userId)}/rooms/${encodeURIComponent(room)}/tags/u.work`).auth(alice.accessToken, bearer).send({});
    await send(alice, 'hello');
    const res = await hs.http.get('/_matrix/client/v3/initialSync').auth(alice.accessToken, bearer);
    expect(res.status).toBe(200);
    expect(typeof res.body.end).toBe('string');
    const found = (res.body.rooms as Array<Record<string, any>>).find((r) => r.room_id === room)!;
    expect(found).toMatchObject({ membership: 'join', visibility: 'public' });
    expect((found.state as Event[]).find((e) => e.type === 'm.room.name')?.content).toEqual({ name: 'Old ways' });
    expect((found.state as Event[]).some((e) => e.type === 'm.room.member' && e.state_key === alice.userId)).toBe(true);
    expect(found.messages.chunk.at(-1)).toMatchObject({ type: 'm.room.message', room_id: room, content: { body: 'hello' } });
    expect(typeof found.messages.start).toBe('string');
    expect(found.account_data).toContainEqual({ type: 'm.tag', content: { tags: { 'u.work': {} } } });
    expect(Array.isArray(res.body.presence)).toBe(true);
    // Push rules were never account data here (Synapse's leaves them out too).
    expect((res.body.account_data as Event[]).some((e) => e.type === 'm.push_rules')).toBe(false);

    const none = await hs.http.get('/_matrix/client/v3/initialSync?limit=0').auth(alice.accessToken, bearer);
    expect((none.body.rooms as Array<Record<string, any>>).find((r) => r.room_id === room)!.messages.chunk).toEqual([]);
    expectMatrixError(await hs.http.get('/_matrix/client/v3/initialSync?limit=hello').auth(alice.accessToken, bearer), 400, 'M_INVALID_PARAM');
  });

  it('GET /initialSync?archived=true includes a room left, as it was when left', async () => {
    await hs.http.post(`/_matrix/client/v3/join/${encodeURIComponent(room)}`).auth(bob.accessToken, bearer).send({});
    await send(bob, 'before');
    await hs.http.post(`/_matrix/client/v3/rooms/${encodeURIComponent(room)}/leave`).auth(bob.accessToken, bearer).send({});
    await send(alice, 'after');
    await hs.http.put(`/_matrix/client/v3/rooms/${encodeURIComponent(room)}/state/m.room.topic`).auth(alice.accessToken, bearer).send({ topic: 'later' });

    const plain = await hs.http.get('/_matrix/client/v3/initialSync').auth(bob.accessToken, bearer);
    expect((plain.body.rooms as Array<{ room_id: string }>).some((r) => r.room_id === room)).toBe(false);
    const archived = await hs.http.get('/_matrix/client/v3/initialSync?archived=true&limit=2').auth(bob.accessToken, bearer);
    const left = (archived.body.rooms as Array<Record<string, any>>).find((r) => r.room_id === room)!;
    expect(left.membership).toBe('leave');
    expect((left.messages.chunk as Event[]).map((e) => e.content.body ?? e.content.membership)).toEqual(['before', 'leave']);
    expect((left.state as Event[]).some((e) => e.type === 'm.room.topic')).toBe(false);

    const one = await hs.http.get(`/_matrix/client/v3/rooms/${encodeURIComponent(room)}/initialSync?limit=2`).auth(bob.accessToken, bearer);
    expect(one.status).toBe(200);
    expect(one.body).toMatchObject({ room_id: room, membership: 'leave', presence: [], receipts: [] });
    expect((one.body.messages.chunk as Event[])[0]!.content.body).toBe('before');
  });

  it('GET /rooms/{roomId}/initialSync: state, messages, own presence online, receipts; 403 for a stranger', async () => {
    const sent = (await send(alice, 'hello')).body.event_id as string;
    await hs.http.post(`/_matrix/client/v3/rooms/${encodeURIComponent(room)}/receipt/m.read/${encodeURIComponent(sent)}`).auth(alice.accessToken, bearer).send({});
    const res = await hs.http.get(`/_matrix/client/r0/rooms/${encodeURIComponent(room)}/initialSync`).auth(alice.accessToken, bearer);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ room_id: room, membership: 'join' });
    const types = new Set((res.body.state as Event[]).map((e) => e.type));
    for (const type of ['m.room.create', 'm.room.join_rules', 'm.room.member', 'm.room.power_levels']) expect(types.has(type)).toBe(true);
    // The r0 "v1" format: the sender as user_id too.
    expect((res.body.state as Event[]).find((e) => e.type === 'm.room.member')).toMatchObject({ user_id: alice.userId, state_key: alice.userId });
    expect(res.body.messages.chunk.at(-1).content.body).toBe('hello');
    const own = (res.body.presence as Event[]).find((e) => e.content.user_id === alice.userId)!;
    expect(own.type).toBe('m.presence');
    expect(own.content).toMatchObject({ presence: 'online' });
    expect(own.content).toHaveProperty('status_msg');
    expect(own.content).toHaveProperty('last_active_ago');
    expect(res.body.receipts).toContainEqual({ type: 'm.receipt', room_id: room, content: { [sent]: { 'm.read': { [alice.userId]: { ts: expect.any(Number) } } } } });
    const none = await hs.http.get(`/_matrix/client/v3/rooms/${encodeURIComponent(room)}/initialSync?limit=0`).auth(alice.accessToken, bearer);
    expect(none.body.messages.chunk).toEqual([]);

    expectMatrixError(await hs.http.get(`/_matrix/client/v3/rooms/${encodeURIComponent(room)}/initialSync`).auth(bob.accessToken, bearer), 403, 'M_FORBIDDEN');
  });
});

describe('read receipts in /initialSync', () => {
  it('show the newest receipt; one for an earlier event changes nothing (receipts only move forwards)', async () => {
    const first = (await send(alice, 'one')).body.event_id as string;
    const second = (await send(alice, 'two')).body.event_id as string;
    const receipt = (eventId: string) => hs.http.post(`/_matrix/client/v3/rooms/${encodeURIComponent(room)}/receipt/m.read/${encodeURIComponent(eventId)}`).auth(alice.accessToken, bearer).send({});
    const readUpTo = async () => {
      const body = (await hs.http.get('/_matrix/client/v3/initialSync').auth(alice.accessToken, bearer)).body;
      const event = (body.receipts as Event[]).find((e) => e.room_id === room && e.type === 'm.receipt')!;
      return Object.keys(event.content).find((id) => (event.content[id] as Record<string, Record<string, unknown>>)['m.read']?.[alice.userId]);
    };
    expect((await receipt(second)).status).toBe(200);
    expect(await readUpTo()).toBe(second);
    expect((await receipt(first)).status).toBe(200);
    expect(await readUpTo()).toBe(second);
  });

  it('the write itself refuses to move a receipt backwards (a receipt racing a later one loses)', async () => {
    const first = (await send(alice, 'three')).body.event_id as string;
    const second = (await send(alice, 'four')).body.event_id as string;
    const receipt = (eventId: string) => hs.http.post(`/_matrix/client/v3/rooms/${encodeURIComponent(room)}/receipt/m.read/${encodeURIComponent(eventId)}`).auth(alice.accessToken, bearer).send({});
    expect((await receipt(second)).status).toBe(200);
    // What a receipt for `first` that read the old state before `second` was stored would write.
    const earlier = (await hs.services.storage.rooms.getEvent(first))!;
    const row = { room_id: room, user_id: alice.userId, receipt_type: 'm.read', thread_id: '', event_id: first, ts: 1, stream_ordering: 1e9 };
    expect(await hs.services.storage.userData.setReceiptIfNewer(row, earlier.stream_ordering)).toBe(false);
    const body = (await hs.http.get('/_matrix/client/v3/initialSync').auth(alice.accessToken, bearer)).body;
    const event = (body.receipts as Event[]).find((e) => e.room_id === room && e.type === 'm.receipt')!;
    expect(Object.keys(event.content).find((id) => (event.content[id] as Record<string, Record<string, unknown>>)['m.read']?.[alice.userId])).toBe(second);
  });
});

describe('GET /events (the event stream)', () => {
  it('starts at now, then brings new events with room_id, typing and invites; waits for news', async () => {
    const first = await hs.http.get('/_matrix/client/r0/events?timeout=0').auth(alice.accessToken, bearer);
    expect(first.status).toBe(200);
    expect(first.body).toMatchObject({ chunk: [], start: expect.any(String), end: expect.any(String) });
    const from = first.body.end as string;

    const sent = (await send(alice, 'streamed')).body.event_id as string;
    await hs.http.put(`/_matrix/client/v3/rooms/${encodeURIComponent(room)}/typing/${encodeURIComponent(alice.userId)}`).auth(alice.accessToken, bearer).send({ typing: true, timeout: 30000 });
    const next = await hs.http.get(`/_matrix/client/r0/events?from=${from}&timeout=0`).auth(alice.accessToken, bearer);
    expect(next.body.start).toBe(from);
    const chunk = next.body.chunk as Event[];
    expect(chunk).toContainEqual(expect.objectContaining({ event_id: sent, room_id: room, content: { msgtype: 'm.text', body: 'streamed' } }));
    expect(chunk).toContainEqual({ type: 'm.typing', room_id: room, content: { user_ids: [alice.userId] } });

    // A parked request wakes with an invite.
    const bobFrom = (await hs.http.get('/_matrix/client/v3/events?timeout=0').auth(bob.accessToken, bearer)).body.end as string;
    const waiting = hs.http.get(`/_matrix/client/v3/events?from=${bobFrom}&timeout=20000`).auth(bob.accessToken, bearer).then((r) => r);
    await new Promise((resolve) => setTimeout(resolve, 200));
    await hs.http.post(`/_matrix/client/v3/rooms/${encodeURIComponent(room)}/invite`).auth(alice.accessToken, bearer).send({ user_id: bob.userId });
    const woken = await waiting;
    expect(woken.body.chunk).toContainEqual(expect.objectContaining({ type: 'm.room.member', state_key: bob.userId, room_id: room, content: expect.objectContaining({ membership: 'invite' }) }));
    // Nothing new: the same token back.
    const quiet = await hs.http.get(`/_matrix/client/v3/events?from=${woken.body.end as string}&timeout=0`).auth(bob.accessToken, bearer);
    expect(quiet.body).toMatchObject({ chunk: [], end: woken.body.end });
  }, 60_000);

  it('refuses a bad limit or timeout with 400', async () => {
    for (const query of ['limit=hello', 'limit=-2', 'timeout=hello', 'from=nonsense']) {
      expect((await hs.http.get(`/_matrix/client/r0/events?${query}`).auth(alice.accessToken, bearer)).status).toBe(400);
    }
  });
});

describe('GET /events?room_id= of a room the user is not in (peeking)', () => {
  const setVisibility = (visibility: string) =>
    hs.http.put(`/_matrix/client/v3/rooms/${encodeURIComponent(room)}/state/m.room.history_visibility`).auth(alice.accessToken, bearer).send({ history_visibility: visibility });
  const peek = (token: string, query: string) => hs.http.get(`/_matrix/client/r0/events?room_id=${encodeURIComponent(room)}&${query}`).auth(token, bearer);

  async function peekAndWake(token: string): Promise<void> {
    const first = await peek(token, 'timeout=0');
    expect(first.status).toBe(200);
    const from = first.body.end as string;
    // Parked (the peeker is in no room), then woken by a message in the room.
    const waiting = peek(token, `from=${encodeURIComponent(from)}&timeout=20000`).then((r) => r);
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(hs.services.notifier.parkedCount()).toBeGreaterThan(0);
    const sentAt = performance.now();
    const sent = (await send(alice, 'mice')).body.event_id as string;
    const woken = await waiting;
    expect(woken.status).toBe(200);
    // Woken by the message, not answered at the timeout.
    expect(performance.now() - sentAt).toBeLessThan(10_000);
    expect(woken.body.chunk).toContainEqual(expect.objectContaining({ event_id: sent, room_id: room, content: { msgtype: 'm.text', body: 'mice' } }));
    // Nothing of the peek stays once it answered.
    expect(hs.services.notifier.peekersOf(room)[Symbol.iterator]().next().done).toBe(true);

    // Receipts, typing and the members' presence come too, each waking the parked request.
    let at = woken.body.end as string;
    const next = async (act: () => Promise<unknown>): Promise<Event[]> => {
      const parked = peek(token, `from=${encodeURIComponent(at)}&timeout=20000`).then((r) => r);
      await new Promise((resolve) => setTimeout(resolve, 200));
      const actedAt = performance.now();
      await act();
      const res = await parked;
      expect(performance.now() - actedAt).toBeLessThan(10_000);
      at = res.body.end as string;
      return res.body.chunk as Event[];
    };
    const presence = await next(() => hs.http.put(`/_matrix/client/v3/presence/${encodeURIComponent(alice.userId)}/status`).auth(alice.accessToken, bearer).send({ presence: 'online', status_msg: 'lemurs' }));
    expect(presence).toContainEqual(expect.objectContaining({ type: 'm.presence', content: expect.objectContaining({ user_id: alice.userId, status_msg: 'lemurs' }) }));
    const receipt = await next(() => hs.http.post(`/_matrix/client/v3/rooms/${encodeURIComponent(room)}/receipt/m.read/${encodeURIComponent(sent)}`).auth(alice.accessToken, bearer).send({}));
    expect(receipt).toContainEqual(expect.objectContaining({ type: 'm.receipt', room_id: room }));
    const typing = await next(() =>
      hs.http.put(`/_matrix/client/v3/rooms/${encodeURIComponent(room)}/typing/${encodeURIComponent(alice.userId)}`).auth(alice.accessToken, bearer).send({ typing: true, timeout: 30000 }),
    );
    expect(typing).toContainEqual({ type: 'm.typing', room_id: room, content: { user_ids: [alice.userId] } });
  }

  it('a real user reads a world-readable room as it happens; 403 for a room that is not', async () => {
    expectMatrixError(await peek(bob.accessToken, 'timeout=0'), 403, 'M_FORBIDDEN');
    expectMatrixError(await hs.http.get(`/_matrix/client/r0/events?room_id=${encodeURIComponent('!nowhere:localhost')}&timeout=0`).auth(bob.accessToken, bearer), 403, 'M_FORBIDDEN');
    expect((await setVisibility('world_readable')).status).toBe(200);
    await peekAndWake(bob.accessToken);
    // Shared again: the peek is refused.
    expect((await setVisibility('shared')).status).toBe(200);
    expectMatrixError(await peek(bob.accessToken, 'timeout=0'), 403, 'M_FORBIDDEN');
  }, 60_000);

  it('a guest does too', async () => {
    await hs.close();
    hs = await startTestHomeserver({ allow_guest_access: true });
    alice = await createUser(hs, 'alice');
    room = (await hs.http.post('/_matrix/client/v3/createRoom').auth(alice.accessToken, bearer).send({ preset: 'public_chat' })).body.room_id as string;
    const guest = await hs.http.post('/_matrix/client/v3/register?kind=guest').send({});
    expect(guest.status).toBe(200);
    const token = guest.body.access_token as string;
    expectMatrixError(await peek(token, 'timeout=0'), 403, 'M_FORBIDDEN');
    expect((await setVisibility('world_readable')).status).toBe(200);
    await peekAndWake(token);
  }, 60_000);
});
