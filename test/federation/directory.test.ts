/** The room directory across servers: a client of A reads and searches B's published rooms. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { client, type TestClient } from '../support/client.js';
import { createUser, startFederation, type Federation } from '../support/federation.js';

let federation: Federation;
let botA: TestClient;
let aliceB: TestClient;

beforeAll(async () => {
  federation = await startFederation(['a.test', 'b.test']);
  botA = client(federation.servers.get('a.test')!.hs, await createUser(federation.servers.get('a.test')!.hs, 'bot'));
  aliceB = client(federation.servers.get('b.test')!.hs, await createUser(federation.servers.get('b.test')!.hs, 'alice'));
});
afterAll(() => federation?.close());

describe('another server’s room directory', () => {
  it('is read and searched through federation, and its rooms can be joined from it', async () => {
    const lobby = await aliceB.createRoom({ visibility: 'public', preset: 'public_chat', name: 'Lobby', topic: 'Say hello' });
    await aliceB.createRoom({ visibility: 'public', preset: 'public_chat', name: 'Ops' });
    const page = await botA.ok('GET', '/publicRooms', undefined, { server: 'b.test' });
    expect(page.chunk.map((r: { name: string }) => r.name).sort()).toEqual(['Lobby', 'Ops']);
    const found = await botA.request('POST', '/publicRooms?server=b.test', { filter: { generic_search_term: 'hello' }, limit: 5 });
    expect(found.status).toBe(200);
    expect(found.body.chunk.map((r: { room_id: string }) => r.room_id)).toEqual([lobby]);
    // What the directory gave is enough to join.
    await botA.ok('POST', `/join/${encodeURIComponent(lobby)}`, {}, { server_name: 'b.test' });
    await aliceB.waitForEvent(lobby, (event) => event.type === 'm.room.member' && event.state_key === botA.userId);
  });

  it('answers a clear error for a server that cannot be reached', async () => {
    const answer = await botA.request('GET', '/publicRooms', undefined, { server: 'nowhere.invalid' });
    expect(answer.status).toBeGreaterThanOrEqual(400);
    expect(answer.body.errcode).toEqual(expect.any(String));
  });

  it('follows a room upgrade made on the other server: its aliases and listing move when its first user joins the new room', async () => {
    const old = await aliceB.createRoom({ preset: 'public_chat', power_level_content_override: { users: { [aliceB.userId]: 100, [botA.userId]: 50 } } });
    await botA.ok('POST', `/join/${encodeURIComponent(old)}`, {}, { server_name: 'b.test' });
    await botA.ok('PUT', `/directory/room/${encodeURIComponent('#follow:a.test')}`, { room_id: old });
    await botA.ok('PUT', `/directory/list/room/${encodeURIComponent(old)}`, { visibility: 'public' });
    const replacement = (await aliceB.ok('POST', `/rooms/${encodeURIComponent(old)}/upgrade`, { new_version: '11' })).replacement_room as string;
    await botA.waitForEvent(old, (event) => event.type === 'm.room.tombstone');
    await botA.ok('POST', `/join/${encodeURIComponent(replacement)}`, {}, { server_name: 'b.test' });
    expect((await botA.ok('GET', `/directory/room/${encodeURIComponent('#follow:a.test')}`)).room_id).toBe(replacement);
    expect((await botA.ok('GET', `/directory/list/room/${encodeURIComponent(replacement)}`)).visibility).toBe('public');
    expect((await botA.ok('GET', `/directory/list/room/${encodeURIComponent(old)}`)).visibility).toBe('private');
  });
});
