/**
 * Room creation is not free: it counts against rc_message with the events it writes, its
 * initial state and invites are capped, and the rooms held in memory are bounded, so one account
 * creating rooms cannot grow the server's memory for good. (One made 150 rooms of 1,000 state
 * events each in 6 s and took the server from 237 to 544 MB.)
 */
import { afterEach, describe, expect, it } from 'vitest';
import { MAX_CREATE_ROOM_INVITES, MAX_INITIAL_STATE } from '../../src/rooms/room-service.js';
import { clientsFor, timelineOf } from '../support/client.js';
import { startTestHomeserver, type TestHomeserver } from '../support/homeserver.js';
import { expectMatrixError } from '../support/spec-validator.js';

let hs: TestHomeserver;
afterEach(() => hs.close());

const enc = encodeURIComponent;
const state = (count: number, size = 10) =>
  Array.from({ length: count }, (_, i) => ({ type: 'org.example.setting', state_key: `k${i}`, content: { value: 'x'.repeat(size) } }));

describe('createRoom', () => {
  it('counts against rc_message, with one action per initial state event and invite', async () => {
    hs = await startTestHomeserver({ ratelimiting_enabled: true, rc_message: { per_second: 0.001, burst_count: 10 } });
    const [alice, bob] = await clientsFor(hs, 'alice', 'bob');
    // 1 + 4 initial state events + 1 invite = 6 of the burst of 10.
    await alice.createRoom({ initial_state: state(4), invite: [bob.userId] });
    const second = await alice.request('POST', '/createRoom', { initial_state: state(4) });
    expectMatrixError(second, 429, 'M_LIMIT_EXCEEDED');
    expect(second.body.retry_after_ms).toBeGreaterThan(0);
    // The same bucket as messages: 4 left, and a plain room costs 1.
    const roomId = await alice.createRoom();
    for (let i = 0; i < 3; i++) await alice.send(roomId);
    expectMatrixError(await alice.request('PUT', `/rooms/${enc(roomId)}/send/m.room.message/over`, { msgtype: 'm.text', body: 'x' }), 429, 'M_LIMIT_EXCEEDED');
    // Others have buckets of their own.
    await bob.createRoom();
  });

  it(`refuses more than ${MAX_INITIAL_STATE} initial state events or ${MAX_CREATE_ROOM_INVITES} invites`, async () => {
    hs = await startTestHomeserver();
    const [alice] = await clientsFor(hs, 'alice');
    const tooMuchState = await alice.request('POST', '/createRoom', { initial_state: state(MAX_INITIAL_STATE + 1) });
    expectMatrixError(tooMuchState, 400, 'M_BAD_JSON');
    expect(tooMuchState.body.error).toContain('initial_state');
    const invites = Array.from({ length: MAX_CREATE_ROOM_INVITES + 1 }, (_, i) => `@user${i}:test.local`);
    expectMatrixError(await alice.request('POST', '/createRoom', { invite: invites }), 400, 'M_BAD_JSON');
    await alice.createRoom({ initial_state: state(MAX_INITIAL_STATE) });
    expect((await alice.ok('GET', '/joined_rooms')).joined_rooms).toHaveLength(1);
  });
});

describe('rooms held in memory', () => {
  it('stay within caches.room_state_events however many are made, and every room still works', async () => {
    hs = await startTestHomeserver({ caches: { room_state_events: 1000, user_room_lists: 100 } });
    const [alice, bob] = await clientsFor(hs, 'alice', 'bob');
    const rooms: string[] = [];
    for (let i = 0; i < 40; i++) {
      rooms.push(await alice.createRoom({ preset: 'public_chat', name: `Room ${i}`, initial_state: state(30, 200) }));
      // One room alone may be over the bound while it is used; never more than that.
      expect(hs.services.roomCache.held.weight).toBeLessThanOrEqual(1000 + 40);
    }
    expect(hs.services.roomCache.held.rooms).toBeLessThan(40);

    // Rooms dropped from memory are read back when used: joining, sending, state, sync.
    const first = rooms[0]!;
    await bob.join(first);
    await alice.send(first, { msgtype: 'm.text', body: 'still here' });
    expect((await bob.ok('GET', `/rooms/${enc(first)}/state/m.room.name/`)).name).toBe('Room 0');
    expect((await bob.ok('GET', `/rooms/${enc(first)}/state/org.example.setting/k29`)).value).toHaveLength(200);
    const sync = await bob.sync();
    expect(timelineOf(sync, first).map((e) => e.content.body)).toContain('still here');
    const aliceSync = await alice.sync();
    expect(Object.keys(aliceSync.rooms.join)).toHaveLength(40);
    expect(hs.services.roomCache.held.weight).toBeLessThanOrEqual(1000 + 40);

    // Many writes at once to rooms that keep dropping out of memory all land.
    await Promise.all(rooms.map((roomId, i) => alice.send(roomId, { msgtype: 'm.text', body: `burst ${i}` })));
    const since = aliceSync.next_batch as string;
    const after = await alice.sync({ since });
    for (const [i, roomId] of rooms.entries()) expect(timelineOf(after, roomId).map((e) => e.content.body)).toContain(`burst ${i}`);
  });
});
