/**
 * Peeking across servers: a user of A not in a world-readable room that A is in (through another
 * of its users) reads it with the legacy `/events?room_id=`, and a parked request wakes when an
 * event of the room arrives from B.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { client, type Json, type TestClient } from '../support/client.js';
import { createUser, startFederation, type Federation } from '../support/federation.js';
import type { TestUser } from '../support/homeserver.js';

let federation: Federation;
let botA: TestClient;
let carolA: TestUser;
let aliceB: TestClient;

beforeAll(async () => {
  federation = await startFederation(['a.test', 'b.test']);
  const a = federation.servers.get('a.test')!.hs;
  const b = federation.servers.get('b.test')!.hs;
  botA = client(a, await createUser(a, 'bot'));
  carolA = await createUser(a, 'carol');
  aliceB = client(b, await createUser(b, 'alice'));
});
afterAll(() => federation?.close());

describe('peeking across servers', () => {
  it('wakes a peek on A with a message sent on B', async () => {
    const a = federation.servers.get('a.test')!.hs;
    const roomId = await aliceB.createRoom({ preset: 'public_chat', initial_state: [{ type: 'm.room.history_visibility', state_key: '', content: { history_visibility: 'world_readable' } }] });
    await botA.ok('POST', `/join/${encodeURIComponent(roomId)}`, {}, { server_name: 'b.test' });
    const events = (query: string) =>
      a.http.get(`/_matrix/client/v3/events?room_id=${encodeURIComponent(roomId)}&${query}`).auth(carolA.accessToken, { type: 'bearer' }).then((res) => res);
    const start = await events('timeout=0');
    expect(start.status).toBe(200);
    const parked = events(`from=${encodeURIComponent(start.body.end as string)}&timeout=30000`);
    await new Promise((resolve) => setTimeout(resolve, 200));
    const sentAt = performance.now();
    const sent = await aliceB.send(roomId, { msgtype: 'm.text', body: 'from afar' });
    const woken = await parked;
    expect(woken.status).toBe(200);
    expect((woken.body.chunk as Json[]).find((event) => event.event_id === sent)).toMatchObject({ room_id: roomId, sender: aliceB.userId, content: { body: 'from afar' } });
    // Woken by the event's arrival, not answered at the timeout.
    expect(performance.now() - sentAt).toBeLessThan(12_000);
  }, 60_000);
});
