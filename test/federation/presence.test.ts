/** Presence across servers: m.presence EDUs to the servers sharing a room. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { client, type Json, type TestClient } from '../support/client.js';
import { createUser, startFederation, type Federation } from '../support/federation.js';

let federation: Federation;
let botA: TestClient;
let aliceB: TestClient;

/** The first m.presence event of `sender` in a sync answer. */
function presenceOf(sync: Json, sender: string): Json | undefined {
  return ((sync.presence as { events?: Json[] } | undefined)?.events ?? []).find((event) => event.sender === sender);
}

beforeAll(async () => {
  federation = await startFederation(['a.test', 'b.test']);
  const a = federation.servers.get('a.test')!.hs;
  const b = federation.servers.get('b.test')!.hs;
  botA = client(a, await createUser(a, 'bot'));
  aliceB = client(b, await createUser(b, 'alice'));
});
afterAll(() => federation?.close());

describe('presence across servers', () => {
  it('a status set on A reaches a roommate on B, and only A may speak for its users', async () => {
    const roomId = await aliceB.createRoom({ preset: 'public_chat' });
    await botA.ok('POST', `/join/${encodeURIComponent(roomId)}`, {}, { server_name: 'b.test' });
    await aliceB.waitForEvent(roomId, (event) => event.type === 'm.room.member' && event.state_key === botA.userId);
    await botA.ok('PUT', `/presence/${encodeURIComponent(botA.userId)}/status`, { presence: 'unavailable', status_msg: 'deploying' });
    const seen = await aliceB.syncUntil((sync) => {
      const mine = ((sync.presence as { events: Json[] }).events ?? []).find((e) => e.sender === botA.userId && e.content.status_msg === 'deploying');
      return mine;
    });
    expect(seen.content).toMatchObject({ presence: 'unavailable', status_msg: 'deploying' });
    expect(await aliceB.ok('GET', `/presence/${encodeURIComponent(botA.userId)}/status`)).toMatchObject({ presence: 'unavailable', status_msg: 'deploying' });

    const b = federation.servers.get('b.test')!.hs;
    await b.services.presence.receiveRemote('c.test', { push: [{ user_id: botA.userId, presence: 'offline' }] });
    expect(await aliceB.ok('GET', `/presence/${encodeURIComponent(botA.userId)}/status`)).toMatchObject({ presence: 'unavailable' });
  });

  it('new roommates on two servers learn each other\'s presence when one joins, with no change after the join', async () => {
    const a = federation.servers.get('a.test')!.hs;
    const b = federation.servers.get('b.test')!.hs;
    const carolA = client(a, await createUser(a, 'carol'));
    const daveB = client(b, await createUser(b, 'dave'));
    // Both online (a sync marks them), each alone so far: neither server knows the other user.
    await carolA.syncUntil((sync) => presenceOf(sync, carolA.userId));
    await daveB.syncUntil((sync) => presenceOf(sync, daveB.userId));
    const roomId = await daveB.createRoom({ preset: 'private_chat' });
    await daveB.invite(roomId, carolA.userId);
    await carolA.ok('POST', `/join/${encodeURIComponent(roomId)}`, {}, { server_name: 'b.test' });
    // Each sees the other online (a roommate whose presence a server never heard of shows offline).
    const daveSeen = await carolA.syncUntil((sync) => (presenceOf(sync, daveB.userId)?.content.presence === 'online' ? presenceOf(sync, daveB.userId) : undefined));
    expect(daveSeen!.content).toMatchObject({ presence: 'online', currently_active: true });
    const carolSeen = await daveB.syncUntil((sync) => (presenceOf(sync, carolA.userId)?.content.presence === 'online' ? presenceOf(sync, carolA.userId) : undefined));
    expect(carolSeen!.content).toMatchObject({ presence: 'online' });
    expect(await carolA.ok('GET', `/presence/${encodeURIComponent(daveB.userId)}/status`)).toMatchObject({ presence: 'online' });
  });
});
