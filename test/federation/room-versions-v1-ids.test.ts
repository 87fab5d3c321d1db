/**
 * In room versions 1 and 2 the sending server chooses each event's id, so an id does not identify
 * an event: a hostile server may reuse one of its own ids, in another room or for other content.
 * The first event stored under an id keeps it; a later one under the same id is refused (named in
 * the /send answer, nothing stored), whether it comes in a transaction or a send_join. Also: a v1
 * invite (`PUT /v1/invite`) keeps the stripped state its sender put in `unsigned`.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { UnsignedPdu } from '../../src/rooms/pdu.js';
import { client, type Json, type TestClient } from '../support/client.js';
import { createUser, startFederation, type Federation } from '../support/federation.js';
import { startHostileServer, type HostileServer } from '../support/hostile-server.js';

let federation: Federation;
let alice: TestClient;
let bob: TestClient;
let evil: HostileServer;
/** A second server relaying evil's events: transactions of one origin are taken one at a time. */
let relay: HostileServer;
const EVIL = '@mallory:evil.test';
const enc = encodeURIComponent;

beforeAll(async () => {
  federation = await startFederation(['a.test']);
  const a = federation.servers.get('a.test')!.hs;
  alice = client(a, await createUser(a, 'alice'));
  bob = client(a, await createUser(a, 'bob'));
  evil = await startHostileServer(federation, 'evil.test');
  relay = await startHostileServer(federation, 'c.test');
});
afterAll(async () => {
  await relay?.close();
  await evil?.close();
  await federation?.close();
});

interface Joined {
  roomId: string;
  joinId: string;
  depth: number;
  auth: string[];
}

/** A v1 room of alice's that evil's user has joined. */
async function joinedRoom(name: string): Promise<Joined> {
  const roomId = await alice.createRoom({ preset: 'public_chat', room_version: '1', name });
  const joined = await evil.join('a.test', roomId, EVIL);
  expect(joined.roomVersion).toBe('1');
  const idOf = (type: string) => (joined.state.find((event) => event.type === type && event.state_key === '') as Json).event_id as string;
  return { roomId, joinId: joined.eventId, depth: joined.pdu.depth, auth: [idOf('m.room.create'), idOf('m.room.power_levels'), joined.eventId] };
}

/** A message of evil's user in `room` (built on its join), under `eventId` when given. */
function message(room: Joined, body: string, eventId?: string): { pdu: Json; eventId: string } {
  const draft = {
    room_id: room.roomId,
    sender: EVIL,
    type: 'm.room.message',
    content: { msgtype: 'm.text', body },
    origin_server_ts: Date.now(),
    depth: room.depth + 1,
    prev_events: [[room.joinId, {}]],
    auth_events: room.auth.map((id) => [id, {}]),
    ...(eventId !== undefined ? { event_id: eventId } : {}),
  } as unknown as UnsignedPdu;
  return evil.pdu('1', draft);
}

async function bodiesIn(roomId: string): Promise<unknown[]> {
  const page = await alice.ok('GET', `/rooms/${enc(roomId)}/messages`, undefined, { dir: 'b', limit: 50 });
  return page.chunk.map((event: Json) => event.content?.body);
}

describe('v1 event ids chosen by a hostile server', () => {
  it('an event reusing the id of an event of another room is refused; the id still names the first', async () => {
    const one = await joinedRoom('one');
    const two = await joinedRoom('two');
    const spoof = message(one, 'under the id of a join elsewhere', two.joinId);
    const answer = await evil.send('a.test', [spoof.pdu]);
    expect(answer.pdus[two.joinId]?.error).toMatch(/names an event of another room/);
    expect(await bodiesIn(one.roomId)).not.toContain('under the id of a join elsewhere');
    expect((await alice.request('GET', `/rooms/${enc(one.roomId)}/event/${enc(two.joinId)}`)).status).toBe(404);
    const still = await alice.ok('GET', `/rooms/${enc(two.roomId)}/event/${enc(two.joinId)}`);
    expect(still).toMatchObject({ type: 'm.room.member', state_key: EVIL, content: { membership: 'join' } });
  });

  it('an event reusing an id of the same room for other content is refused; the same event again is fine', async () => {
    const room = await joinedRoom('three');
    const first = message(room, 'first');
    expect((await evil.send('a.test', [first.pdu])).pdus[first.eventId]).toEqual({});
    const second = message(room, 'second', first.eventId);
    expect((await evil.send('a.test', [second.pdu])).pdus[first.eventId]?.error).toMatch(/names another event of this room/);
    // In one transaction: the first of the id stands.
    const third = message(room, 'third', first.eventId);
    expect((await evil.send('a.test', [first.pdu, third.pdu])).pdus[first.eventId]).toEqual({});
    expect((await alice.ok('GET', `/rooms/${enc(room.roomId)}/event/${enc(first.eventId)}`)).content.body).toBe('first');
    expect(await bodiesIn(room.roomId)).not.toContain('second');
    expect(await bodiesIn(room.roomId)).not.toContain('third');
  });

  it('one new id sent into two rooms at once is stored in one of them only, and nothing else fails', async () => {
    const one = await joinedRoom('four');
    const two = await joinedRoom('five');
    const id = `$race${Date.now()}:evil.test`;
    // From two origins, so the two rooms are worked on at the same time (the second's keys fetched before).
    await relay.send('a.test', []);
    const answers = await Promise.all([evil.send('a.test', [message(one, 'race one', id).pdu]), relay.send('a.test', [message(two, 'race two', id).pdu])]);
    const refused = answers.filter((answer) => answer.pdus[id]?.error !== undefined);
    expect(refused).toHaveLength(1);
    expect(refused[0]!.pdus[id]!.error).toMatch(/another room/);
    const found = await Promise.all([one, two].map(async (room) => (await alice.request('GET', `/rooms/${enc(room.roomId)}/event/${enc(id)}`)).status));
    expect(found.sort()).toEqual([200, 404]);
    // Both rooms still take events.
    for (const room of [one, two]) {
      const next = message(room, `after the race in ${room.roomId}`);
      expect((await evil.send('a.test', [next.pdu])).pdus[next.eventId]).toEqual({});
    }
  });

  it('a send_join under the id of an event of another room is refused, with nothing of that room in the answer', async () => {
    const other = await joinedRoom('six');
    const roomId = await alice.createRoom({ preset: 'public_chat', room_version: '1', name: 'seven' });
    const made = await evil.client.request<{ event: Json; room_version: string }>('a.test', {
      method: 'GET',
      path: `/_matrix/federation/v1/make_join/${enc(roomId)}/${enc(EVIL)}?ver=1`,
    });
    const signed = evil.pdu('1', { ...made.event, origin_server_ts: Date.now(), event_id: other.joinId } as unknown as UnsignedPdu);
    expect(signed.eventId).toBe(other.joinId);
    const refused = evil.client.request('a.test', { method: 'PUT', path: `/_matrix/federation/v2/send_join/${enc(roomId)}/${enc(other.joinId)}`, body: signed.pdu });
    await expect(refused).rejects.toMatchObject({ status: 403 });
    const members = await alice.ok('GET', `/rooms/${enc(roomId)}/joined_members`);
    expect(Object.keys(members.joined)).not.toContain(EVIL);
  });
});

describe('PUT /v1/invite', () => {
  const invite = (roomId: string, unsigned: Json) => {
    const made = evil.pdu('1', {
      room_id: roomId,
      sender: EVIL,
      type: 'm.room.member',
      state_key: bob.userId,
      content: { membership: 'invite' },
      origin_server_ts: Date.now(),
      depth: 3,
      prev_events: [['$prev:evil.test', {}]],
      auth_events: [['$create:evil.test', {}]],
    } as unknown as UnsignedPdu);
    return { eventId: made.eventId, body: { ...made.pdu, unsigned } };
  };

  it('keeps the stripped state the inviter put in unsigned.invite_room_state', async () => {
    const roomId = '!old:evil.test';
    const { eventId, body } = invite(roomId, {
      invite_room_state: [
        { type: 'm.room.name', state_key: '', sender: EVIL, content: { name: 'An old room' } },
        { type: 'm.room.join_rules', state_key: '', sender: EVIL, content: { join_rule: 'invite' } },
      ],
    });
    const answer = await evil.client.request<[number, { event: Json }]>('a.test', { method: 'PUT', path: `/_matrix/federation/v1/invite/${enc(roomId)}/${enc(eventId)}`, body });
    expect(answer[0]).toBe(200);
    expect(Object.keys(answer[1].event.signatures as Json)).toContain('a.test');
    const stripped = await bob.waitForInvite(roomId);
    expect(stripped.find((event) => event.type === 'm.room.name')?.content.name).toBe('An old room');
  });

  it('refuses a stripped state too long or not a list, as /v2/invite does', async () => {
    const roomId = '!older:evil.test';
    const many = Array.from({ length: 101 }, (_, i) => ({ type: 'm.room.name', state_key: `${i}`, sender: EVIL, content: {} }));
    for (const unsigned of [{ invite_room_state: many }, { invite_room_state: 'name' }]) {
      const { eventId, body } = invite(roomId, unsigned);
      const refused = evil.client.request('a.test', { method: 'PUT', path: `/_matrix/federation/v1/invite/${enc(roomId)}/${enc(eventId)}`, body });
      await expect(refused).rejects.toMatchObject({ status: 400 });
    }
  });
});
