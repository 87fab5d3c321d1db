/**
 * Every event is a real PDU, in every room version from 1 to 12: its id is its reference hash
 * (v1/v2: `$opaque:server`, carried in the event), its content hash and this server's signature
 * verify, its auth_events are the ones the spec selects and its prev_events are the room's
 * forward extremities (v1/v2: as `[id, hashes]` pairs).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ed25519PublicKey, hasValidSignature } from '../../src/core/signed-json.js';
import { eventIdOf, hasValidContentHash, pduOf, signedForm, type Pdu } from '../../src/rooms/pdu.js';
import { knownRoomVersion, SUPPORTED_ROOM_VERSIONS } from '../../src/rooms/room-versions.js';
import { clientsFor, timelineOf, type TestClient } from '../support/client.js';
import { startTestHomeserver, type TestHomeserver } from '../support/homeserver.js';
import { expectMatrixError } from '../support/spec-validator.js';

let hs: TestHomeserver;
let alice: TestClient;
let bob: TestClient;
beforeAll(async () => {
  hs = await startTestHomeserver();
  [alice, bob] = await clientsFor(hs, 'alice', 'bob');
});
afterAll(() => hs.close());

const enc = encodeURIComponent;

async function pdusOf(roomId: string): Promise<Array<{ eventId: string; pdu: Pdu }>> {
  const version = hs.services.roomCache.peek(roomId)?.version ?? knownRoomVersion('10');
  const history = await alice.ok('GET', `/rooms/${enc(roomId)}/messages`, undefined, { dir: 'f', limit: 100 });
  const out: Array<{ eventId: string; pdu: Pdu }> = [];
  for (const clientEvent of history.chunk as Array<{ event_id: string }>) {
    const stored = await hs.services.roomReader.getEvent(clientEvent.event_id);
    out.push({ eventId: clientEvent.event_id, pdu: pduOf(stored!, version)! });
  }
  return out;
}

describe('room versions', () => {
  it('advertises 1 to 12 as stable, 10 by default, and refuses others', async () => {
    const capabilities = (await alice.ok('GET', '/capabilities')).capabilities['m.room_versions'];
    expect(capabilities.default).toBe('10');
    expect(Object.keys(capabilities.available).sort((a, b) => Number(a) - Number(b))).toEqual(['1', '2', '3', '4', '5', '6', '7', '8', '9', '10', '11', '12']);
    expect(Object.values(capabilities.available).every((stability) => stability === 'stable')).toBe(true);
    expectMatrixError(await alice.request('POST', '/createRoom', { room_version: '0' }), 400, 'M_UNSUPPORTED_ROOM_VERSION');
    expectMatrixError(await alice.request('POST', '/createRoom', { room_version: '13' }), 400, 'M_UNSUPPORTED_ROOM_VERSION');
  });

  for (const id of SUPPORTED_ROOM_VERSIONS) {
    it(`makes real PDUs in a version ${id} room`, async () => {
      const version = knownRoomVersion(id);
      const roomId = await alice.createRoom({ room_version: id, preset: 'public_chat', name: `v${id}` });
      if (version.roomIdFromCreateEvent) expect(roomId).toMatch(/^![A-Za-z0-9_-]{43}$/);
      else expect(roomId).toMatch(/^![A-Za-z]+:test\.local$/);
      await bob.join(roomId);
      const message = await bob.send(roomId, { msgtype: 'm.text', body: `hello v${id}` });
      const redaction = (await alice.ok('PUT', `/rooms/${enc(roomId)}/redact/${enc(message)}/r1`, { reason: 'test' })).event_id as string;

      const pdus = await pdusOf(roomId);
      const keys = new Map([[hs.services.signer.keyId, ed25519PublicKey(hs.services.signer.publicKey)!]]);
      const byId = new Map(pdus.map((entry) => [entry.eventId, entry.pdu]));
      const create = pdus[0]!;
      expect(create.pdu.type).toBe('m.room.create');
      if (version.roomIdFromCreateEvent) {
        expect(create.pdu.room_id).toBeUndefined();
        expect(roomId).toBe(`!${create.eventId.slice(1)}`);
      } else {
        expect(create.pdu.room_id).toBe(roomId);
      }
      expect(create.pdu.content.creator).toBe(version.v11 ? undefined : alice.userId);

      let previous: { eventId: string; pdu: Pdu } | undefined;
      const v1 = version.eventFormat === 'v1';
      // v1/v2 lists are [id, hashes] pairs; the hashes are left empty, as Synapse leaves them.
      const ids = (list: unknown[]): string[] =>
        list.map((item) => {
          if (!v1) return item as string;
          expect(item).toEqual([expect.any(String), {}]);
          return (item as [string])[0];
        });
      for (const entry of pdus) {
        const { eventId } = entry;
        const pdu = { ...entry.pdu, prev_events: ids(entry.pdu.prev_events), auth_events: ids(entry.pdu.auth_events) };
        // The id is the reference hash, in the version's alphabet (v1/v2: the event's own, ours).
        expect(eventIdOf(entry.pdu, version)).toBe(eventId);
        if (v1) expect(entry.pdu.event_id).toBe(eventId);
        else expect(entry.pdu.event_id).toBeUndefined();
        expect(eventId).toMatch(v1 ? /^\$[A-Za-z0-9_-]{18}:test\.local$/ : version.eventIdEncoding === 'base64url' ? /^\$[A-Za-z0-9_-]{43}$/ : /^\$[A-Za-z0-9+/]{43}$/);
        expect(hasValidSignature(signedForm(entry.pdu, version), 'test.local', keys)).toBe(true);
        // A redacted event is served redacted: its signature holds, its content hash no longer does.
        expect(hasValidContentHash(entry.pdu, version)).toBe(eventId !== message);
        // A line: each event follows the one before, one deeper.
        if (previous) {
          expect(pdu.prev_events).toEqual([previous.eventId]);
          expect(pdu.depth).toBe(previous.pdu.depth + 1);
        } else {
          expect(pdu.prev_events).toEqual([]);
          expect(pdu.depth).toBe(1);
        }
        previous = entry;
        // Auth events: the create event (up to v11), power levels, the sender's membership, and for
        // memberships the target's and the join rules.
        const authTypes = pdu.auth_events.map((authId) => {
          const authPdu = byId.get(authId);
          return `${authPdu?.type}|${authPdu?.state_key}`;
        });
        if (pdu.type === 'm.room.create') {
          expect(pdu.auth_events).toEqual([]);
          continue;
        }
        expect(authTypes.includes('m.room.create|')).toBe(version.createInAuthEvents);
        if (pdu.type === 'm.room.member' && pdu.state_key === bob.userId) {
          expect(authTypes).toEqual(expect.arrayContaining(['m.room.power_levels|', 'm.room.join_rules|']));
        }
        if (pdu.sender === bob.userId && pdu.type === 'm.room.message') expect(authTypes).toContain(`m.room.member|${bob.userId}`);
      }
      // Redactions: `redacts` at the top level before v11, in the content from v11 on.
      const redactionPdu = byId.get(redaction)!;
      if (version.v11) expect(redactionPdu.content.redacts).toBe(message);
      else expect(redactionPdu.redacts).toBe(message);
      // Clients see `redacts` both ways in every version.
      const seen = timelineOf(await bob.sync(), roomId).find((event) => event.event_id === redaction);
      expect(seen).toMatchObject({ redacts: message, content: { redacts: message } });
    });
  }

  it('gives v12 creators power above power levels, which cannot list them', async () => {
    const roomId = await alice.createRoom({ room_version: '12', preset: 'public_chat' });
    const levels = await alice.ok('GET', `/rooms/${enc(roomId)}/state/m.room.power_levels/`);
    expect(levels.users).toEqual({});
    await bob.join(roomId);
    // Bob made admin: still below the creator.
    await alice.setState(roomId, 'm.room.power_levels', '', { ...levels, users: { [bob.userId]: 100 } });
    expectMatrixError(await bob.request('POST', `/rooms/${enc(roomId)}/kick`, { user_id: alice.userId }), 403, 'M_FORBIDDEN');
    expectMatrixError(await alice.request('PUT', `/rooms/${enc(roomId)}/state/m.room.power_levels/`, { ...levels, users: { [alice.userId]: 100 } }), 403, 'M_FORBIDDEN');
    await alice.ok('POST', `/rooms/${enc(roomId)}/kick`, { user_id: bob.userId });
  });

  it('refuses content that is not canonical JSON from version 6 on, and takes it in version 5', async () => {
    const strict = await alice.createRoom({ room_version: '10' });
    for (const body of ['{"msgtype":"m.text","body":"x","n":1.5}', '{"msgtype":"m.text","body":"x","n":9007199254740992}']) {
      const res = await hs.http
        .put(`/_matrix/client/v3/rooms/${enc(strict)}/send/m.room.message/${Math.random()}`)
        .auth(alice.user.accessToken, { type: 'bearer' })
        .set('Content-Type', 'application/json')
        .send(body);
      expectMatrixError({ status: res.status, body: res.body }, 400, 'M_BAD_JSON');
    }
    const lenient = await alice.createRoom({ room_version: '5' });
    await alice.send(lenient, { msgtype: 'm.text', body: 'x', n: 1.5 });
  });
});
