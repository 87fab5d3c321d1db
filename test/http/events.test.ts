/** Sending and reading events through HTTP: send, state, redact, event, messages, context. */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createUser, login, startTestHomeserver, type TestHomeserver } from '../support/homeserver.js';
import { client, clientsFor, timelineOf, type TestClient } from '../support/client.js';
import { expectMatrixError, validateEvent } from '../support/spec-validator.js';

let hs: TestHomeserver;
let alice: TestClient;
let bob: TestClient;
let carol: TestClient;
let roomId: string;

beforeEach(async () => {
  hs = await startTestHomeserver();
  [alice, bob, carol] = await clientsFor(hs, 'alice', 'bob', 'carol');
  roomId = await alice.createRoom({ preset: 'public_chat' });
  await bob.join(roomId);
});
afterEach(() => hs.close());

const enc = encodeURIComponent;
const text = (body: string) => ({ msgtype: 'm.text', body });

describe('PUT /rooms/{roomId}/send', () => {
  it('is idempotent per device and transaction id, also when retries race', async () => {
    const path = `/rooms/${enc(roomId)}/send/m.room.message/txn-1`;
    const [a, b] = await Promise.all([alice.ok('PUT', path, text('once')), alice.ok('PUT', path, text('once'))]);
    expect(a.event_id).toBe(b.event_id);
    expect((await alice.ok('PUT', path, text('once'))).event_id).toBe(a.event_id);
    // Another user with the same transaction id gets their own event.
    expect((await bob.ok('PUT', path, text('once'))).event_id).not.toBe(a.event_id);
    const messages = await alice.ok('GET', `/rooms/${enc(roomId)}/messages`, undefined, { dir: 'b', limit: 10 });
    expect(messages.chunk.filter((e: any) => e.content.body === 'once')).toHaveLength(2);
  });

  it('answers a retry written in one commit with new sends, and a retry after leaving, with the first event', async () => {
    const path = `/rooms/${enc(roomId)}/send/m.room.message/txn-batch`;
    const first = (await alice.ok('PUT', path, text('first'))).event_id;
    // Nothing looks the transaction id up before the write: the retry fails the group commit it
    // shares with the other sends, is answered from the record, and the others are written again.
    const [retry, ...others] = await Promise.all([
      alice.ok('PUT', path, text('first')),
      bob.ok('PUT', `/rooms/${enc(roomId)}/send/m.room.message/b1`, text('bob 1')),
      alice.ok('PUT', `/rooms/${enc(roomId)}/send/m.room.message/a2`, text('alice 2')),
    ]);
    expect(retry.event_id).toBe(first);
    const messages = await alice.ok('GET', `/rooms/${enc(roomId)}/messages`, undefined, { dir: 'b', limit: 10 });
    const bodies = messages.chunk.filter((e: any) => e.type === 'm.room.message').map((e: any) => e.content.body);
    expect(bodies.filter((body: string) => body === 'first')).toHaveLength(1);
    expect(bodies).toEqual(expect.arrayContaining(['bob 1', 'alice 2']));
    expect(new Set(others.map((o) => o.event_id)).size).toBe(2);
    // Refused now (alice left), a retry still gets its first answer.
    await alice.ok('POST', `/rooms/${enc(roomId)}/leave`, {});
    expect((await alice.ok('PUT', path, text('first'))).event_id).toBe(first);
    expectMatrixError(await alice.request('PUT', `/rooms/${enc(roomId)}/send/m.room.message/new-after-leave`, text('no')), 403, 'M_FORBIDDEN');
  });

  it('answers a retry that shares its group commit with a new event, and writes that event', async () => {
    const { writer } = hs.services;
    const txn = { deviceId: 'DEVICE', scope: 'test-scope', txnId: 'in-one-commit' };
    const draft = (body: string, withTxn: boolean) => ({ type: 'm.room.message', sender: alice.userId, content: text(body), txn: withTxn ? txn : undefined });
    const [first] = await writer.submit({ roomId, prepare: () => [draft('first', true)], txn: { sender: alice.userId, ...txn, checkpoint: 0 } });
    // Submitted in one turn: one group commit, which the retry's insert fails (events_txn is unique).
    const [[retry], [other]] = await Promise.all([
      writer.submit({ roomId, prepare: () => [draft('first', true)], txn: { sender: alice.userId, ...txn, checkpoint: 0 } }),
      writer.submit({ roomId, prepare: () => [draft('other', false)] }),
    ]);
    expect(retry!.eventId).toBe(first!.eventId);
    expect(other!.eventId).not.toBe(first!.eventId);
    const messages = await alice.ok('GET', `/rooms/${enc(roomId)}/messages`, undefined, { dir: 'b', limit: 10 });
    const bodies = messages.chunk.filter((e: any) => e.type === 'm.room.message').map((e: any) => e.content.body);
    expect(bodies).toEqual(['other', 'first']);
  });

  it('shows unsigned.transaction_id only to the sending device', async () => {
    const since = (await alice.sync()).next_batch;
    const eventId = await alice.send(roomId, text('mine'), 'm.room.message', 'my-txn');
    const own = timelineOf(await alice.sync({ since }), roomId).find((e) => e.event_id === eventId)!;
    expect(own.unsigned.transaction_id).toBe('my-txn');
    const other = timelineOf(await bob.sync(), roomId).find((e) => e.event_id === eventId)!;
    expect(other.unsigned).not.toHaveProperty('transaction_id');
    // Alice on a second device does not see it either.
    const secondDevice = client(hs, { ...alice.user, accessToken: await login(hs, 'alice', alice.user.password) });
    const seen = timelineOf(await secondDevice.sync(), roomId).find((e) => e.event_id === eventId)!;
    expect(seen.unsigned).not.toHaveProperty('transaction_id');
  });

  it('refuses non-members, bad content and events over 64 KiB', async () => {
    expectMatrixError(await carol.request('PUT', `/rooms/${enc(roomId)}/send/m.room.message/x`, text('hi')), 403, 'M_FORBIDDEN');
    expectMatrixError(await carol.request('PUT', `/rooms/${enc('!nope:test.local')}/send/m.room.message/x`, text('hi')), 403, 'M_FORBIDDEN');
    expectMatrixError(await alice.request('PUT', `/rooms/${enc(roomId)}/send/m.room.message/x`, [1, 2] as unknown as object), 400, 'M_BAD_JSON');
    expectMatrixError(await alice.request('PUT', `/rooms/${enc(roomId)}/send/m.room.message/big`, text('x'.repeat(70_000))), 413, 'M_TOO_LARGE');
    // Just under the limit is fine.
    await alice.send(roomId, text('x'.repeat(60_000)));
  });

  it('needs the power the room asks for a message type', async () => {
    const pl = await alice.ok('GET', `/rooms/${enc(roomId)}/state/m.room.power_levels`);
    await alice.setState(roomId, 'm.room.power_levels', '', { ...pl, events: { ...pl.events, 'org.example.alert': 50 } });
    expectMatrixError(await bob.request('PUT', `/rooms/${enc(roomId)}/send/org.example.alert/x`, {}), 403, 'M_FORBIDDEN');
    await alice.send(roomId, {}, 'org.example.alert');
  });
});

describe('state', () => {
  it('PUT/GET with an empty state key, with and without the trailing slash, and raw ids', async () => {
    const withSlash = await alice.ok('PUT', `/rooms/${enc(roomId)}/state/m.room.topic/`, { topic: 'one' });
    expect(await alice.ok('GET', `/rooms/${enc(roomId)}/state/m.room.topic`)).toEqual({ topic: 'one' });
    const noSlash = await alice.ok('PUT', `/rooms/${enc(roomId)}/state/m.room.topic`, { topic: 'two' });
    expect(noSlash.event_id).not.toBe(withSlash.event_id);
    const raw = await hs.http.get(`/_matrix/client/r0/rooms/${roomId}/state/m.room.topic/`).query({ access_token: bob.user.accessToken });
    expect(raw.body).toEqual({ topic: 'two' });
    // Checked raw: the spec's oneOf (content or event) cannot tell an event from content, which is an object too.
    const asEvent = (
      await hs.http.get(`/_matrix/client/v3/rooms/${enc(roomId)}/state/m.room.topic/`).query({ format: 'event' }).auth(alice.user.accessToken, { type: 'bearer' })
    ).body;
    expect(validateEvent(asEvent)).toEqual([]);
    expect(asEvent).toMatchObject({ type: 'm.room.topic', state_key: '', content: { topic: 'two' }, unsigned: { prev_content: { topic: 'one' } } });
    expectMatrixError(await alice.request('GET', `/rooms/${enc(roomId)}/state/m.room.avatar/`), 404, 'M_NOT_FOUND');
  });

  it('setting the same state again returns the same event', async () => {
    const first = await alice.setState(roomId, 'm.room.name', '', { name: 'Same' });
    expect(await alice.setState(roomId, 'm.room.name', '', { name: 'Same' })).toBe(first);
  });

  it('state needs state_default power; state keys naming users belong to them', async () => {
    expectMatrixError(await bob.request('PUT', `/rooms/${enc(roomId)}/state/m.room.topic/`, { topic: 'mine' }), 403, 'M_FORBIDDEN');
    expectMatrixError(await alice.request('PUT', `/rooms/${enc(roomId)}/state/org.example.x/${enc(bob.userId)}`, {}), 403, 'M_FORBIDDEN');
    expectMatrixError(await carol.request('GET', `/rooms/${enc(roomId)}/state`), 403, 'M_FORBIDDEN');
    expectMatrixError(await carol.request('GET', `/rooms/${enc(roomId)}/state/m.room.name/`), 403, 'M_FORBIDDEN');
  });

  it('GET /state lists the whole current state, valid per event schema', async () => {
    await alice.setState(roomId, 'm.room.name', '', { name: 'Room' });
    const state = (await bob.request('GET', `/rooms/${enc(roomId)}/state`)).body as unknown as any[];
    expect(state.map((e) => e.type)).toEqual(expect.arrayContaining(['m.room.create', 'm.room.power_levels', 'm.room.join_rules', 'm.room.name']));
    for (const event of state) expect(validateEvent(event)).toEqual([]);
  });
});

describe('redaction', () => {
  it('strips content, keeps the event, and tells why; redacting others needs power', async () => {
    const eventId = await bob.send(roomId, text('oops'));
    expectMatrixError(await carol.request('PUT', `/rooms/${enc(roomId)}/redact/${enc(eventId)}/r1`, {}), 403, 'M_FORBIDDEN');
    const mine = await alice.send(roomId, text('admin'));
    expectMatrixError(await bob.request('PUT', `/rooms/${enc(roomId)}/redact/${enc(mine)}/r1`, {}), 403, 'M_FORBIDDEN');
    const redaction = await bob.ok('PUT', `/rooms/${enc(roomId)}/redact/${enc(eventId)}/r2`, { reason: 'typo' });
    const again = await bob.ok('PUT', `/rooms/${enc(roomId)}/redact/${enc(eventId)}/r2`, { reason: 'typo' });
    expect(again.event_id).toBe(redaction.event_id);
    const event = await alice.ok('GET', `/rooms/${enc(roomId)}/event/${enc(eventId)}`);
    expect(event.content).toEqual({});
    expect(event.unsigned.redacted_because).toMatchObject({ event_id: redaction.event_id, type: 'm.room.redaction', redacts: eventId, content: { reason: 'typo' } });
    expect(event.unsigned.redacted_by).toBe(redaction.event_id);
    // The moderator (the room creator) can redact anyone's.
    await alice.ok('PUT', `/rooms/${enc(roomId)}/redact/${enc(await bob.send(roomId, text('spam')))}/r3`, {});
    expectMatrixError(await alice.request('PUT', `/rooms/${enc(roomId)}/redact/${enc('$missing')}/r4`, {}), 404, 'M_NOT_FOUND');
  });

  it('refuses a redaction of another room\u2019s event with 400, and that event stays whole', async () => {
    const other = await carol.createRoom({});
    const elsewhere = await carol.send(other, text('mine'));
    expectMatrixError(await alice.request('PUT', `/rooms/${enc(roomId)}/redact/${enc(elsewhere)}/x1`, {}), 400, 'M_INVALID_PARAM');
    expectMatrixError(await alice.request('POST', `/rooms/${enc(roomId)}/redact/${enc(elsewhere)}`, {}), 400, 'M_INVALID_PARAM');
    expect((await carol.ok('GET', `/rooms/${enc(other)}/event/${enc(elsewhere)}`)).content).toEqual(text('mine'));
  });

  it('redacting state keeps the keys the algorithm keeps', async () => {
    const pl = await alice.ok('GET', `/rooms/${enc(roomId)}/state/m.room.power_levels`);
    const plId = await alice.setState(roomId, 'm.room.power_levels', '', { ...pl, notifications: { room: 20 } });
    await alice.ok('PUT', `/rooms/${enc(roomId)}/redact/${enc(plId)}/r`, {});
    const now = await alice.ok('GET', `/rooms/${enc(roomId)}/state/m.room.power_levels`);
    expect(now).not.toHaveProperty('notifications');
    expect(now.users).toEqual(pl.users);
  });
});

describe('GET /event, /messages and /context', () => {
  it('pages backwards and forwards with tokens, limits and filters', async () => {
    const sent: string[] = [];
    for (let i = 0; i < 7; i++) sent.push(await alice.send(roomId, text(`m${i}`)));
    const back = await bob.ok('GET', `/rooms/${enc(roomId)}/messages`, undefined, { dir: 'b', limit: 3 });
    expect(back.chunk.map((e: any) => e.event_id)).toEqual([sent[6], sent[5], sent[4]]);
    const back2 = await bob.ok('GET', `/rooms/${enc(roomId)}/messages`, undefined, { dir: 'b', limit: 3, from: back.end });
    expect(back2.chunk.map((e: any) => e.event_id)).toEqual([sent[3], sent[2], sent[1]]);
    const forward = await bob.ok('GET', `/rooms/${enc(roomId)}/messages`, undefined, { dir: 'f', limit: 2, from: back2.end });
    expect(forward.chunk.map((e: any) => e.event_id)).toEqual([sent[1], sent[2]]);
    const onlyMessages = await bob.ok('GET', `/rooms/${enc(roomId)}/messages`, undefined, {
      dir: 'f',
      limit: 100,
      filter: JSON.stringify({ types: ['m.room.message'] }),
    });
    expect(onlyMessages.chunk.map((e: any) => e.event_id)).toEqual(sent);
    const notAlice = await bob.ok('GET', `/rooms/${enc(roomId)}/messages`, undefined, { dir: 'b', filter: JSON.stringify({ not_senders: [alice.userId] }) });
    expect(notAlice.chunk.every((e: any) => e.sender !== alice.userId)).toBe(true);
    // The oldest page has no end token.
    const all = await bob.ok('GET', `/rooms/${enc(roomId)}/messages`, undefined, { dir: 'b', limit: 100 });
    const past = await bob.ok('GET', `/rooms/${enc(roomId)}/messages`, undefined, { dir: 'b', limit: 100, from: all.end });
    expect(past.chunk).toEqual([]);
    expect(past).not.toHaveProperty('end');
    expectMatrixError(await bob.request('GET', `/rooms/${enc(roomId)}/messages`, undefined, { dir: 'x' }), 400, 'M_INVALID_PARAM');
    expectMatrixError(await bob.request('GET', `/rooms/${enc(roomId)}/messages`, undefined, { from: 'nonsense' }), 400, 'M_INVALID_PARAM');
    expectMatrixError(await carol.request('GET', `/rooms/${enc(roomId)}/messages`), 403, 'M_FORBIDDEN');
  });

  it('context gives the events around one', async () => {
    const sent: string[] = [];
    for (let i = 0; i < 5; i++) sent.push(await alice.send(roomId, text(`c${i}`)));
    const context = await bob.ok('GET', `/rooms/${enc(roomId)}/context/${enc(sent[2]!)}`, undefined, { limit: 4 });
    expect(context.event.event_id).toBe(sent[2]);
    expect(context.events_before.map((e: any) => e.event_id)).toEqual([sent[1], sent[0]]);
    expect(context.events_after.map((e: any) => e.event_id)).toEqual([sent[3], sent[4]]);
    expect(context.state.length).toBeGreaterThan(0);
    expectMatrixError(await bob.request('GET', `/rooms/${enc(roomId)}/context/${enc('$nope')}`), 404, 'M_NOT_FOUND');
  });

  it('history visibility: shared shows earlier events to a newcomer, joined does not, and a leaver sees nothing later', async () => {
    const before = await alice.send(roomId, text('before carol'));
    await carol.join(roomId);
    expect((await carol.ok('GET', `/rooms/${enc(roomId)}/event/${enc(before)}`)).event_id).toBe(before);
    await carol.ok('POST', `/rooms/${enc(roomId)}/leave`, {});
    const after = await alice.send(roomId, text('after carol left'));
    expectMatrixError(await carol.request('GET', `/rooms/${enc(roomId)}/event/${enc(after)}`), 404, 'M_NOT_FOUND');
    const carolsView = await carol.ok('GET', `/rooms/${enc(roomId)}/messages`, undefined, { dir: 'b', limit: 50 });
    expect(carolsView.chunk.map((e: any) => e.event_id)).not.toContain(after);

    const hidden = await alice.createRoom({ preset: 'public_chat', initial_state: [{ type: 'm.room.history_visibility', content: { history_visibility: 'joined' } }] });
    const secret = await alice.send(hidden, text('before you came'));
    await bob.join(hidden);
    expectMatrixError(await bob.request('GET', `/rooms/${enc(hidden)}/event/${enc(secret)}`), 404, 'M_NOT_FOUND');
    const initial = await bob.sync();
    expect(timelineOf(initial, hidden).map((e) => e.event_id)).not.toContain(secret);
  });
});

describe('rate limits', () => {
  it('rc_message limits sends with 429, retry_after_ms and Retry-After; an override lifts it', async () => {
    await hs.close();
    hs = await startTestHomeserver({ ratelimiting_enabled: true, rc_message: { per_second: 0.1, burst_count: 2 }, rc_login: { address: { per_second: 100, burst_count: 100 }, account: { per_second: 100, burst_count: 100 } } });
    alice = client(hs, await createUser(hs, 'alice'));
    bob = client(hs, await createUser(hs, 'bob'));
    roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    const first = await bob.send(roomId, text('one'), 'm.room.message', 'first');
    await bob.send(roomId);
    const limited = await bob.request('PUT', `/rooms/${enc(roomId)}/send/m.room.message/over`, text('too many'));
    expectMatrixError(limited, 429, 'M_LIMIT_EXCEEDED');
    expect(limited.body.retry_after_ms).toBeGreaterThan(0);
    expect(Number(limited.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    // A retry of a send that got through is answered from the record, not limited again.
    expect(await bob.send(roomId, text('one'), 'm.room.message', 'first')).toBe(first);
    const admin = await createUser(hs, 'admin', { admin: true });
    const override = await hs.http
      .post(`/_synapse/admin/v1/users/${enc(bob.userId)}/override_ratelimit`)
      .auth(admin.accessToken, { type: 'bearer' })
      .send({ messages_per_second: 0 });
    expect(override.status).toBe(200);
    await bob.send(roomId, text('unlimited now'));
  });
});
