/**
 * Rooms of versions 1 and 2 through the client API, on a file database: created, used, redacted,
 * and still the same PDUs (ids, pairs, signatures) after a restart; upgraded to and from v1.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ed25519PublicKey, hasValidSignature } from '../../src/core/signed-json.js';
import { hasValidContentHash, pduOf, signedForm } from '../../src/rooms/pdu.js';
import { knownRoomVersion } from '../../src/rooms/room-versions.js';
import { client, type TestClient } from '../support/client.js';
import { createUser, startTestHomeserver, type TestHomeserver } from '../support/homeserver.js';
import { expectMatrixError } from '../support/spec-validator.js';

const enc = encodeURIComponent;

describe('room versions 1 and 2 on a file database', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'bhs-rv1-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it.each(['1', '2'])('a version %s room keeps its events, ids and signatures across a restart', async (versionId) => {
    const overrides = { database: { path: join(dir, 'homeserver.db') } };
    let hs: TestHomeserver = await startTestHomeserver(overrides);
    const aliceUser = await createUser(hs, 'alice');
    const bobUser = await createUser(hs, 'bob');
    let alice: TestClient = client(hs, aliceUser);
    let bob: TestClient = client(hs, bobUser);
    const roomId = await alice.createRoom({ room_version: versionId, preset: 'public_chat', name: 'old' });
    expect((await alice.ok('GET', `/rooms/${enc(roomId)}/state/m.room.create/`)).room_version).toBe(versionId);
    await bob.join(roomId);
    const message = await bob.send(roomId, { msgtype: 'm.text', body: 'kept' });
    const gone = await bob.send(roomId, { msgtype: 'm.text', body: 'to redact' });
    // Bob may redact his own event; not Alice's (no redact level), the auth rules of v1 say why.
    await bob.ok('PUT', `/rooms/${enc(roomId)}/redact/${enc(gone)}/r1`, {});
    const alicesMessage = await alice.send(roomId, { msgtype: 'm.text', body: 'mine' });
    expectMatrixError(await bob.request('PUT', `/rooms/${enc(roomId)}/redact/${enc(alicesMessage)}/r2`, {}), 403, 'M_FORBIDDEN');
    const pdusBefore = await Promise.all([message, gone].map(async (id) => pduOf((await hs.services.roomReader.getEvent(id))!, knownRoomVersion(versionId))));
    await hs.close();

    hs = await startTestHomeserver(overrides);
    alice = client(hs, aliceUser);
    bob = client(hs, bobUser);
    const version = knownRoomVersion(versionId);
    const keys = new Map([[hs.services.signer.keyId, ed25519PublicKey(hs.services.signer.publicKey)!]]);
    const pdusAfter = await Promise.all([message, gone].map(async (id) => pduOf((await hs.services.roomReader.getEvent(id))!, version)));
    expect(pdusAfter).toEqual(pdusBefore);
    for (const [index, pdu] of pdusAfter.entries()) {
      expect(pdu!.event_id).toBe([message, gone][index]);
      expect(hasValidSignature(signedForm(pdu!, version), 'test.local', keys)).toBe(true);
      expect(hasValidContentHash(pdu!, version)).toBe(index === 0);
    }
    expect((await bob.ok('GET', `/rooms/${enc(roomId)}/event/${enc(message)}`)).content.body).toBe('kept');
    expect((await bob.ok('GET', `/rooms/${enc(roomId)}/event/${enc(gone)}`)).content).toEqual({});
    const after = await alice.send(roomId, { msgtype: 'm.text', body: 'after the restart' });
    const pdu = pduOf((await hs.services.roomReader.getEvent(after))!, version)!;
    expect(pdu.prev_events).toEqual([[alicesMessage, {}]]);
    await hs.close();
  });
});

describe('upgrading to and from room version 1', () => {
  let hs: TestHomeserver;
  afterEach(() => hs?.close());

  it('upgrades a v1 room to v10 and a v10 room to v1', async () => {
    hs = await startTestHomeserver();
    const alice = client(hs, await createUser(hs, 'alice'));
    const old = await alice.createRoom({ room_version: '1', name: 'one' });
    const newer = (await alice.ok('POST', `/rooms/${enc(old)}/upgrade`, { new_version: '10' })).replacement_room as string;
    expect(await alice.ok('GET', `/rooms/${enc(newer)}/state/m.room.create/`)).toMatchObject({ room_version: '10', predecessor: { room_id: old } });
    expect((await alice.ok('GET', `/rooms/${enc(newer)}/state/m.room.name/`)).name).toBe('one');
    const back = (await alice.ok('POST', `/rooms/${enc(newer)}/upgrade`, { new_version: '1' })).replacement_room as string;
    expect((await alice.ok('GET', `/rooms/${enc(back)}/state/m.room.create/`)).room_version).toBe('1');
    await alice.send(back, { msgtype: 'm.text', body: 'v1 again' });
  });
});
