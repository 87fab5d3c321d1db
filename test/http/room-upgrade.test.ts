/** POST /rooms/{roomId}/upgrade: the new room, the copied state, the tombstone, the moved aliases. */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { client, type Json, type TestClient } from '../support/client.js';
import { createUser, startTestHomeserver, type TestHomeserver } from '../support/homeserver.js';

let hs: TestHomeserver;
let alice: TestClient;
let bob: TestClient;
beforeEach(async () => {
  hs = await startTestHomeserver();
  alice = client(hs, await createUser(hs, 'alice'));
  bob = client(hs, await createUser(hs, 'bob'));
});
afterEach(() => hs.close());

const enc = encodeURIComponent;
const state = (who: TestClient, roomId: string, type: string) => who.ok('GET', `/rooms/${enc(roomId)}/state/${type}/`);

describe('room upgrades', () => {
  for (const newVersion of ['11', '12']) {
    it(`upgrades a room to version ${newVersion}: state copied, predecessor and tombstone, aliases moved, the old room closed`, async () => {
      const oldRoom = await alice.createRoom({ room_version: '10', preset: 'public_chat', name: 'Ops', topic: 'Alerts here', room_alias_name: 'ops' });
      await bob.join(oldRoom);
      const answer = await alice.ok('POST', `/rooms/${enc(oldRoom)}/upgrade`, { new_version: newVersion });
      const newRoom = answer.replacement_room as string;
      expect(newRoom).toMatch(/^!/);

      const create = await state(alice, newRoom, 'm.room.create');
      expect(create).toMatchObject({ room_version: newVersion, predecessor: { room_id: oldRoom } });
      expect(await state(alice, newRoom, 'm.room.name')).toEqual({ name: 'Ops' });
      expect(await state(alice, newRoom, 'm.room.topic')).toMatchObject({ topic: 'Alerts here' });
      expect((await state(alice, newRoom, 'm.room.join_rules')).join_rule).toBe('public');
      expect(await state(alice, oldRoom, 'm.room.tombstone')).toEqual({ body: 'This room has been replaced', replacement_room: newRoom });
      // Ordinary members can no longer talk in the old room.
      const refused = await bob.request('PUT', `/rooms/${enc(oldRoom)}/send/m.room.message/late`, { msgtype: 'm.text', body: 'late' });
      expect(refused.status).toBe(403);
      // The alias leads to the new room, which names it.
      expect((await alice.ok('GET', `/directory/room/${enc('#ops:test.local')}`)).room_id).toBe(newRoom);
      expect((await state(alice, newRoom, 'm.room.canonical_alias')).alias).toBe('#ops:test.local');
      // bob follows the tombstone and joins.
      await bob.join(newRoom);
      await bob.send(newRoom, { msgtype: 'm.text', body: 'here now' });
    });
  }

  it('refuses unknown versions, members without the power, and a room already replaced', async () => {
    const room = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(room);
    const unknown = await alice.request('POST', `/rooms/${enc(room)}/upgrade`, { new_version: '99' });
    expect([unknown.status, unknown.body.errcode]).toEqual([400, 'M_UNSUPPORTED_ROOM_VERSION']);
    const weak = await bob.request('POST', `/rooms/${enc(room)}/upgrade`, { new_version: '11' });
    expect([weak.status, weak.body.errcode]).toEqual([403, 'M_FORBIDDEN']);
    await alice.ok('POST', `/rooms/${enc(room)}/upgrade`, { new_version: '11' });
    const again = await alice.request('POST', `/rooms/${enc(room)}/upgrade`, { new_version: '11' });
    expect(again.status).toBe(403);
    expect((await alice.sync()).rooms.join[room]).toBeDefined();
    const events: Json[] = (await alice.sync()).rooms.join[room].timeline.events;
    expect(events.some((e) => e.type === 'm.room.tombstone')).toBe(true);
  });
});
