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

  for (const newVersion of ['2', '11']) {
    it(`names the old room\u2019s tombstone in the predecessor (to version ${newVersion}) and moves the directory listing`, async () => {
      const oldRoom = await alice.createRoom({ preset: 'public_chat', visibility: 'public' });
      const newRoom = (await alice.ok('POST', `/rooms/${enc(oldRoom)}/upgrade`, { new_version: newVersion })).replacement_room as string;
      const events: Json[] = (await alice.ok('GET', `/rooms/${enc(oldRoom)}/messages`, undefined, { dir: 'b', limit: 10 })).chunk;
      const tombstone = events.find((e) => e.type === 'm.room.tombstone')!;
      expect(tombstone.content.replacement_room).toBe(newRoom);
      expect(await state(alice, newRoom, 'm.room.create')).toMatchObject({ room_version: newVersion, predecessor: { room_id: oldRoom, event_id: tombstone.event_id } });
      // The copied state (public join rule) overrides the private_chat preset, which still brings guest access, as in Synapse.
      expect((await state(alice, newRoom, 'm.room.join_rules')).join_rule).toBe('public');
      expect(await state(alice, newRoom, 'm.room.guest_access')).toEqual({ guest_access: 'can_join' });
      expect((await alice.ok('GET', `/directory/list/room/${enc(newRoom)}`)).visibility).toBe('public');
      expect((await alice.ok('GET', `/directory/list/room/${enc(oldRoom)}`)).visibility).toBe('private');
    });
  }

  it('answers 404 M_NOT_FOUND for a room this server does not know, 403 for one the user is not in', async () => {
    const bogus = await alice.request('POST', `/rooms/${enc('!fail:unknown')}/upgrade`, { new_version: '11' });
    expect([bogus.status, bogus.body.errcode]).toEqual([404, 'M_NOT_FOUND']);
    const room = await bob.createRoom({ preset: 'private_chat' });
    const outsider = await alice.request('POST', `/rooms/${enc(room)}/upgrade`, { new_version: '11' });
    expect([outsider.status, outsider.body.errcode]).toEqual([403, 'M_FORBIDDEN']);
  });

  it('copies a member\u2019s push rules for the old room when they join the new one', async () => {
    const oldRoom = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(oldRoom);
    await bob.ok('PUT', `/pushrules/global/room/${enc(oldRoom)}`, { actions: ['notify'] });
    await bob.ok('PUT', '/pushrules/global/override/about-old', {
      actions: ['dont_notify'],
      conditions: [{ kind: 'event_match', key: 'room_id', pattern: oldRoom }],
    });
    const newRoom = (await alice.ok('POST', `/rooms/${enc(oldRoom)}/upgrade`, { new_version: '11' })).replacement_room as string;
    await bob.join(newRoom);
    const rules = (await bob.ok('GET', '/pushrules/')).global;
    expect(rules.room.map((r: Json) => r.rule_id)).toEqual(expect.arrayContaining([oldRoom, newRoom]));
    expect(rules.room.find((r: Json) => r.rule_id === newRoom).actions).toEqual(['notify']);
    const overrides = rules.override.filter((r: Json) => r.rule_id === 'about-old');
    // The override's id does not name the room: a copy would take its id, so it stays as it was.
    expect(overrides).toHaveLength(1);
    // Joining again copies nothing more.
    await bob.join(newRoom);
    expect((await bob.ok('GET', '/pushrules/')).global.room.filter((r: Json) => r.rule_id === newRoom)).toHaveLength(1);
  });

  it('copies the old room\u2019s bans, and carries tags and m.direct over for the upgrader and for those who join', async () => {
    const oldRoom = await alice.createRoom({ preset: 'private_chat', invite: [bob.userId] });
    await bob.join(oldRoom);
    await alice.ok('POST', `/rooms/${enc(oldRoom)}/ban`, { user_id: '@mallory:elsewhere.example' });
    await alice.ok('PUT', `/user/${enc(alice.userId)}/account_data/m.direct`, { [bob.userId]: [oldRoom] });
    await bob.ok('PUT', `/user/${enc(bob.userId)}/rooms/${enc(oldRoom)}/tags/u.work`, { order: 0.5 });
    const newRoom = (await alice.ok('POST', `/rooms/${enc(oldRoom)}/upgrade`, { new_version: '11' })).replacement_room as string;
    expect((await alice.ok('GET', `/rooms/${enc(newRoom)}/state/m.room.member/${enc('@mallory:elsewhere.example')}`)).membership).toBe('ban');
    expect((await alice.ok('GET', `/user/${enc(alice.userId)}/account_data/m.direct`))[bob.userId]).toEqual([oldRoom, newRoom]);
    await alice.invite(newRoom, bob.userId);
    await bob.join(newRoom);
    expect((await bob.ok('GET', `/user/${enc(bob.userId)}/rooms/${enc(newRoom)}/tags`)).tags).toEqual({ 'u.work': { order: 0.5 } });
  });
});
