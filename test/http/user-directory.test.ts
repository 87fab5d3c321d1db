/** POST /user_directory/search: who shares a room with the searcher, or is in a published room. */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { client, type TestClient } from '../support/client.js';
import { createUser, startTestHomeserver, type TestHomeserver } from '../support/homeserver.js';

let hs: TestHomeserver;
let alice: TestClient;
beforeEach(async () => {
  hs = await startTestHomeserver();
  alice = client(hs, await createUser(hs, 'alice'));
});
afterEach(() => hs.close());

describe('the user directory', () => {
  it('finds users sharing a room or in a published room, by id or display name, and no one else', async () => {
    const shared = client(hs, await createUser(hs, 'deploybot'));
    await shared.ok('PUT', `/profile/${encodeURIComponent(shared.userId)}/displayname`, { displayname: 'Deploy Bot' });
    const room = await alice.createRoom({ preset: 'private_chat', invite: [shared.userId] });
    await shared.join(room);
    const lobbyist = client(hs, await createUser(hs, 'lobbyist'));
    await lobbyist.createRoom({ visibility: 'public', preset: 'public_chat', name: 'Lobby' });
    await createUser(hs, 'hermit'); // in no room: not findable

    const byName = await alice.ok('POST', '/user_directory/search', { search_term: 'deploy' });
    expect(byName).toEqual({ limited: false, results: [{ user_id: shared.userId, display_name: 'Deploy Bot' }] });
    expect((await alice.ok('POST', '/user_directory/search', { search_term: 'lobby' })).results.map((r: { user_id: string }) => r.user_id)).toEqual([lobbyist.userId]);
    expect((await alice.ok('POST', '/user_directory/search', { search_term: 'hermit' })).results).toEqual([]);

    const limited = await alice.ok('POST', '/user_directory/search', { search_term: '', limit: 1 });
    expect(limited.limited).toBe(true);
    expect(limited.results).toHaveLength(1);
  });

  it('takes a room\u2019s members in and out as its join rule or history visibility makes it public or private (as Synapse)', async () => {
    const bob = client(hs, await createUser(hs, 'bob'));
    await bob.ok('PUT', `/profile/${encodeURIComponent(bob.userId)}/displayname`, { displayname: 'Bobby Tables' });
    const room = await alice.createRoom({ preset: 'private_chat', invite: [bob.userId] });
    await bob.join(room);
    const finds = async (searcher: TestClient, who: string): Promise<boolean> =>
      ((await searcher.ok('POST', '/user_directory/search', { search_term: 'bobby' })).results as Array<{ user_id: string }>).some((r) => r.user_id === who);
    // A private room: bob is found by those sharing it, not by himself.
    expect(await finds(alice, bob.userId)).toBe(true);
    expect(await finds(bob, bob.userId)).toBe(false);
    await alice.setState(room, 'm.room.join_rules', '', { join_rule: 'public' });
    expect(await finds(bob, bob.userId)).toBe(true);
    await alice.setState(room, 'm.room.join_rules', '', { join_rule: 'invite' });
    expect(await finds(bob, bob.userId)).toBe(false);
    await alice.setState(room, 'm.room.history_visibility', '', { history_visibility: 'world_readable' });
    expect(await finds(bob, bob.userId)).toBe(true);
    // World-readable keeps the room public whatever the join rule.
    await alice.setState(room, 'm.room.join_rules', '', { join_rule: 'public' });
    await alice.setState(room, 'm.room.join_rules', '', { join_rule: 'invite' });
    expect(await finds(bob, bob.userId)).toBe(true);
    await alice.setState(room, 'm.room.history_visibility', '', { history_visibility: 'shared' });
    expect(await finds(bob, bob.userId)).toBe(false);
    expect(await finds(alice, bob.userId)).toBe(true);
  });
});
