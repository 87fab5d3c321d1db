/** GET /_matrix/client/v1/rooms/{roomId}/timestamp_to_event: the event nearest a time, as the user may see it. */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { client, type TestClient } from '../support/client.js';
import { createUser, startTestHomeserver, type TestHomeserver } from '../support/homeserver.js';
import { expectMatchesSpec, expectMatrixError } from '../support/spec-validator.js';

let hs: TestHomeserver;
let alice: TestClient;
beforeEach(async () => {
  hs = await startTestHomeserver();
  alice = client(hs, await createUser(hs, 'alice'));
});
afterEach(() => hs.close());

const find = (who: TestClient, roomId: string, ts: number, dir: 'b' | 'f') =>
  hs.http.get(`/_matrix/client/v1/rooms/${encodeURIComponent(roomId)}/timestamp_to_event`).query({ ts, dir }).auth(who.user.accessToken, { type: 'bearer' });

describe('timestamp_to_event', () => {
  it('finds the nearest event after or before a time', async () => {
    const room = await alice.createRoom({ preset: 'public_chat' });
    hs.clock.advance(60_000);
    const t1 = hs.clock.now();
    const first = await alice.send(room, { msgtype: 'm.text', body: 'one' });
    hs.clock.advance(60_000);
    const second = await alice.send(room, { msgtype: 'm.text', body: 'two' });

    const after = await find(alice, room, t1 + 1, 'f');
    expectMatchesSpec('GET', `/_matrix/client/v1/rooms/${encodeURIComponent(room)}/timestamp_to_event`, after);
    expect(after.body).toEqual({ event_id: second, origin_server_ts: t1 + 60_000 });
    expect((await find(alice, room, t1 + 59_999, 'b')).body.event_id).toBe(first);
    expect((await find(alice, room, t1, 'f')).body.event_id).toBe(first);
    expectMatrixError(await find(alice, room, t1 + 120_000, 'f'), 404, 'M_NOT_FOUND');
    expectMatrixError(await hs.http.get(`/_matrix/client/v1/rooms/${encodeURIComponent(room)}/timestamp_to_event`).query({ ts: 1, dir: 'x' }).auth(alice.user.accessToken, { type: 'bearer' }), 400, 'M_INVALID_PARAM');
  });

  it('never points at what the user may not see', async () => {
    const room = await alice.createRoom({ preset: 'public_chat', initial_state: [{ type: 'm.room.history_visibility', state_key: '', content: { history_visibility: 'joined' } }] });
    hs.clock.advance(1_000);
    const sentAt = hs.clock.now();
    await alice.send(room, { msgtype: 'm.text', body: 'before bob' });
    hs.clock.advance(1_000);
    const bob = client(hs, await createUser(hs, 'bob'));
    await bob.join(room);
    const found = await find(bob, room, sentAt, 'f');
    expect(found.status).toBe(200);
    // The first event bob may see from then is his own join, not alice's message from before it.
    const event = await bob.ok('GET', `/rooms/${encodeURIComponent(room)}/event/${encodeURIComponent(found.body.event_id)}`);
    expect(event).toMatchObject({ type: 'm.room.member', state_key: bob.userId });
    const outsider = client(hs, await createUser(hs, 'outsider'));
    expect((await find(outsider, room, 0, 'f')).status).toBe(403);
  });
});
