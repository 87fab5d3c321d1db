/** End-to-end encryption keys through HTTP: upload, query, claim, device-list changes, and sync's counts. */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { unpaddedBase64 } from '../../src/core/signed-json.js';
import { client, type Json, type TestClient } from '../support/client.js';
import { CrossSigningKey, DeviceIdentity } from '../support/device-identity.js';
import { createUser, login, startTestHomeserver, type TestHomeserver } from '../support/homeserver.js';
import { expectMatchesSpec, expectMatrixError } from '../support/spec-validator.js';

let hs: TestHomeserver;
let alice: TestClient;
let bob: TestClient;
beforeEach(async () => {
  hs = await startTestHomeserver();
  alice = client(hs, await createUser(hs, 'alice'));
  bob = client(hs, await createUser(hs, 'bob'));
});
afterEach(() => hs.close());

const upload = (who: TestClient, body: Json) => hs.http.post('/_matrix/client/v3/keys/upload').auth(who.user.accessToken, { type: 'bearer' }).send(body);

describe('keys', () => {
  it('uploads identity, one-time and fallback keys signed by the device, and refuses what is not', async () => {
    const device = new DeviceIdentity(alice.userId, alice.user.deviceId);
    const first = await upload(alice, { device_keys: device.deviceKeys(), one_time_keys: device.oneTimeKeys(['AAA', 'AAB', 'AAC']) });
    expectMatchesSpec('POST', '/_matrix/client/v3/keys/upload', first);
    expect(first.body).toEqual({ one_time_key_counts: { signed_curve25519: 3 } });
    // The same again is a retry; the same id with another key is refused.
    expect((await upload(alice, { one_time_keys: device.oneTimeKeys(['AAA']) })).body.one_time_key_counts.signed_curve25519).toBe(3);
    const clash = { 'signed_curve25519:AAA': device.signed({ key: unpaddedBase64(Buffer.alloc(32, 1)) }) };
    expectMatrixError(await upload(alice, { one_time_keys: clash }), 400, 'M_INVALID_PARAM');

    const stranger = new DeviceIdentity(alice.userId, alice.user.deviceId);
    expectMatrixError(await upload(alice, { one_time_keys: stranger.oneTimeKeys(['ZZZ']) }), 400, 'M_INVALID_PARAM');
    const forged = { ...device.deviceKeys(), signatures: stranger.deviceKeys().signatures };
    expectMatrixError(await upload(alice, { device_keys: forged }), 400, 'M_INVALID_PARAM');
    const notMine = new DeviceIdentity(bob.userId, 'BOBDEVICE');
    expectMatrixError(await upload(alice, { device_keys: notMine.deviceKeys() }), 400, 'M_INVALID_PARAM');

    const fallback = await upload(alice, { fallback_keys: { 'signed_curve25519:FFF': device.signed({ key: unpaddedBase64(Buffer.alloc(32, 9)), fallback: true }) } });
    expect(fallback.status).toBe(200);
    const sync = await alice.sync();
    expect(sync.device_one_time_keys_count).toEqual({ signed_curve25519: 3 });
    expect(sync.device_unused_fallback_key_types).toEqual(['signed_curve25519']);
  });

  it('lets others query the keys and claim one-time keys, then the fallback key', async () => {
    const device = new DeviceIdentity(alice.userId, alice.user.deviceId);
    await upload(alice, { device_keys: device.deviceKeys(), one_time_keys: device.oneTimeKeys(['AAA', 'AAB']), fallback_keys: { 'signed_curve25519:FFF': device.signed({ key: 'fallbackkey', fallback: true }) } });
    await alice.ok('PUT', `/devices/${encodeURIComponent(alice.user.deviceId)}`, { display_name: 'Alice’s bot' });

    const query = await hs.http.post('/_matrix/client/v3/keys/query').auth(bob.user.accessToken, { type: 'bearer' }).send({ device_keys: { [alice.userId]: [] } });
    expectMatchesSpec('POST', '/_matrix/client/v3/keys/query', query);
    const keys = query.body.device_keys[alice.userId][alice.user.deviceId];
    expect(keys.keys[`ed25519:${alice.user.deviceId}`]).toBe(device.publicKey);
    expect(keys.signatures).toEqual(device.deviceKeys().signatures);
    expect(keys.unsigned).toEqual({ device_display_name: 'Alice’s bot' });

    const claim = () => hs.http.post('/_matrix/client/v3/keys/claim').auth(bob.user.accessToken, { type: 'bearer' }).send({ one_time_keys: { [alice.userId]: { [alice.user.deviceId]: 'signed_curve25519' } } });
    const first = await claim();
    expectMatchesSpec('POST', '/_matrix/client/v3/keys/claim', first);
    expect(Object.keys(first.body.one_time_keys[alice.userId][alice.user.deviceId])).toEqual(['signed_curve25519:AAA']);
    expect(Object.keys((await claim()).body.one_time_keys[alice.userId][alice.user.deviceId])).toEqual(['signed_curve25519:AAB']);
    // None left: the fallback key, again and again, until the device replaces it.
    expect((await claim()).body.one_time_keys[alice.userId][alice.user.deviceId]).toEqual({ 'signed_curve25519:FFF': device.signed({ key: 'fallbackkey', fallback: true }) });
    expect(Object.keys((await claim()).body.one_time_keys[alice.userId][alice.user.deviceId])).toEqual(['signed_curve25519:FFF']);
    const sync = await alice.sync();
    expect(sync.device_one_time_keys_count).toEqual({ signed_curve25519: 0 });
    expect(sync.device_unused_fallback_key_types).toEqual([]);
  });

  it('claims for several devices of a user at once: a one-time key, a fallback key, or nothing', async () => {
    const devices = [];
    for (let i = 0; i < 3; i++) {
      const token = await login(hs, 'alice', 'pw-alice');
      const whoami = await hs.http.get('/_matrix/client/v3/account/whoami').auth(token, { type: 'bearer' });
      devices.push({ token, identity: new DeviceIdentity(alice.userId, whoami.body.device_id as string) });
    }
    const [withKeys, withFallback, bare] = devices;
    const send = (token: string, body: Json) => hs.http.post('/_matrix/client/v3/keys/upload').auth(token, { type: 'bearer' }).send(body);
    await send(withKeys!.token, { device_keys: withKeys!.identity.deviceKeys(), one_time_keys: withKeys!.identity.oneTimeKeys(['BBB', 'AAA']) });
    await send(withFallback!.token, { device_keys: withFallback!.identity.deviceKeys(), fallback_keys: { 'signed_curve25519:FFF': withFallback!.identity.signed({ key: 'fallbackkey', fallback: true }) } });
    await send(bare!.token, { device_keys: bare!.identity.deviceKeys() });

    const wanted = Object.fromEntries(devices.map((d) => [d.identity.deviceId, 'signed_curve25519']));
    const claim = await hs.http.post('/_matrix/client/v3/keys/claim').auth(bob.user.accessToken, { type: 'bearer' }).send({ one_time_keys: { [alice.userId]: wanted } });
    expectMatchesSpec('POST', '/_matrix/client/v3/keys/claim', claim);
    const got = claim.body.one_time_keys[alice.userId];
    expect(Object.keys(got).sort()).toEqual([withKeys!.identity.deviceId, withFallback!.identity.deviceId].sort());
    expect(Object.keys(got[withKeys!.identity.deviceId])).toEqual(['signed_curve25519:AAA']);
    expect(Object.keys(got[withFallback!.identity.deviceId])).toEqual(['signed_curve25519:FFF']);
    const counts = await send(withKeys!.token, {});
    expect(counts.body.one_time_key_counts).toEqual({ signed_curve25519: 1 });
  });

  it('tells those who share a room when a user’s devices change, in sync and /keys/changes', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    const carol = client(hs, await createUser(hs, 'carol'));
    const bobSince = (await bob.sync()).next_batch as string;
    const carolSince = (await carol.sync()).next_batch as string;

    // Alice logs in a second device and uploads its keys.
    const secondToken = await login(hs, 'alice', 'pw-alice');
    const secondDevice = (await hs.http.get('/_matrix/client/v3/account/whoami').auth(secondToken, { type: 'bearer' })).body.device_id as string;
    const second = new DeviceIdentity(alice.userId, secondDevice);
    const uploaded = await hs.http.post('/_matrix/client/v3/keys/upload').auth(secondToken, { type: 'bearer' }).send({ device_keys: second.deviceKeys() });
    expect(uploaded.status).toBe(200);

    const bobSync = await bob.sync({ since: bobSince });
    expect(bobSync.device_lists).toEqual({ changed: [alice.userId], left: [] });
    const changes = await bob.ok('GET', '/keys/changes', undefined, { from: bobSince, to: bobSync.next_batch });
    expect(changes).toEqual({ changed: [alice.userId], left: [] });
    // Carol shares no room with Alice: nothing for her.
    expect((await carol.sync({ since: carolSince })).device_lists?.changed ?? []).toEqual([]);

    // The device is deleted: its keys go, and Bob is told again.
    await hs.http.post('/_matrix/client/v3/logout').auth(secondToken, { type: 'bearer' }).send({});
    const after = await bob.sync({ since: bobSync.next_batch });
    expect(after.device_lists.changed).toEqual([alice.userId]);
    const query = await bob.ok('POST', '/keys/query', { device_keys: { [alice.userId]: [] } });
    expect(query.device_keys[alice.userId]).toEqual({});
  });

  it('says which server it could not ask, and refuses malformed requests', async () => {
    const query = await bob.ok('POST', '/keys/query', { device_keys: { '@someone:elsewhere.example': [] } });
    expect(query.failures).toEqual({ 'elsewhere.example': expect.objectContaining({ status: expect.any(Number), message: expect.any(String) }) });
    expectMatrixError(await hs.http.post('/_matrix/client/v3/keys/upload').auth(bob.user.accessToken, { type: 'bearer' }).send({ one_time_keys: { nocolon: 'x' } }), 400, 'M_INVALID_PARAM');
    expectMatrixError(await hs.http.get('/_matrix/client/v3/keys/changes?from=x&to=y').auth(bob.user.accessToken, { type: 'bearer' }), 400, 'M_INVALID_PARAM');
  });

  it('keeps cross-signing keys: the first upload without the password, a replacement with it', async () => {
    const master = new CrossSigningKey(alice.userId, 'master');
    const selfSigning = new CrossSigningKey(alice.userId, 'self_signing');
    const userSigning = new CrossSigningKey(alice.userId, 'user_signing');
    const uploadSigning = (body: Json) => hs.http.post('/_matrix/client/v3/keys/device_signing/upload').auth(alice.user.accessToken, { type: 'bearer' }).send(body);
    const unsigned = await uploadSigning({ master_key: master.object(), self_signing_key: selfSigning.object() });
    expectMatrixError(unsigned, 400, 'M_INVALID_SIGNATURE');
    const first = await uploadSigning({ master_key: master.object(), self_signing_key: selfSigning.object(master), user_signing_key: userSigning.object(master) });
    expectMatchesSpec('POST', '/_matrix/client/v3/keys/device_signing/upload', first);
    expect(first.status).toBe(200);

    const own = await alice.ok('POST', '/keys/query', { device_keys: { [alice.userId]: [] } });
    expect(own.master_keys[alice.userId].keys).toEqual({ [master.keyId]: master.publicKey });
    expect(own.self_signing_keys[alice.userId].usage).toEqual(['self_signing']);
    expect(own.user_signing_keys[alice.userId].usage).toEqual(['user_signing']);
    const seenByBob = await bob.ok('POST', '/keys/query', { device_keys: { [alice.userId]: [] } });
    expect(Object.keys(seenByBob.master_keys)).toEqual([alice.userId]);
    expect(seenByBob.user_signing_keys).toEqual({});

    // The same keys again need nothing (also under the unstable prefix Synapse still serves); new ones need the password.
    expect((await uploadSigning({ master_key: master.object(), self_signing_key: selfSigning.object(master) })).status).toBe(200);
    const unstable = await hs.http.post('/_matrix/client/unstable/keys/device_signing/upload').auth(alice.user.accessToken, { type: 'bearer' }).send({ master_key: master.object() });
    expect(unstable.status).toBe(200);
    const newMaster = new CrossSigningKey(alice.userId, 'master');
    const replace = { master_key: newMaster.object(), self_signing_key: selfSigning.object(newMaster) };
    const challenge = await uploadSigning(replace);
    expect(challenge.status).toBe(401);
    expect(challenge.body.flows).toEqual([{ stages: ['m.login.password'] }]);
    const replaced = await uploadSigning({ ...replace, auth: { type: 'm.login.password', session: challenge.body.session, identifier: { type: 'm.id.user', user: alice.userId }, password: 'pw-alice' } });
    expect(replaced.status).toBe(200);
    expect((await alice.ok('POST', '/keys/query', { device_keys: { [alice.userId]: [] } })).master_keys[alice.userId].keys).toEqual({ [newMaster.keyId]: newMaster.publicKey });
  });

  it('checks and keeps signatures: of one’s own device by the self-signing key, of another’s master key by the user-signing key', async () => {
    const device = new DeviceIdentity(alice.userId, alice.user.deviceId);
    await upload(alice, { device_keys: device.deviceKeys() });
    const master = new CrossSigningKey(alice.userId, 'master');
    const selfSigning = new CrossSigningKey(alice.userId, 'self_signing');
    const userSigning = new CrossSigningKey(alice.userId, 'user_signing');
    await alice.ok('POST', '/keys/device_signing/upload', { master_key: master.object(), self_signing_key: selfSigning.object(master), user_signing_key: userSigning.object(master) });
    const bobMaster = new CrossSigningKey(bob.userId, 'master');
    await bob.ok('POST', '/keys/device_signing/upload', { master_key: bobMaster.object() });

    const signedDevice = selfSigning.sign(device.deviceKeys());
    const signedBob = userSigning.sign(bobMaster.object());
    const forged = new CrossSigningKey(alice.userId, 'self_signing').sign(device.deviceKeys());
    const answer = await hs.http
      .post('/_matrix/client/v3/keys/signatures/upload')
      .auth(alice.user.accessToken, { type: 'bearer' })
      .send({ [alice.userId]: { [alice.user.deviceId]: signedDevice }, [bob.userId]: { [bobMaster.publicKey]: signedBob } });
    expectMatchesSpec('POST', '/_matrix/client/v3/keys/signatures/upload', answer);
    expect(answer.body.failures).toEqual({});
    const bad = await alice.ok('POST', '/keys/signatures/upload', { [alice.userId]: { [alice.user.deviceId]: forged } });
    expect(bad.failures[alice.userId][alice.user.deviceId].errcode).toBe('M_INVALID_SIGNATURE');

    const byBob = await bob.ok('POST', '/keys/query', { device_keys: { [alice.userId]: [], [bob.userId]: [] } });
    expect(byBob.device_keys[alice.userId][alice.user.deviceId].signatures[alice.userId][selfSigning.keyId]).toBe(signedDevice.signatures[alice.userId][selfSigning.keyId]);
    // Alice's signature of Bob's master key is shown to Alice, not to Bob.
    expect(byBob.master_keys[bob.userId].signatures?.[alice.userId]).toBeUndefined();
    const byAlice = await alice.ok('POST', '/keys/query', { device_keys: { [bob.userId]: [] } });
    expect(byAlice.master_keys[bob.userId].signatures[alice.userId][userSigning.keyId]).toBe(signedBob.signatures[alice.userId][userSigning.keyId]);
  });

  it('tells only the user of a new user-signing key: its roommates are not told (as Synapse)', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    const master = new CrossSigningKey(alice.userId, 'master');
    await alice.ok('POST', '/keys/device_signing/upload', { master_key: master.object() });
    const aliceSince = (await alice.sync()).next_batch as string;
    const bobSince = (await bob.sync()).next_batch as string;
    const userSigning = new CrossSigningKey(alice.userId, 'user_signing');
    const challenge = await hs.http.post('/_matrix/client/v3/keys/device_signing/upload').auth(alice.user.accessToken, { type: 'bearer' }).send({ user_signing_key: userSigning.object(master) });
    expect(challenge.status).toBe(401);
    const auth = { type: 'm.login.password', session: challenge.body.session, identifier: { type: 'm.id.user', user: alice.userId }, password: 'pw-alice' };
    await alice.ok('POST', '/keys/device_signing/upload', { user_signing_key: userSigning.object(master), auth });
    const aliceSync = await alice.sync({ since: aliceSince });
    expect(aliceSync.device_lists.changed).toEqual([alice.userId]);
    expect((await alice.ok('GET', '/keys/changes', undefined, { from: aliceSince, to: aliceSync.next_batch })).changed).toEqual([alice.userId]);
    const bobSync = await bob.sync({ since: bobSince });
    expect(bobSync.device_lists.changed).toEqual([]);
    expect((await bob.ok('GET', '/keys/changes', undefined, { from: bobSince, to: bobSync.next_batch })).changed).toEqual([]);
  });

  it('tells the signer alone that the users whose master keys they signed changed, shared room or not, and shows the signatures to the signer alone', async () => {
    // SyTest's 'Changing user-signing key notifies local users': Alice signs Bob's master key and
    // waits for Bob in her device_lists.changed. Carol shares the room; Dave shares no room with Alice.
    const carol = client(hs, await createUser(hs, 'carol'));
    const dave = client(hs, await createUser(hs, 'dave'));
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    await carol.join(roomId);
    const master = new CrossSigningKey(alice.userId, 'master');
    const userSigning = new CrossSigningKey(alice.userId, 'user_signing');
    await alice.ok('POST', '/keys/device_signing/upload', { master_key: master.object(), user_signing_key: userSigning.object(master) });
    const bobMaster = new CrossSigningKey(bob.userId, 'master');
    await bob.ok('POST', '/keys/device_signing/upload', { master_key: bobMaster.object() });
    const daveMaster = new CrossSigningKey(dave.userId, 'master');
    await dave.ok('POST', '/keys/device_signing/upload', { master_key: daveMaster.object() });
    const since = new Map<TestClient, string>();
    for (const who of [alice, bob, carol, dave]) since.set(who, (await who.sync()).next_batch as string);

    const signedBob = userSigning.sign(bobMaster.object());
    const signedDave = userSigning.sign(daveMaster.object());
    const answer = await alice.ok('POST', '/keys/signatures/upload', { [bob.userId]: { [bobMaster.publicKey]: signedBob }, [dave.userId]: { [daveMaster.publicKey]: signedDave } });
    expect(answer.failures).toEqual({});

    // Alice: Bob and Dave changed (her own keys did not); in sync and in /keys/changes.
    const aliceSync = await alice.sync({ since: since.get(alice)! });
    expect(aliceSync.device_lists).toEqual({ changed: [bob.userId, dave.userId].sort(), left: [] });
    expect((await alice.ok('GET', '/keys/changes', undefined, { from: since.get(alice)!, to: aliceSync.next_batch })).changed).toEqual([bob.userId, dave.userId].sort());
    // Nobody else is told: not the signed users, not Alice's roommates.
    for (const who of [bob, carol, dave]) {
      const sync = await who.sync({ since: since.get(who)!, timeout: 0 });
      expect(sync.device_lists?.changed ?? []).toEqual([]);
      expect((await who.ok('GET', '/keys/changes', undefined, { from: since.get(who)!, to: sync.next_batch })).changed).toEqual([]);
    }

    // Alice sees her signatures on both master keys; Bob, Carol and Dave see none of them.
    const byAlice = await alice.ok('POST', '/keys/query', { device_keys: { [bob.userId]: [], [dave.userId]: [] } });
    expect(byAlice.master_keys[bob.userId].signatures[alice.userId]).toEqual({ [userSigning.keyId]: signedBob.signatures[alice.userId][userSigning.keyId] });
    expect(byAlice.master_keys[dave.userId].signatures[alice.userId]).toEqual({ [userSigning.keyId]: signedDave.signatures[alice.userId][userSigning.keyId] });
    for (const who of [bob, carol, dave]) {
      const query = await who.ok('POST', '/keys/query', { device_keys: { [bob.userId]: [], [dave.userId]: [] } });
      expect(query.master_keys[bob.userId].signatures?.[alice.userId]).toBeUndefined();
      expect(query.master_keys[dave.userId].signatures?.[alice.userId]).toBeUndefined();
    }

    // The same signature again changes nothing: nobody is told.
    const again = await alice.ok('POST', '/keys/signatures/upload', { [bob.userId]: { [bobMaster.publicKey]: signedBob } });
    expect(again.failures).toEqual({});
    const afterAgain = await alice.sync({ since: aliceSync.next_batch, timeout: 0 });
    expect(afterAgain.device_lists?.changed ?? []).toEqual([]);
  });

  it('shows the signer no signature of a master key the user has replaced since', async () => {
    const master = new CrossSigningKey(alice.userId, 'master');
    const userSigning = new CrossSigningKey(alice.userId, 'user_signing');
    await alice.ok('POST', '/keys/device_signing/upload', { master_key: master.object(), user_signing_key: userSigning.object(master) });
    const bobMaster = new CrossSigningKey(bob.userId, 'master');
    await bob.ok('POST', '/keys/device_signing/upload', { master_key: bobMaster.object() });
    await alice.ok('POST', '/keys/signatures/upload', { [bob.userId]: { [bobMaster.publicKey]: userSigning.sign(bobMaster.object()) } });

    const newMaster = new CrossSigningKey(bob.userId, 'master');
    const challenge = await hs.http.post('/_matrix/client/v3/keys/device_signing/upload').auth(bob.user.accessToken, { type: 'bearer' }).send({ master_key: newMaster.object() });
    const auth = { type: 'm.login.password', session: challenge.body.session, identifier: { type: 'm.id.user', user: bob.userId }, password: 'pw-bob' };
    await bob.ok('POST', '/keys/device_signing/upload', { master_key: newMaster.object(), auth });

    const byAlice = await alice.ok('POST', '/keys/query', { device_keys: { [bob.userId]: [] } });
    expect(byAlice.master_keys[bob.userId].keys).toEqual({ [newMaster.keyId]: newMaster.publicKey });
    expect(byAlice.master_keys[bob.userId].signatures?.[alice.userId]).toBeUndefined();
  });

  it('counts a new login, a rename and a deleted device as changes, keys or not, in sync and /keys/changes', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    const bearer = { type: 'bearer' as const };
    const changedSince = async (since: string): Promise<{ next: string; changed: string[]; keysChanged: string[] }> => {
      const sync = await bob.sync({ since });
      const changes = await bob.ok('GET', '/keys/changes', undefined, { from: since, to: sync.next_batch });
      return { next: sync.next_batch as string, changed: sync.device_lists.changed, keysChanged: changes.changed };
    };
    let since = (await bob.sync()).next_batch as string;

    // A login on a new device (it has uploaded no keys).
    const phoneToken = await login(hs, 'alice', 'pw-alice');
    const phone = (await hs.http.get('/_matrix/client/v3/account/whoami').auth(phoneToken, bearer)).body.device_id as string;
    let step = await changedSince(since);
    expect(step.changed).toEqual([alice.userId]);
    expect(step.keysChanged).toEqual([alice.userId]);
    since = step.next;
    // Nothing more: a sync after it says nothing.
    expect((await bob.sync({ since })).device_lists.changed).toEqual([]);

    // A rename (Synapse counts it); the same name again is no change.
    expect((await hs.http.put(`/_matrix/client/v3/devices/${phone}`).auth(alice.user.accessToken, bearer).send({ display_name: 'Phone' })).status).toBe(200);
    step = await changedSince(since);
    expect(step.changed).toEqual([alice.userId]);
    since = step.next;
    expect((await hs.http.put(`/_matrix/client/v3/devices/${phone}`).auth(alice.user.accessToken, bearer).send({ display_name: 'Phone' })).status).toBe(200);
    expect((await bob.sync({ since })).device_lists.changed).toEqual([]);

    // The device deleted (a logout), though it had no keys.
    expect((await hs.http.post('/_matrix/client/v3/logout').auth(phoneToken, bearer).send({})).status).toBe(200);
    step = await changedSince(since);
    expect(step.changed).toEqual([alice.userId]);
    expect(step.keysChanged).toEqual([alice.userId]);
  });

  it('names the users who join a shared room, and the members of a room joined, in sync and /keys/changes', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    const aliceSince = (await alice.sync()).next_batch as string;
    const bobSince = (await bob.sync()).next_batch as string;
    await bob.join(roomId);
    const aliceSync = await alice.sync({ since: aliceSince });
    expect(aliceSync.device_lists.changed).toEqual([bob.userId]);
    expect((await alice.ok('GET', '/keys/changes', undefined, { from: aliceSince, to: aliceSync.next_batch })).changed).toEqual([bob.userId]);
    // Bob joined: Alice's devices are new to him.
    const bobSync = await bob.sync({ since: bobSince });
    expect(bobSync.device_lists.changed).toEqual([alice.userId]);
    expect((await bob.ok('GET', '/keys/changes', undefined, { from: bobSince, to: bobSync.next_batch })).changed).toEqual([alice.userId]);
    // Someone who shares no room is never named.
    const carol = client(hs, await createUser(hs, 'carol'));
    const carolSince = (await carol.sync()).next_batch as string;
    await bob.join(await alice.createRoom({ preset: 'public_chat' }));
    expect((await carol.sync({ since: carolSince })).device_lists.changed).toEqual([]);
  });

  it('says in device_lists.left who no longer shares a room', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    const other = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    await bob.join(other);
    const aliceSince = (await alice.sync()).next_batch as string;
    const bobSince = (await bob.sync()).next_batch as string;
    await bob.ok('POST', `/rooms/${encodeURIComponent(roomId)}/leave`, {});
    // Still in another room together: nobody has left.
    expect((await alice.sync({ since: aliceSince })).device_lists.left).toEqual([]);
    await bob.ok('POST', `/rooms/${encodeURIComponent(other)}/leave`, {});
    const aliceNow = await alice.sync({ since: aliceSince });
    expect(aliceNow.device_lists.left).toEqual([bob.userId]);
    const bobNow = await bob.sync({ since: bobSince });
    expect(bobNow.device_lists.left).toEqual([alice.userId]);
    // /keys/changes says the same between the same tokens.
    const changes = await alice.request('GET', '/keys/changes', undefined, { from: aliceSince, to: aliceNow.next_batch });
    expectMatchesSpec('GET', '/_matrix/client/v3/keys/changes', changes);
    expect(changes.body.left).toEqual([bob.userId]);
    expect((await bob.ok('GET', '/keys/changes', undefined, { from: bobSince, to: bobNow.next_batch })).left).toEqual([alice.userId]);
  });

  it('refuses keys that are not canonical JSON (a float cannot be signed) with 400, never a 500', async () => {
    const device = new DeviceIdentity(alice.userId, alice.user.deviceId);
    const signature = unpaddedBase64(Buffer.alloc(64, 1));
    const floaty = { ...device.deviceKeys(), extra: 1.5, signatures: { [alice.userId]: { [`ed25519:${alice.user.deviceId}`]: signature } } };
    expectMatrixError(await upload(alice, { device_keys: floaty }), 400, 'M_BAD_JSON');
    await upload(alice, { device_keys: device.deviceKeys() });
    const floatyKey = { key: 'abc', weight: 0.5, signatures: { [alice.userId]: { [`ed25519:${alice.user.deviceId}`]: signature } } };
    expectMatrixError(await upload(alice, { one_time_keys: { 'signed_curve25519:F1': floatyKey } }), 400, 'M_BAD_JSON');

    const master = new CrossSigningKey(alice.userId, 'master');
    const selfSigning = { ...new CrossSigningKey(alice.userId, 'self_signing').object(), extra: 0.1, signatures: { [alice.userId]: { [master.keyId]: signature } } };
    const uploadSigning = await hs.http.post('/_matrix/client/v3/keys/device_signing/upload').auth(alice.user.accessToken, { type: 'bearer' }).send({ master_key: master.object(), self_signing_key: selfSigning });
    expectMatrixError(uploadSigning, 400, 'M_BAD_JSON');
    const signatures = await alice.ok('POST', '/keys/signatures/upload', { [alice.userId]: { [alice.user.deviceId]: floaty } });
    expect(signatures.failures[alice.userId][alice.user.deviceId].errcode).toBe('M_BAD_JSON');
  });
});
