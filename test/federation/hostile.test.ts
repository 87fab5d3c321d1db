/**
 * A hostile server on the open federation (a fake homeserver signing with its own key, no code of
 * ours in its answers) against a.test, with b.test as an honest member server: what it may read,
 * what it may join, and what one of its events may do to a room.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_DEPTH } from '../../src/rooms/pdu.js';
import { client, type Json, type TestClient } from '../support/client.js';
import { createUser, startFederation, type Federation, type FederatedServer } from '../support/federation.js';
import { startHostileServer, type HostileServer } from '../support/hostile-server.js';

let federation: Federation;
let a: FederatedServer;
let b: FederatedServer;
let evil: HostileServer;
let botA: TestClient;
let aliceB: TestClient;

beforeAll(async () => {
  federation = await startFederation(['a.test', 'b.test']);
  a = federation.servers.get('a.test')!;
  b = federation.servers.get('b.test')!;
  evil = await startHostileServer(federation);
  botA = client(a.hs, await createUser(a.hs, 'bot'));
  aliceB = client(b.hs, await createUser(b.hs, 'alice'));
});
afterAll(async () => {
  await evil?.close();
  await federation?.close();
});

const enc = encodeURIComponent;

async function roomOnA(roomId: string) {
  return (await a.services.roomCache.room(roomId))!;
}

/** What `asker` gets for a federation GET/POST to a.test (status and errcode, or the body). */
async function ask(asker: { client: { request: (d: string, r: { method: 'GET' | 'POST' | 'PUT'; path: string; body?: unknown }) => Promise<unknown> } }, method: 'GET' | 'POST', path: string, body?: unknown) {
  try {
    return { status: 200, body: (await asker.client.request('a.test', { method, path, ...(body === undefined ? {} : { body }) })) as Json };
  } catch (err) {
    const failure = err as { status?: number; errcode?: string };
    return { status: failure.status, errcode: failure.errcode };
  }
}

describe('room reads answer only servers in the room', () => {
  it('refuses /state, /state_ids, /event_auth, /backfill and /get_missing_events of an invite-only room to a server never let in', async () => {
    const roomId = await botA.createRoom({ preset: 'private_chat', name: 'Secret plans', topic: 'nobody else' });
    await botA.invite(roomId, aliceB.userId);
    await aliceB.join(roomId);
    await botA.waitForEvent(roomId, (event) => event.type === 'm.room.member' && event.state_key === aliceB.userId && event.content.membership === 'join');
    const room = await roomOnA(roomId);
    const eventId = room.head.extremities[0]!;
    const reads: Array<['GET' | 'POST', string, unknown?]> = [
      ['GET', `/_matrix/federation/v1/state/${enc(roomId)}?event_id=${enc(eventId)}`],
      ['GET', `/_matrix/federation/v1/state_ids/${enc(roomId)}?event_id=${enc(eventId)}`],
      ['GET', `/_matrix/federation/v1/event_auth/${enc(roomId)}/${enc(eventId)}`],
      ['GET', `/_matrix/federation/v1/backfill/${enc(roomId)}?v=${enc(eventId)}&limit=10`],
      ['POST', `/_matrix/federation/v1/get_missing_events/${enc(roomId)}`, { earliest_events: [], latest_events: [eventId], limit: 10 }],
    ];
    for (const [method, path, body] of reads) {
      expect(await ask(evil, method, path, body), path).toEqual({ status: 403, errcode: 'M_FORBIDDEN' });
      // The member server still gets its answers.
      const honest = await ask({ client: b.services.federation.client }, method, path, body);
      expect(honest.status, path).toBe(200);
    }
    const honestState = await ask({ client: b.services.federation.client }, 'GET', reads[0]![1]);
    expect(JSON.stringify(honestState.body)).toContain('Secret plans');
    // /event held already: it checks history visibility.
    expect((await ask(evil, 'GET', `/_matrix/federation/v1/event/${enc(eventId)}`)).status).toBe(404);
  });
});

describe('restricted rooms', () => {
  it('does not countersign a send_join for a joiner who is in none of the allowed rooms', async () => {
    const allowed = await botA.createRoom({ preset: 'private_chat', name: 'Members only' });
    const roomId = await botA.createRoom({
      room_version: '10',
      preset: 'private_chat',
      initial_state: [{ type: 'm.room.join_rules', state_key: '', content: { join_rule: 'restricted', allow: [{ type: 'm.room_membership', room_id: allowed }] } }],
    });
    const joiner = '@mallory:evil.test';
    // make_join refuses, as it always did.
    const made = await ask(evil, 'GET', `/_matrix/federation/v1/make_join/${enc(roomId)}/${enc(joiner)}?ver=10`);
    expect(made).toMatchObject({ status: 400, errcode: 'M_UNABLE_TO_AUTHORISE_JOIN' });
    // A join built by hand, naming our bot as the one who vouches for it.
    const room = await roomOnA(roomId);
    const { pdu, eventId } = evil.pdu('10', {
      room_id: roomId,
      sender: joiner,
      type: 'm.room.member',
      state_key: joiner,
      content: { membership: 'join', join_authorised_via_users_server: botA.userId },
      origin_server_ts: Date.now(),
      depth: room.head.depth + 1,
      prev_events: [...room.head.extremities],
      auth_events: ['m.room.create', 'm.room.power_levels', 'm.room.join_rules'].map((type) => room.get(type)!.eventId).concat(room.get('m.room.member', botA.userId)!.eventId),
    });
    const sent = await evil.client
      .request('a.test', { method: 'PUT', path: `/_matrix/federation/v2/send_join/${enc(roomId)}/${enc(eventId)}`, body: pdu })
      .catch((err: { status?: number; errcode?: string }) => err);
    expect(sent).toMatchObject({ status: 403, errcode: 'M_FORBIDDEN' });
    expect((await roomOnA(roomId)).membership(joiner)).not.toBe('join');
    expect((await ask(evil, 'GET', `/_matrix/federation/v1/backfill/${enc(roomId)}?v=${enc(room.head.extremities[0]!)}&limit=10`)).status).toBe(403);
  });
});

describe('an event at the depth limit', () => {
  it('leaves the room usable: local events are built at the limit, not past it', async () => {
    const roomId = await botA.createRoom({ preset: 'public_chat' });
    const mallory = '@mallory:evil.test';
    const joined = await evil.join('a.test', roomId, mallory);
    const room = await roomOnA(roomId);
    expect(room.membership(mallory)).toBe('join');
    const { pdu, eventId } = evil.pdu(joined.roomVersion, {
      room_id: roomId,
      sender: mallory,
      type: 'm.room.message',
      content: { msgtype: 'm.text', body: 'deep' },
      origin_server_ts: Date.now(),
      depth: Number.MAX_SAFE_INTEGER,
      prev_events: [...room.head.extremities],
      auth_events: [room.get('m.room.create')!.eventId, room.get('m.room.power_levels')!.eventId, joined.eventId],
    });
    const answer = await evil.send('a.test', [pdu]);
    // Valid by the spec (Synapse takes it too): the room goes on from there.
    expect(answer.pdus[eventId]).toEqual({});
    const after = await botA.send(roomId, { msgtype: 'm.text', body: 'still here' });
    expect(Number((await a.services.storage.rooms.getEvent(after))!.depth)).toBe(MAX_DEPTH);
    await botA.send(roomId, { msgtype: 'm.text', body: 'and again' });
    await botA.ok('POST', `/rooms/${enc(roomId)}/ban`, { user_id: mallory, reason: 'deep' });
    const other = client(a.hs, await createUser(a.hs, 'other'));
    await other.join(roomId);
    await other.ok('POST', `/rooms/${enc(roomId)}/leave`, {});
    // The timeline reads in order at the limit: arrival decides among equal depths.
    const page = await botA.ok('GET', `/rooms/${enc(roomId)}/messages`, undefined, { dir: 'b', limit: 5 });
    expect((page.chunk as Json[]).map((event) => event.content?.body ?? event.content?.membership)).toEqual(['leave', 'join', 'ban', 'and again', 'still here']);
  });
});
