/** The room directory for clients: /publicRooms (GET, POST with a search) and /directory/list/room. */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { client, type TestClient } from '../support/client.js';
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

describe('the room directory', () => {
  it('lists published rooms, pages through them, and searches names, topics and aliases', async () => {
    const rooms: string[] = [];
    for (let i = 0; i < 5; i++) rooms.push(await alice.createRoom({ visibility: 'public', preset: 'public_chat', name: `Room ${i}`, ...(i === 3 ? { topic: 'Deploy alerts' } : {}) }));
    await alice.createRoom({ name: 'Secret' });

    const all = await alice.ok('GET', '/publicRooms');
    expect(all.chunk.map((r: { room_id: string }) => r.room_id).sort()).toEqual([...rooms].sort());
    expect(all.total_room_count_estimate).toBe(5);
    expect(all.chunk[0]).toMatchObject({ num_joined_members: 1, world_readable: false, guest_can_join: false, join_rule: 'public' });

    const seen: string[] = [];
    let since: string | undefined;
    for (let page = 0; page < 5; page++) {
      const answer = await alice.ok('GET', '/publicRooms', undefined, { limit: 2, ...(since ? { since } : {}) });
      seen.push(...answer.chunk.map((r: { room_id: string }) => r.room_id));
      since = answer.next_batch;
      if (!since) break;
    }
    expect(seen.sort()).toEqual([...rooms].sort());

    const found = await alice.ok('POST', '/publicRooms', { filter: { generic_search_term: 'deploy' } });
    expect(found.chunk.map((r: { room_id: string }) => r.room_id)).toEqual([rooms[3]]);
    expect((await alice.ok('POST', '/publicRooms', { filter: { generic_search_term: 'room 1' }, limit: 10 })).chunk.map((r: { name: string }) => r.name)).toEqual(['Room 1']);
    expect((await hs.http.get('/_matrix/client/v3/publicRooms')).status).toBe(401);
  });

  it('publishes and unpublishes a room for members with the power to, and says which it is', async () => {
    const room = await alice.createRoom({ preset: 'public_chat' });
    expect((await hs.http.get(`/_matrix/client/v3/directory/list/room/${encodeURIComponent(room)}`)).body).toEqual({ visibility: 'private' });
    await bob.join(room);
    const refused = await bob.request('PUT', `/directory/list/room/${encodeURIComponent(room)}`, { visibility: 'public' });
    expect(refused.status).toBe(403);
    await alice.ok('PUT', `/directory/list/room/${encodeURIComponent(room)}`, { visibility: 'public' });
    expect((await alice.ok('GET', `/directory/list/room/${encodeURIComponent(room)}`)).visibility).toBe('public');
    expect((await bob.ok('GET', '/publicRooms')).chunk.map((r: { room_id: string }) => r.room_id)).toEqual([room]);
    await alice.ok('PUT', `/directory/list/room/${encodeURIComponent(room)}`, { visibility: 'private' });
    expect((await bob.ok('GET', '/publicRooms')).chunk).toEqual([]);
    expect((await alice.request('GET', '/directory/list/room/!nope:test.local')).status).toBe(404);
  });

  it('pages forwards with next_batch and back with prev_batch, each room once', async () => {
    const rooms: string[] = [];
    for (let i = 0; i < 7; i++) rooms.push(await alice.createRoom({ visibility: 'public', preset: 'public_chat', name: `Page ${i}` }));
    const forwards: string[] = [];
    let next: string | undefined;
    let prev: string | undefined;
    for (let i = 0; i < 10; i++) {
      const page = await alice.ok('POST', '/publicRooms', { limit: 3, ...(next ? { since: next } : {}) });
      forwards.push(...page.chunk.map((r: { room_id: string }) => r.room_id));
      next = page.next_batch;
      prev = page.prev_batch;
      if (!next) break;
    }
    expect(forwards).toEqual([...rooms].sort());
    // Back from the last page: every room before it, once each, in order.
    const backwards: string[][] = [];
    for (let i = 0; i < 10 && prev; i++) {
      const page = await alice.ok('POST', '/publicRooms', { limit: 3, since: prev });
      backwards.push(page.chunk.map((r: { room_id: string }) => r.room_id));
      expect(page.next_batch).toBeDefined();
      prev = page.prev_batch;
    }
    expect(backwards.reverse().flat()).toEqual([...rooms].sort().slice(0, 6));
  });

  it('takes null for since, limit and filter in POST /publicRooms (the first page)', async () => {
    const room = await alice.createRoom({ visibility: 'public', preset: 'public_chat', name: 'Nulls' });
    const page = await alice.ok('POST', '/publicRooms', { since: null, limit: null, filter: null });
    expect(page.chunk.map((r: { room_id: string }) => r.room_id)).toEqual([room]);
    expect((await alice.ok('POST', '/publicRooms', { since: null, filter: { generic_search_term: null } })).chunk).toHaveLength(1);
    expect((await alice.request('POST', '/publicRooms', { since: 12 })).status).toBe(400);
  });
});

describe('allow_public_rooms_without_auth', () => {
  it('lets anyone without a token read this server\u2019s list, not another server\u2019s; a bad token is still refused', async () => {
    await hs.close();
    hs = await startTestHomeserver({ allow_public_rooms_without_auth: true });
    alice = client(hs, await createUser(hs, 'alice'));
    const room = await alice.createRoom({ visibility: 'public', preset: 'public_chat', name: 'Open' });
    const anonymous = await hs.http.get('/_matrix/client/v3/publicRooms');
    expect(anonymous.status).toBe(200);
    expect(anonymous.body.chunk.map((r: { room_id: string }) => r.room_id)).toEqual([room]);
    expect((await hs.http.get(`/_matrix/client/r0/publicRooms?server=${hs.config.server_name}`)).status).toBe(200);
    expect((await hs.http.get('/_matrix/client/v3/publicRooms?server=other.example')).status).toBe(401);
    expect((await hs.http.get('/_matrix/client/v3/publicRooms').set('Authorization', 'Bearer nonsense')).status).toBe(401);
    // The search (POST) still needs a token, as in Synapse.
    expect((await hs.http.post('/_matrix/client/v3/publicRooms').send({})).status).toBe(401);
  });
});
