/** m.ignored_user_list: an ignored user's messages and invites are hidden from sync and history. */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { client, type TestClient } from '../support/client.js';
import { createUser, startTestHomeserver, type TestHomeserver } from '../support/homeserver.js';

let hs: TestHomeserver;
let alice: TestClient;
let spammer: TestClient;
let carol: TestClient;
beforeEach(async () => {
  hs = await startTestHomeserver();
  alice = client(hs, await createUser(hs, 'alice'));
  spammer = client(hs, await createUser(hs, 'spammer'));
  carol = client(hs, await createUser(hs, 'carol'));
});
afterEach(() => hs.close());

const ignore = (who: TestClient, ...users: string[]) =>
  who.ok('PUT', `/user/${encodeURIComponent(who.userId)}/account_data/m.ignored_user_list`, { ignored_users: Object.fromEntries(users.map((u) => [u, {}])) });
const bodies = (events: Array<{ type: string; content: { body?: string } }>) => events.filter((e) => e.type === 'm.room.message').map((e) => e.content.body);

describe('ignoring users', () => {
  it('hides their messages from sync, /messages and /context, but not their state events', async () => {
    const room = await carol.createRoom({ preset: 'public_chat' });
    await alice.join(room);
    await spammer.join(room);
    await ignore(alice, spammer.userId);
    const since = (await alice.sync()).next_batch as string;
    await spammer.send(room, { msgtype: 'm.text', body: 'buy now' });
    const fromCarol = await carol.send(room, { msgtype: 'm.text', body: 'hello' });
    await spammer.ok('PUT', `/profile/${encodeURIComponent(spammer.userId)}/displayname`, { displayname: 'Spam King' });

    const sync = await alice.sync({ since });
    const timeline = sync.rooms.join[room].timeline.events;
    expect(bodies(timeline)).toEqual(['hello']);
    // Their state events stay: the room's membership must make sense.
    expect(timeline.some((e: { type: string; sender: string; content: { displayname?: string } }) => e.type === 'm.room.member' && e.sender === spammer.userId && e.content.displayname === 'Spam King')).toBe(true);

    const messages = await alice.ok('GET', `/rooms/${encodeURIComponent(room)}/messages`, undefined, { dir: 'b', limit: 50 });
    expect(bodies(messages.chunk)).toEqual(['hello']);
    const context = await alice.ok('GET', `/rooms/${encodeURIComponent(room)}/context/${encodeURIComponent(fromCarol)}`, undefined, { limit: 10 });
    expect(bodies([...context.events_before, ...context.events_after])).toEqual([]);

    // Unignored: seen again.
    await ignore(alice);
    expect(bodies((await alice.ok('GET', `/rooms/${encodeURIComponent(room)}/messages`, undefined, { dir: 'b', limit: 50 })).chunk)).toEqual(['hello', 'buy now']);
    // Others never stopped seeing them.
    expect(bodies((await carol.ok('GET', `/rooms/${encodeURIComponent(room)}/messages`, undefined, { dir: 'b', limit: 50 })).chunk)).toEqual(['hello', 'buy now']);
  });

  it('hides their invites', async () => {
    await ignore(alice, spammer.userId);
    const since = (await alice.sync()).next_batch as string;
    const fromSpammer = await spammer.createRoom({ invite: [alice.userId] });
    const fromCarol = await carol.createRoom({ invite: [alice.userId] });
    const sync = await alice.sync({ since });
    expect(Object.keys(sync.rooms.invite)).toEqual([fromCarol]);
    expect(Object.keys((await alice.sync()).rooms.invite)).toEqual([fromCarol]);
    expect(fromSpammer).toEqual(expect.any(String));
  });
});
