/** Presence: online while syncing, offline after, m.presence in sync for roommates, presence.enabled. */
import { afterEach, describe, expect, it } from 'vitest';
import { client, type Json, type TestClient } from '../support/client.js';
import { createUser, startTestHomeserver, type TestHomeserver } from '../support/homeserver.js';
import { IDLE_AFTER_MS } from '../../src/sync/presence.js';

let hs: TestHomeserver;
afterEach(() => hs?.close());

const presenceOf = (sync: Json, userId: string) => (sync.presence.events as Json[]).filter((e) => e.sender === userId).map((e) => e.content);

describe('presence', () => {
  it('is online while a client syncs, offline a minute after, and roommates see both in their sync', async () => {
    hs = await startTestHomeserver();
    const alice: TestClient = client(hs, await createUser(hs, 'alice'));
    const bob: TestClient = client(hs, await createUser(hs, 'bob'));
    const outsider: TestClient = client(hs, await createUser(hs, 'outsider'));
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    const bobSince = (await bob.sync()).next_batch as string;
    const outsiderSince = (await outsider.sync()).next_batch as string;

    await alice.sync();
    const online = await bob.sync({ since: bobSince });
    expect(presenceOf(online, alice.userId)).toEqual([expect.objectContaining({ presence: 'online', currently_active: true })]);
    expect(presenceOf(await outsider.sync({ since: outsiderSince }), alice.userId)).toEqual([]);

    // set_presence=offline: the client does not want to be shown online; nothing changes.
    await alice.sync({ set_presence: 'offline' });
    expect(presenceOf(await bob.sync({ since: online.next_batch }), alice.userId)).toEqual([]);

    hs.clock.advance(IDLE_AFTER_MS + 1);
    await hs.services.presence.sweepIdle();
    const offline = await bob.sync({ since: online.next_batch });
    expect(presenceOf(offline, alice.userId)).toEqual([expect.objectContaining({ presence: 'offline' })]);
  });

  it('wakes a roommate’s parked sync when it changes', async () => {
    hs = await startTestHomeserver();
    const alice: TestClient = client(hs, await createUser(hs, 'alice'));
    const bob: TestClient = client(hs, await createUser(hs, 'bob'));
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    await alice.sync();
    // (set_presence=offline: bob coming online would answer his next sync at once, with the news.)
    const since = (await bob.sync({ set_presence: 'offline' })).next_batch as string;
    const parked = bob.sync({ since, timeout: 10_000, set_presence: 'offline' });
    while (hs.services.notifier.parkedCount() === 0) await new Promise((r) => setTimeout(r, 5));
    await alice.ok('PUT', `/presence/${encodeURIComponent(alice.userId)}/status`, { presence: 'unavailable', status_msg: 'lunch' });
    expect(presenceOf(await parked, alice.userId)).toEqual([expect.objectContaining({ presence: 'unavailable', status_msg: 'lunch' })]);
  });

  it('shows the user their own presence once, in the sync after they came online (as Synapse)', async () => {
    hs = await startTestHomeserver();
    const alice: TestClient = client(hs, await createUser(hs, 'alice'));
    const first = await alice.sync({ set_presence: 'offline' });
    await alice.sync(); // comes online
    const own = await alice.sync({ since: first.next_batch as string, set_presence: 'offline' });
    expect(presenceOf(own, alice.userId)).toEqual([expect.objectContaining({ presence: 'online' })]);
    const again = await alice.sync({ since: own.next_batch as string, set_presence: 'offline' });
    expect(presenceOf(again, alice.userId)).toEqual([]);
    expect(presenceOf(await alice.sync(), alice.userId)).toEqual([expect.objectContaining({ presence: 'online' })]);
  });

  it('gives the presence of a newly joined room’s members, and of newly joined members, once', async () => {
    hs = await startTestHomeserver();
    const alice: TestClient = client(hs, await createUser(hs, 'alice'));
    const bob: TestClient = client(hs, await createUser(hs, 'bob'));
    const carol: TestClient = client(hs, await createUser(hs, 'carol'));
    await alice.sync(); // alice online, long before bob joins
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    const bobSince = (await bob.sync({ set_presence: 'offline' })).next_batch as string;
    const aliceSince = (await alice.sync({ set_presence: 'offline' })).next_batch as string;
    await bob.join(roomId);
    await carol.join(roomId); // carol never synced: offline

    const bobSync = await bob.sync({ since: bobSince, set_presence: 'offline' });
    expect(presenceOf(bobSync, alice.userId)).toEqual([expect.objectContaining({ presence: 'online' })]);
    expect(presenceOf(bobSync, carol.userId)).toEqual([{ presence: 'offline', currently_active: false }]);
    const bobAgain = await bob.sync({ since: bobSync.next_batch as string, set_presence: 'offline' });
    expect(bobAgain.presence.events).toEqual([]);

    const aliceSync = await alice.sync({ since: aliceSince, set_presence: 'offline' });
    expect(presenceOf(aliceSync, bob.userId)).toEqual([expect.objectContaining({ presence: 'offline' })]);
    expect(presenceOf(aliceSync, carol.userId)).toEqual([expect.objectContaining({ presence: 'offline' })]);
    const aliceAgain = await alice.sync({ since: aliceSync.next_batch as string, set_presence: 'offline' });
    expect(aliceAgain.presence.events).toEqual([]);
  });

  it('is off with presence.enabled: false, as on Synapse', async () => {
    hs = await startTestHomeserver({ presence: { enabled: false } });
    const alice: TestClient = client(hs, await createUser(hs, 'alice'));
    await alice.ok('PUT', `/presence/${encodeURIComponent(alice.userId)}/status`, { presence: 'online' });
    expect(await alice.ok('GET', `/presence/${encodeURIComponent(alice.userId)}/status`)).toEqual({ presence: 'offline' });
    expect((await alice.sync()).presence).toEqual({ events: [] });
  });
});
