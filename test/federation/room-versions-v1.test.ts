/**
 * Room versions 1 and 2 across two servers: events name themselves (`$opaque:server`) and list
 * their parents as `[id, hashes]` pairs. A bot on A joins a v1/v2 room of B (make_join/send_join),
 * both chat and redact; an invite to a v1 room crosses servers; a v1 room is upgraded to v10
 * (and on to v2) and the other server follows.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signJson } from '../../src/core/signed-json.js';
import { redactPdu } from '../../src/rooms/redaction.js';
import { client, type Json, type TestClient } from '../support/client.js';
import { createUser, startFederation, type Federation } from '../support/federation.js';
import { startHostileServer, type HostileServer } from '../support/hostile-server.js';

let federation: Federation;
let botA: TestClient;
let aliceB: TestClient;
let carolB: TestClient;
let old: HostileServer;

beforeAll(async () => {
  federation = await startFederation(['a.test', 'b.test'], () => ({ federation: { min_retry_interval: '200ms', max_retry_interval: '1s' } }));
  const a = federation.servers.get('a.test')!.hs;
  const b = federation.servers.get('b.test')!.hs;
  botA = client(a, await createUser(a, 'bot'));
  aliceB = client(b, await createUser(b, 'alice'));
  carolB = client(b, await createUser(b, 'carol'));
  old = await startHostileServer(federation, 'evil.test');
});
afterAll(async () => {
  await old?.close();
  await federation?.close();
});

const enc = encodeURIComponent;

describe('room versions 1 and 2 across servers', () => {
  it.each(['1', '2'])('room version %s: a bot on A joins a room of B, both chat and redact', async (version) => {
    const roomId = await aliceB.createRoom({ preset: 'public_chat', room_version: version, name: `v${version}` });
    await aliceB.send(roomId, { msgtype: 'm.text', body: `before, v${version}` });
    await botA.ok('POST', `/join/${enc(roomId)}`, {}, { server_name: 'b.test' });
    expect((await botA.ok('GET', `/rooms/${enc(roomId)}/state/m.room.name/`)).name).toBe(`v${version}`);
    expect((await botA.ok('GET', `/rooms/${enc(roomId)}/state/m.room.create/`)).room_version).toBe(version);

    const sent = await botA.send(roomId, { msgtype: 'm.text', body: `A in v${version}` });
    // Our own id, on our server: v1/v2 ids are made by the sending server.
    expect(sent).toMatch(/^\$[A-Za-z0-9_-]+:a\.test$/);
    const atB = await aliceB.waitForEvent(roomId, (event) => event.content?.body === `A in v${version}`);
    expect(atB.event_id).toBe(sent);
    await aliceB.send(roomId, { msgtype: 'm.text', body: `B in v${version}` });
    const fromB = await botA.waitForEvent(roomId, (event) => event.content?.body === `B in v${version}`);
    expect(fromB.event_id).toMatch(/:b\.test$/);
    // History from before the join came over with it.
    const page = await botA.ok('GET', `/rooms/${enc(roomId)}/messages`, undefined, { dir: 'b', limit: 50 });
    expect(page.chunk.map((event: Json) => event.content?.body)).toContain(`before, v${version}`);

    // The bot redacts its own message (an event of its server): B applies it.
    await botA.ok('PUT', `/rooms/${enc(roomId)}/redact/${enc(sent)}/r1`, { reason: 'oops' });
    await expect.poll(async () => (await aliceB.ok('GET', `/rooms/${enc(roomId)}/event/${enc(sent)}`)).content, { timeout: 10_000 }).toEqual({});
    // B's admin redacts B's message: A applies it.
    await aliceB.ok('PUT', `/rooms/${enc(roomId)}/redact/${enc(fromB.event_id)}/r2`, {});
    await expect.poll(async () => (await botA.ok('GET', `/rooms/${enc(roomId)}/event/${enc(fromB.event_id)}`)).content, { timeout: 10_000 }).toEqual({});
    // The bot, without the redact level, may not redact Alice's event.
    const other = await aliceB.send(roomId, { msgtype: 'm.text', body: 'not yours' });
    await botA.waitForEvent(roomId, (event) => event.event_id === other);
    const refused = await botA.request('PUT', `/rooms/${enc(roomId)}/redact/${enc(other)}/r3`, {});
    expect(refused.status).toBe(403);
  });

  it('a user on A invites a user on B into a v1 room of A, who joins and chats', async () => {
    const roomId = await botA.createRoom({ preset: 'private_chat', room_version: '1', name: 'Old room' });
    await botA.invite(roomId, carolB.userId);
    const inviteState = await carolB.waitForInvite(roomId);
    expect(inviteState.find((event) => event.type === 'm.room.name')?.content.name).toBe('Old room');
    await carolB.join(roomId);
    await botA.waitForEvent(roomId, (event) => event.type === 'm.room.member' && event.state_key === carolB.userId && event.content.membership === 'join');
    await carolB.send(roomId, { msgtype: 'm.text', body: 'hi from an old room' });
    await botA.waitForEvent(roomId, (event) => event.content?.body === 'hi from an old room');
    // A topic set on B reaches A's state.
    await carolB.request('PUT', `/rooms/${enc(roomId)}/state/m.room.topic/`, { topic: 'not allowed' }).then((answer) => expect(answer.status).toBe(403));
    await botA.setState(roomId, 'm.room.topic', '', { topic: 'old times' });
    await expect.poll(async () => (await carolB.request('GET', `/rooms/${enc(roomId)}/state/m.room.topic/`)).body.topic, { timeout: 10_000 }).toBe('old times');
  });

  it('a v1 room is upgraded to v10; the user on the other server follows', async () => {
    const roomId = await aliceB.createRoom({ preset: 'public_chat', room_version: '1' });
    await botA.ok('POST', `/join/${enc(roomId)}`, {}, { server_name: 'b.test' });
    await aliceB.waitForEvent(roomId, (event) => event.type === 'm.room.member' && event.state_key === botA.userId);
    const upgraded = (await aliceB.ok('POST', `/rooms/${enc(roomId)}/upgrade`, { new_version: '10' })).replacement_room as string;
    const tombstone = await botA.waitForEvent(roomId, (event) => event.type === 'm.room.tombstone');
    expect(tombstone.content.replacement_room).toBe(upgraded);
    await botA.ok('POST', `/join/${enc(upgraded)}`, {}, { server_name: 'b.test' });
    const create = await botA.ok('GET', `/rooms/${enc(upgraded)}/state/m.room.create/`);
    expect(create).toMatchObject({ room_version: '10', predecessor: { room_id: roomId } });
    // And back: a v10 room upgraded to v2.
    const back = (await aliceB.ok('POST', `/rooms/${enc(upgraded)}/upgrade`, { new_version: '2' })).replacement_room as string;
    await botA.waitForEvent(upgraded, (event) => event.type === 'm.room.tombstone');
    await botA.ok('POST', `/join/${enc(back)}`, {}, { server_name: 'b.test' });
    await botA.send(back, { msgtype: 'm.text', body: 'in v2 now' });
    await aliceB.waitForEvent(back, (event) => event.content?.body === 'in v2 now');
  });

  it('an invite to a server without /v2/invite goes by /v1/invite, the event in the wire form of v1', async () => {
    const roomId = await botA.createRoom({ preset: 'private_chat', room_version: '1', name: 'for an old server' });
    old.route('PUT', '/_matrix/federation/v2/invite/', () => ({ status: 404, body: { errcode: 'M_UNRECOGNIZED', error: 'Unrecognized request' } }));
    old.route('PUT', '/_matrix/federation/v1/invite/', (request) => {
      const event = request.body as Json;
      const signed = signJson(redactPdu(event, '1'), old.signer);
      return { body: [200, { event: { ...event, signatures: { ...event.signatures, ...signed.signatures } } }] };
    });
    await botA.invite(roomId, '@someone:evil.test');
    const sent = old.requests.find((request) => request.path.startsWith('/_matrix/federation/v1/invite/'))!.body as Json;
    expect(sent.event_id).toMatch(/:a\.test$/);
    expect(sent.prev_events).toEqual([[expect.any(String), {}]]);
    expect(sent.unsigned.invite_room_state.find((event: Json) => event.type === 'm.room.name')?.content.name).toBe('for an old server');
    const member = await botA.ok('GET', `/rooms/${enc(roomId)}/state/m.room.member/${enc('@someone:evil.test')}`);
    expect(member.membership).toBe('invite');
  });
});
