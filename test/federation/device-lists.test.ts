/**
 * Device lists across servers: A's m.device_list_update EDUs reach B in order, each naming the
 * one before (prev_id); B applies them one by one, resyncs the whole list (GET /user/devices)
 * when one went missing, and tells its users in sync's device_lists; a user of A who leaves the
 * last shared room is in device_lists.left, and B drops A's later updates about them.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { client, type Json, type TestClient } from '../support/client.js';
import { CrossSigningKey, DeviceIdentity } from '../support/device-identity.js';
import { createUser, startFederation, type Federation, type FederatedServer } from '../support/federation.js';
import { login } from '../support/homeserver.js';
import type { JsonObject } from '../../src/rooms/events.js';
import { MAX_REMOTE_DEVICES_PER_USER } from '../../src/e2e/keys-service.js';

let federation: Federation;
let a: FederatedServer;
let b: FederatedServer;
let botA: TestClient;
let aliceB: TestClient;
let roomId: string;
/** Every m.device_list_update B received, and how it was handled. */
const received: JsonObject[] = [];
/** Set to drop the next update B receives (as if it were lost). */
let dropNext = false;
let resyncs = 0;
let queries = 0;

beforeAll(async () => {
  federation = await startFederation(['a.test', 'b.test']);
  a = federation.servers.get('a.test')!;
  b = federation.servers.get('b.test')!;
  botA = client(a.hs, await createUser(a.hs, 'bot'));
  aliceB = client(b.hs, await createUser(b.hs, 'alice'));
  const keys = b.services.keys;
  const receive = keys.receiveDeviceListUpdate.bind(keys);
  keys.receiveDeviceListUpdate = async (origin, content) => {
    received.push(content);
    if (dropNext) {
      dropNext = false;
      return;
    }
    await receive(origin, content);
  };
  const remote = keys['remote']!;
  const devices = remote.devices!.bind(remote);
  remote.devices = async (...args) => {
    resyncs++;
    return devices(...args);
  };
  const query = remote.query.bind(remote);
  remote.query = async (...args) => {
    queries++;
    return query(...args);
  };
  roomId = await botA.createRoom({ preset: 'public_chat' });
  await aliceB.ok('POST', `/join/${encodeURIComponent(roomId)}`, {}, { server_name: 'a.test' });
});
afterAll(() => federation?.close());

/** Waits until B has received `count` updates and handled them. */
async function receivedUpTo(count: number): Promise<JsonObject[]> {
  for (const deadline = Date.now() + 10_000; received.length < count; ) {
    if (Date.now() > deadline) throw new Error(`B received ${received.length} updates, not ${count}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return received.slice(0, count);
}

async function syncUntilChanged(who: TestClient, userId: string, list: 'changed' | 'left' = 'changed'): Promise<Json> {
  return who.syncUntil((sync) => (((sync.device_lists?.[list] as string[] | undefined) ?? []).includes(userId) ? sync : undefined));
}

describe('device lists across servers', () => {
  it('sends each change as an update naming the one before, and B applies them in order', async () => {
    await aliceB.syncUntil(() => true);
    const before = received.length;
    // A new device with keys: B is told of the device, then of its keys.
    const phoneToken = await login(a.hs, 'bot', 'pw-bot');
    const phone = (await a.http.get('/_matrix/client/v3/account/whoami').auth(phoneToken, { type: 'bearer' })).body.device_id as string;
    const identity = new DeviceIdentity(botA.userId, phone);
    expect((await a.http.post('/_matrix/client/v3/keys/upload').auth(phoneToken, { type: 'bearer' }).send({ device_keys: identity.deviceKeys() })).status).toBe(200);
    await a.http.put(`/_matrix/client/v3/devices/${phone}`).auth(phoneToken, { type: 'bearer' }).send({ display_name: 'Bot phone' });
    const updates = (await receivedUpTo(before + 3)).slice(before);
    expect(updates.map((u) => u.device_id)).toEqual([phone, phone, phone]);
    expect(updates[0]!.keys).toBeUndefined();
    expect((updates[1]!.keys as JsonObject).device_id).toBe(phone);
    expect(updates[2]!.device_display_name).toBe('Bot phone');
    for (let i = 1; i < updates.length; i++) {
      expect(updates[i]!.prev_id).toEqual([updates[i - 1]!.stream_id]);
      expect(updates[i]!.stream_id as number).toBeGreaterThan(updates[i - 1]!.stream_id as number);
    }
    await syncUntilChanged(aliceB, botA.userId);
    // In order: B applied each, fetching nothing, and now holds the last stream_id.
    await expect.poll(() => b.services.storage.e2e.deviceListStreamId(botA.userId)).toBe(updates[2]!.stream_id);
    const resyncsBefore = resyncs;
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(resyncs).toBe(resyncsBefore);
    const query = await aliceB.ok('POST', '/keys/query', { device_keys: { [botA.userId]: [] } });
    expect(query.device_keys[botA.userId][phone].keys[`ed25519:${phone}`]).toBe(identity.publicKey);
  });

  it('resyncs the whole list from A when an update went missing', async () => {
    await a.http.put(`/_matrix/client/v3/devices/${botA.user.deviceId}`).auth(botA.user.accessToken, { type: 'bearer' }).send({ display_name: 'first' });
    await expect.poll(() => received.some((u) => u.device_display_name === 'first')).toBe(true);
    const before = received.length;
    dropNext = true;
    await a.http.put(`/_matrix/client/v3/devices/${botA.user.deviceId}`).auth(botA.user.accessToken, { type: 'bearer' }).send({ display_name: 'lost' });
    await receivedUpTo(before + 1);
    const resyncsBefore = resyncs;
    // The next one names the lost one as prev_id: B cannot apply it, and fetches the list.
    const renewed = new DeviceIdentity(botA.userId, botA.user.deviceId);
    await botA.ok('POST', '/keys/upload', { device_keys: renewed.deviceKeys() });
    const [, next] = (await receivedUpTo(before + 2)).slice(before);
    expect(next!.prev_id).toEqual([received[before]!.stream_id]);
    await expect.poll(() => resyncs).toBe(resyncsBefore + 1);
    await syncUntilChanged(aliceB, botA.userId);
    await expect.poll(() => b.services.storage.e2e.deviceListStreamId(botA.userId)).toBe(next!.stream_id);
    // The resync's answer serves the next query: the new keys and the name, without asking A again.
    const queriesBefore = queries;
    const query = await aliceB.ok('POST', '/keys/query', { device_keys: { [botA.userId]: [botA.user.deviceId] } });
    expect(query.device_keys[botA.userId][botA.user.deviceId].keys[`ed25519:${botA.user.deviceId}`]).toBe(renewed.publicKey);
    expect(query.device_keys[botA.userId][botA.user.deviceId].unsigned).toEqual({ device_display_name: 'lost' });
    expect(queries).toBe(queriesBefore);
  });

  it('refuses updates another server sends about A’s users, and bounds what a resync keeps', async () => {
    const resyncsBefore = resyncs;
    const position = await b.services.storage.e2e.deviceListStreamId(botA.userId);
    await b.services.keys.receiveDeviceListUpdate('c.test', { user_id: botA.userId, device_id: 'X', stream_id: 1e9, prev_id: [] });
    await b.services.keys.receiveDeviceListUpdate('a.test', { user_id: botA.userId, device_id: 'X', stream_id: 'nine', prev_id: [] });
    expect(await b.services.storage.e2e.deviceListStreamId(botA.userId)).toBe(position);
    expect(resyncs).toBe(resyncsBefore);

    // A resync answered with more devices than anyone has: only the first MAX_REMOTE_DEVICES_PER_USER are kept.
    const remote = b.services.keys['remote']!;
    const devices = remote.devices!;
    const many = Array.from({ length: MAX_REMOTE_DEVICES_PER_USER + 500 }, (_, i) => {
      const id = new DeviceIdentity(botA.userId, `D${i}`);
      return { device_id: id.deviceId, keys: id.deviceKeys() };
    });
    remote.devices = async () => {
      resyncs++;
      return { user_id: botA.userId, stream_id: 5e8, devices: many };
    };
    try {
      await b.services.keys.receiveDeviceListUpdate('a.test', { user_id: botA.userId, device_id: 'X', stream_id: 4e8, prev_id: [3e8] });
      await expect.poll(() => resyncs).toBe(resyncsBefore + 1);
      await expect.poll(() => b.services.storage.e2e.deviceListStreamId(botA.userId)).toBe(5e8);
      const query = await aliceB.ok('POST', '/keys/query', { device_keys: { [botA.userId]: [] } });
      expect(Object.keys(query.device_keys[botA.userId])).toHaveLength(MAX_REMOTE_DEVICES_PER_USER);
    } finally {
      remote.devices = devices;
      // Back to where A's real updates left B.
      await b.services.storage.e2e.setDeviceListStreamId(botA.userId, position!);
      b.services.keys.forgetRemoteKeys(botA.userId);
    }
  });

  it('sends a device signed by the self-signing key as an update with its keys, and a new master key as m.signing_key_update', async () => {
    const device = new DeviceIdentity(botA.userId, botA.user.deviceId);
    await botA.ok('POST', '/keys/upload', { device_keys: device.deviceKeys() });
    const master = new CrossSigningKey(botA.userId, 'master');
    const selfSigning = new CrossSigningKey(botA.userId, 'self_signing');
    const keys = b.services.keys;
    const signingUpdates: JsonObject[] = [];
    const receiveSigning = keys.receiveSigningKeyUpdate.bind(keys);
    keys.receiveSigningKeyUpdate = async (origin, content) => {
      signingUpdates.push(content);
      await receiveSigning(origin, content);
    };
    await botA.ok('POST', '/keys/device_signing/upload', { master_key: master.object(), self_signing_key: selfSigning.object(master) });
    await expect.poll(() => signingUpdates.length).toBe(1);
    expect((signingUpdates[0]!.master_key as JsonObject).keys).toEqual({ [master.keyId]: master.publicKey });
    const before = received.length;
    const signed = selfSigning.sign(device.deviceKeys());
    await botA.ok('POST', '/keys/signatures/upload', { [botA.userId]: { [botA.user.deviceId]: signed } });
    const [update] = (await receivedUpTo(before + 1)).slice(before);
    expect(((update!.keys as JsonObject).signatures as Record<string, Record<string, string>>)[botA.userId]![selfSigning.keyId]).toBe(signed.signatures[botA.userId][selfSigning.keyId]);
    // Applied in order: B asks A for the keys, and hands on the signature.
    await expect.poll(() => b.services.storage.e2e.deviceListStreamId(botA.userId)).toBe(update!.stream_id);
    const query = await aliceB.ok('POST', '/keys/query', { device_keys: { [botA.userId]: [botA.user.deviceId] } });
    expect(query.device_keys[botA.userId][botA.user.deviceId].signatures[botA.userId][selfSigning.keyId]).toBe(signed.signatures[botA.userId][selfSigning.keyId]);
    expect(query.master_keys[botA.userId].keys).toEqual({ [master.keyId]: master.publicKey });
  });

  it('tells other servers nothing of a user-signing key or of a signature of another user’s master key: both are the signer’s alone', async () => {
    const keys = b.services.keys;
    const signingUpdates: JsonObject[] = [];
    const receiveSigning = keys.receiveSigningKeyUpdate;
    keys.receiveSigningKeyUpdate = async (origin, content) => {
      signingUpdates.push(content);
      await receiveSigning.call(keys, origin, content);
    };
    try {
      const carolA = client(a.hs, await createUser(a.hs, 'carol'));
      const carolMaster = new CrossSigningKey(carolA.userId, 'master');
      await carolA.ok('POST', '/keys/device_signing/upload', { master_key: carolMaster.object() });
      const daveA = client(a.hs, await createUser(a.hs, 'dave'));
      await daveA.join(roomId);
      await syncUntilChanged(aliceB, daveA.userId);
      const master = new CrossSigningKey(daveA.userId, 'master');
      await daveA.ok('POST', '/keys/device_signing/upload', { master_key: master.object() });
      await expect.poll(() => signingUpdates.filter((u) => u.user_id === daveA.userId).length).toBe(1);
      const before = received.length;

      const userSigning = new CrossSigningKey(daveA.userId, 'user_signing');
      const challenge = await a.http.post('/_matrix/client/v3/keys/device_signing/upload').auth(daveA.user.accessToken, { type: 'bearer' }).send({ user_signing_key: userSigning.object(master) });
      const auth = { type: 'm.login.password', session: challenge.body.session, identifier: { type: 'm.id.user', user: daveA.userId }, password: 'pw-dave' };
      await daveA.ok('POST', '/keys/device_signing/upload', { user_signing_key: userSigning.object(master), auth });
      expect((await daveA.ok('POST', '/keys/signatures/upload', { [carolA.userId]: { [carolMaster.publicKey]: userSigning.sign(carolMaster.object()) } })).failures).toEqual({});
      // Then a change B must hear of: what comes to B before it is all that the two above sent.
      await a.http.put(`/_matrix/client/v3/devices/${daveA.user.deviceId}`).auth(daveA.user.accessToken, { type: 'bearer' }).send({ display_name: 'after signing' });
      const [next] = (await receivedUpTo(before + 1)).slice(before);
      expect(next!.user_id).toBe(daveA.userId);
      expect(next!.device_display_name).toBe('after signing');
      expect(signingUpdates.filter((u) => u.user_id === daveA.userId)).toHaveLength(1);
      expect(signingUpdates.some((u) => 'user_signing_key' in u)).toBe(false);
    } finally {
      keys.receiveSigningKeyUpdate = receiveSigning;
    }
  });

  it('says when a user of A left the last shared room, and drops updates about them after', async () => {
    await aliceB.syncUntil(() => true);
    await botA.ok('POST', `/rooms/${encodeURIComponent(roomId)}/leave`, {});
    await syncUntilChanged(aliceB, botA.userId, 'left');
    const resyncsBefore = resyncs;
    await b.services.keys.receiveDeviceListUpdate('a.test', { user_id: botA.userId, device_id: 'X', stream_id: 1e9, prev_id: [] });
    // Forgotten: no resync, no change; a later update, once a room is shared again, resyncs.
    expect(resyncs).toBe(resyncsBefore);
    expect(await b.services.storage.e2e.deviceListStreamId(botA.userId)).toBeUndefined();
    const since = (await aliceB.sync()).next_batch as string;
    expect((await aliceB.sync({ since })).device_lists.changed).toEqual([]);
  });
});
