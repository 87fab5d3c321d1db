/**
 * What a server must refuse from another: a forged signature, a content hash that does not match
 * (the event is redacted), an event its auth events do not allow (rejected, though the answer to
 * the transaction is `{}` as for any event judged), an event the room's
 * current state no longer allows (soft failed: stored, never shown), a request without a valid
 * X-Matrix signature, a server the room's ACL denies; and a destination in ip_range_blacklist is
 * never contacted.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { finishPdu, type Pdu, type UnsignedPdu } from '../../src/rooms/pdu.js';
import { client, type Json, type TestClient } from '../support/client.js';
import { createUser, startFederation, type Federation, type FederatedServer } from '../support/federation.js';

let federation: Federation;
let botA: TestClient;
let aliceB: TestClient;
let roomId: string;
let a: FederatedServer;
let b: FederatedServer;

beforeAll(async () => {
  federation = await startFederation(['a.test', 'b.test']);
  a = federation.servers.get('a.test')!;
  b = federation.servers.get('b.test')!;
  botA = client(a.hs, await createUser(a.hs, 'bot'));
  aliceB = client(b.hs, await createUser(b.hs, 'alice'));
  roomId = await aliceB.createRoom({ preset: 'public_chat' });
  await botA.ok('POST', `/join/${encodeURIComponent(roomId)}`, {}, { server_name: 'b.test' });
});
afterAll(() => federation?.close());

let txn = 0;

/** A PDU as A would build it now, with `change` applied before it is hashed and signed. */
async function pduFromA(change: Partial<UnsignedPdu>): Promise<{ pdu: Pdu; eventId: string }> {
  const room = (await a.services.roomCache.room(roomId))!;
  const authEvents = ['m.room.create', 'm.room.power_levels'].map((type) => room.get(type)!.eventId);
  authEvents.push(room.get('m.room.member', botA.userId)!.eventId);
  const draft: UnsignedPdu = {
    room_id: roomId,
    sender: botA.userId,
    type: 'm.room.message',
    content: { msgtype: 'm.text', body: 'forged?' },
    origin_server_ts: Date.now(),
    depth: room.head.depth + 1,
    prev_events: [...room.head.extremities],
    auth_events: authEvents,
    ...change,
  };
  return finishPdu(draft, room.version, a.services.signer);
}

async function sendFromA(pdus: unknown[]): Promise<Json> {
  return a.services.federation.client.request<Json>('b.test', {
    method: 'PUT',
    path: `/_matrix/federation/v1/send/refusal-${++txn}`,
    body: { origin: 'a.test', origin_server_ts: Date.now(), pdus, edus: [] },
  });
}

async function eventOnB(eventId: string) {
  return aliceB.request('GET', `/rooms/${encodeURIComponent(roomId)}/event/${encodeURIComponent(eventId)}`);
}

describe('PDUs that are refused', () => {
  it('accepts a well-formed event (the control case)', async () => {
    const { pdu, eventId } = await pduFromA({ content: { msgtype: 'm.text', body: 'genuine' } });
    const answer = await sendFromA([pdu]);
    expect(answer.pdus[eventId]).toEqual({});
    expect((await eventOnB(eventId)).body.content.body).toBe('genuine');
  });

  it('drops an event whose signature does not verify', async () => {
    const { pdu, eventId } = await pduFromA({});
    const signature = Object.keys(pdu.signatures['a.test']!)[0]!;
    const forged = { ...pdu, signatures: { 'a.test': { [signature]: Buffer.alloc(64, 7).toString('base64').replace(/=+$/, '') } } };
    const answer = await sendFromA([forged]);
    expect(answer.pdus[eventId].error).toMatch(/not signed by a.test/);
    expect((await eventOnB(eventId)).status).toBe(404);
  });

  it('redacts an event whose content does not match its hash', async () => {
    const { pdu, eventId } = await pduFromA({ content: { msgtype: 'm.text', body: 'original' } });
    // The signature covers the redacted form, so it still verifies; the content hash does not.
    const tampered = { ...pdu, content: { msgtype: 'm.text', body: 'changed on the way' } };
    const answer = await sendFromA([tampered]);
    expect(answer.pdus[eventId]).toEqual({});
    const seen = await eventOnB(eventId);
    expect(seen.status).toBe(200);
    expect(seen.body.content).toEqual({});
  });

  it('rejects an event its auth events do not allow (answered `{}`, as by Synapse: it was judged)', async () => {
    const { pdu, eventId } = await pduFromA({ type: 'm.room.power_levels', state_key: '', content: { users: { [botA.userId]: 100 } } });
    const answer = await sendFromA([pdu]);
    expect(answer.pdus[eventId]).toEqual({});
    expect((await eventOnB(eventId)).status).toBe(404);
    const levels = await aliceB.ok('GET', `/rooms/${encodeURIComponent(roomId)}/state/m.room.power_levels/`);
    expect(levels.users[botA.userId]).toBeUndefined();
    // Nor has it a state to give another server (Synapse: 404 too).
    for (const kind of ['state', 'state_ids']) {
      const failure = await a.services.federation.client
        .request('b.test', { method: 'GET', path: `/_matrix/federation/v1/${kind}/${encodeURIComponent(roomId)}?event_id=${encodeURIComponent(eventId)}` })
        .then(() => undefined, (err: { status?: number; errcode?: string }) => ({ status: err.status, errcode: err.errcode }));
      expect(failure).toEqual({ status: 404, errcode: 'M_NOT_FOUND' });
    }
  });

  it('soft fails an event the current state no longer allows', async () => {
    // Built on the room as A sees it before B bans the bot; sent after the ban.
    const before = await pduFromA({ content: { msgtype: 'm.text', body: 'after my ban' } });
    await aliceB.ok('POST', `/rooms/${encodeURIComponent(roomId)}/ban`, { user_id: botA.userId });
    const answer = await sendFromA([before.pdu]);
    expect(answer.pdus[before.eventId]).toEqual({});
    expect((await eventOnB(before.eventId)).status).toBe(404);
    const page = await aliceB.ok('GET', `/rooms/${encodeURIComponent(roomId)}/messages`, undefined, { dir: 'b', limit: 20 });
    expect((page.chunk as Json[]).map((event) => event.content?.body)).not.toContain('after my ban');
    await aliceB.ok('POST', `/rooms/${encodeURIComponent(roomId)}/unban`, { user_id: botA.userId });
  });
});

describe('PDUs built on events held without state', () => {
  it('an event whose parent we hold only as an outlier is placed with the state its sender gives', async () => {
    // A room of its own: the one above has events B accepted from forged PDUs that A never had,
    // and A, banned there, is refused what it lacks (Host not in room), as by Synapse.
    const roomId = await aliceB.createRoom({ preset: 'public_chat' });
    await botA.ok('POST', `/join/${encodeURIComponent(roomId)}`, {}, { server_name: 'b.test' });
    const room = (await b.services.roomCache.room(roomId))!;
    // Known on A only as part of the state it was given when it joined: no state of its own there.
    const parent = room.get('m.room.history_visibility')!;
    expect((await a.services.storage.rooms.getEvent(parent.eventId))?.outlier).toBe(1);
    const authEvents = ['m.room.create', 'm.room.power_levels'].map((type) => room.get(type)!.eventId);
    authEvents.push(room.get('m.room.member', aliceB.userId)!.eventId);
    const { pdu, eventId } = finishPdu(
      { room_id: roomId, sender: aliceB.userId, type: 'm.room.message', content: { msgtype: 'm.text', body: 'from an old fork' }, origin_server_ts: Date.now(), depth: parent.depth + 1, prev_events: [parent.eventId], auth_events: authEvents },
      room.version,
      b.services.signer,
    );
    const answer = await b.services.federation.client.request<Json>('a.test', {
      method: 'PUT',
      path: `/_matrix/federation/v1/send/fork-${++txn}`,
      body: { origin: 'b.test', origin_server_ts: Date.now(), pdus: [pdu], edus: [] },
    });
    expect(answer.pdus[eventId], JSON.stringify(answer.pdus[eventId])).toEqual({});
    const seen = await botA.request('GET', `/rooms/${encodeURIComponent(roomId)}/event/${encodeURIComponent(eventId)}`);
    expect(seen.status).toBe(200);
    expect(seen.body.content.body).toBe('from an old fork');
  });
});

describe('requests that are refused', () => {
  it('answers 401 to a request without a valid X-Matrix signature', async () => {
    const unsigned = await b.http.put('/_matrix/federation/v1/send/x1').send({ origin: 'a.test', pdus: [], edus: [] });
    expect(unsigned.status).toBe(401);
    expect(unsigned.body.errcode).toBe('M_UNAUTHORIZED');
    const forged = await b.http
      .put('/_matrix/federation/v1/send/x2')
      .set('Authorization', `X-Matrix origin="a.test",destination="b.test",key="${a.services.signer.keyId}",sig="${Buffer.alloc(64).toString('base64')}"`)
      .send({ origin: 'a.test', pdus: [], edus: [] });
    expect(forged.status).toBe(401);
  });

  it('refuses a transaction whose body claims another origin than the signature', async () => {
    const claimed = await a.services.federation.client
      .request('b.test', { method: 'PUT', path: `/_matrix/federation/v1/send/claim-${++txn}`, body: { origin: 'c.test', origin_server_ts: Date.now(), pdus: [], edus: [] } })
      .catch((err: { status?: number; errcode?: string }) => err);
    expect(claimed).toMatchObject({ status: 403, errcode: 'M_FORBIDDEN' });
  });

  it('refuses events from a server the room\u2019s ACL denies', async () => {
    const room = await aliceB.createRoom({ preset: 'public_chat' });
    await botA.ok('POST', `/join/${encodeURIComponent(room)}`, {}, { server_name: 'b.test' });
    await aliceB.setState(room, 'm.room.server_acl', '', { allow: ['*'], deny: ['a.test'], allow_ip_literals: false });
    const made = await a.services.federation.client
      .request('b.test', { method: 'GET', path: `/_matrix/federation/v1/make_leave/${encodeURIComponent(room)}/${encodeURIComponent(botA.userId)}` })
      .catch((err: { status?: number; errcode?: string }) => err);
    expect(made).toMatchObject({ status: 403, errcode: 'M_FORBIDDEN' });
  });
});

describe('outbound safety', () => {
  it('never contacts a destination in ip_range_blacklist', async () => {
    const c = await federation.start('c.test', { ip_range_blacklist: ['127.0.0.0/8'] });
    const botC = client(c.hs, await createUser(c.hs, 'bot'));
    const answer = await botC.request('POST', `/join/${encodeURIComponent(roomId)}`, {}, { server_name: 'b.test' });
    expect(answer.status).toBe(502);
    expect(answer.body.error).toMatch(/blacklisted range 127.0.0.0\/8/);
  });
});
