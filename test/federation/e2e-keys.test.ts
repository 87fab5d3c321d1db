/**
 * End-to-end encryption keys across servers: a user of B reads and claims the keys of a user of A
 * (federation's /user/keys/query and /user/keys/claim), and learns of A's device changes by
 * m.device_list_update EDUs in sync's device_lists.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { client, type TestClient } from '../support/client.js';
import { DeviceIdentity } from '../support/device-identity.js';
import { createUser, startFederation, type Federation } from '../support/federation.js';
import { expectMatchesSpec } from '../support/spec-validator.js';

let federation: Federation;
let botA: TestClient;
let aliceB: TestClient;
let device: DeviceIdentity;

beforeAll(async () => {
  federation = await startFederation(['a.test', 'b.test']);
  const a = federation.servers.get('a.test')!.hs;
  const b = federation.servers.get('b.test')!.hs;
  botA = client(a, await createUser(a, 'bot'));
  aliceB = client(b, await createUser(b, 'alice'));
  device = new DeviceIdentity(botA.userId, botA.user.deviceId);
  await botA.ok('POST', '/keys/upload', { device_keys: device.deviceKeys(), one_time_keys: device.oneTimeKeys(['AAA', 'AAB']) });
});
afterAll(() => federation?.close());

describe('keys across servers', () => {
  it('are queried and claimed through the user’s own server', async () => {
    const query = await aliceB.request('POST', '/keys/query', { device_keys: { [botA.userId]: [] } });
    expectMatchesSpec('POST', '/_matrix/client/v3/keys/query', query);
    expect(query.body.failures).toEqual({});
    expect(query.body.device_keys[botA.userId][botA.user.deviceId].keys[`ed25519:${botA.user.deviceId}`]).toBe(device.publicKey);

    const claim = await aliceB.ok('POST', '/keys/claim', { one_time_keys: { [botA.userId]: { [botA.user.deviceId]: 'signed_curve25519' } } });
    expect(Object.keys(claim.one_time_keys[botA.userId][botA.user.deviceId])).toEqual(['signed_curve25519:AAA']);
    const a = federation.servers.get('a.test')!;
    expect(await a.services.storage.e2e.oneTimeKeyCounts(botA.userId, botA.user.deviceId)).toEqual({ signed_curve25519: 1 });

    // A's device list as other servers fetch it when they resync.
    const devices = await a.services.keys.devicesForServer(botA.userId);
    expect(devices).toMatchObject({ user_id: botA.userId, devices: [{ device_id: botA.user.deviceId, keys: { device_id: botA.user.deviceId } }] });
  });

  it('leave out keys another server hands on that its user’s device did not sign, and keep answers until told of a change', async () => {
    const b = federation.servers.get('b.test')!;
    const ghost = '@ghost:a.test';
    const forger = new DeviceIdentity(ghost, 'FORGED');
    const forged = { ...forger.deviceKeys(), signatures: new DeviceIdentity(ghost, 'FORGED').deviceKeys().signatures };
    const remote = b.services.keys['remote']!;
    const originalQuery = remote.query;
    let asked = 0;
    remote.query = async (...args) => {
      asked++;
      return args[1][ghost] ? { device_keys: { [ghost]: { FORGED: forged, OTHER: device.deviceKeys() } } } : originalQuery(...args);
    };
    try {
      const query = await aliceB.ok('POST', '/keys/query', { device_keys: { [ghost]: [] } });
      expect(query.device_keys[ghost]).toEqual({});
      // The bot's keys were fetched before: kept, not asked again.
      asked = 0;
      const again = await aliceB.ok('POST', '/keys/query', { device_keys: { [botA.userId]: [] } });
      expect(Object.keys(again.device_keys[botA.userId])).toEqual([botA.user.deviceId]);
      expect(asked).toBe(0);
    } finally {
      remote.query = originalQuery;
    }
  });

  it('tell the users of other servers who share a room when devices change', async () => {
    const roomId = await botA.createRoom({ preset: 'public_chat' });
    await aliceB.ok('POST', `/join/${encodeURIComponent(roomId)}`, {}, { server_name: 'a.test' });
    const since = (await aliceB.sync()).next_batch as string;
    // The bot gets a new identity on its device (a reinstall): B must learn of it.
    const renewed = new DeviceIdentity(botA.userId, botA.user.deviceId);
    await botA.ok('POST', '/keys/upload', { device_keys: renewed.deviceKeys() });
    let token = since;
    let changed: string[] = [];
    for (const deadline = Date.now() + 10_000; changed.length === 0 && Date.now() < deadline; ) {
      const sync = await aliceB.sync({ since: token, timeout: 2_000 });
      token = sync.next_batch as string;
      changed = (sync.device_lists as { changed?: string[] } | undefined)?.changed ?? [];
    }
    expect(changed).toEqual([botA.userId]);
    const query = await aliceB.ok('POST', '/keys/query', { device_keys: { [botA.userId]: [] } });
    expect(query.device_keys[botA.userId][botA.user.deviceId].keys[`ed25519:${botA.user.deviceId}`]).toBe(renewed.publicKey);
  });
});
