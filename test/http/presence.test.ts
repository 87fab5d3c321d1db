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
    const since = (await bob.sync()).next_batch as string;
    const parked = bob.sync({ since, timeout: 10_000 });
    while (hs.services.notifier.parkedCount() === 0) await new Promise((r) => setTimeout(r, 5));
    await alice.ok('PUT', `/presence/${encodeURIComponent(alice.userId)}/status`, { presence: 'unavailable', status_msg: 'lunch' });
    expect(presenceOf(await parked, alice.userId)).toEqual([expect.objectContaining({ presence: 'unavailable', status_msg: 'lunch' })]);
  });

  it('is off with presence.enabled: false, as on Synapse', async () => {
    hs = await startTestHomeserver({ presence: { enabled: false } });
    const alice: TestClient = client(hs, await createUser(hs, 'alice'));
    await alice.ok('PUT', `/presence/${encodeURIComponent(alice.userId)}/status`, { presence: 'online' });
    expect(await alice.ok('GET', `/presence/${encodeURIComponent(alice.userId)}/status`)).toEqual({ presence: 'offline' });
    expect((await alice.sync()).presence).toEqual({ events: [] });
  });
});
