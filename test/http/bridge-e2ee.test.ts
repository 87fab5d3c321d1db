/**
 * The bridge's crypto device through the client API (issue 31): its device and keys as other
 * clients see them, cross-signed; what it posts in an encrypted room is encrypted; a message it
 * cannot decrypt gets one short reply. The full story with a Rust crypto client is in
 * test/e2e/sdk/bridge-e2ee.test.ts.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startTestHomeserver, type TestHomeserver } from '../support/homeserver.js';
import { clientsFor } from '../support/client.js';
import { bridgeIdOf, bridgeMessages, createWebhook, promoteBridge, roomWithBridge, withBridge } from '../support/bridge.js';
import { expectMatrixError } from '../support/spec-validator.js';
import type { Bridge } from '../../src/bridge/bridge.js';

let hs: TestHomeserver | undefined;
afterEach(async () => {
  await hs?.close();
  hs = undefined;
});

const ENCRYPTED = [{ type: 'm.room.encryption', state_key: '', content: { algorithm: 'm.megolm.v1.aes-sha2' } }];
/** A well-formed Megolm message (version, index, ciphertext, MAC, signature) of a session nobody shared. */
const MEGOLM_CIPHERTEXT = Buffer.concat([Buffer.from([3, 8, 0, 0x12, 16]), Buffer.alloc(16, 1), Buffer.alloc(8, 2), Buffer.alloc(64, 3)]).toString('base64').replace(/=+$/, '');

function bridgeOf(server: TestHomeserver): Bridge {
  return server.app.homeserver.bridge!;
}

describe('the bridge’s crypto device', () => {
  it('has a device with uploaded keys, signed by its own cross-signing identity', async () => {
    hs = await startTestHomeserver(withBridge());
    const [alice] = await clientsFor(hs, 'alice');
    const bridgeId = bridgeIdOf(hs);
    const deviceId = bridgeOf(hs).deviceId!;
    expect(deviceId).toMatch(/^BRIDGE[0-9A-F]{10}$/);
    const keys = await alice.ok('POST', '/keys/query', { device_keys: { [bridgeId]: [] } });
    const device = keys.device_keys[bridgeId][deviceId];
    expect(device.algorithms).toContain('m.megolm.v1.aes-sha2');
    expect(Object.keys(device.keys)).toEqual(expect.arrayContaining([`ed25519:${deviceId}`, `curve25519:${deviceId}`]));
    // Cross-signed: the bridge's master key exists, and its self-signing key signed the device.
    const master = keys.master_keys[bridgeId];
    const selfSigning = keys.self_signing_keys[bridgeId];
    expect(master.usage).toEqual(['master']);
    const selfSigningKeyId = Object.keys(selfSigning.keys)[0];
    expect(Object.keys(device.signatures[bridgeId])).toContain(selfSigningKeyId);
    // The device is listed with a name people recognise.
    const { devices } = await alice.ok('GET', `/devices`);
    expect(devices.length).toBe(1);
    expect((await hs.services.devices.get(bridgeId, deviceId)).display_name).toBe('Bridge (webhooks and feeds)');
    // Keys were claimable: one-time keys are on the server.
    const claimed = await alice.ok('POST', '/keys/claim', { one_time_keys: { [bridgeId]: { [deviceId]: 'signed_curve25519' } } });
    expect(Object.keys(claimed.one_time_keys[bridgeId][deviceId])[0]).toMatch(/^signed_curve25519:/);
  });

  it('posts encrypted in an encrypted room, and says once that it cannot read a message whose key never came', async () => {
    hs = await startTestHomeserver(withBridge(), { bridge: { undecryptableWaitMs: 500 } });
    const [alice] = await clientsFor(hs, 'alice');
    const bridgeId = bridgeIdOf(hs);
    const roomId = await alice.createRoom({ preset: 'private_chat', initial_state: ENCRYPTED });
    await alice.invite(roomId, bridgeId);
    // The greeting is encrypted: the server never sees it in the clear.
    const greeting = await alice.waitForEvent(roomId, (event) => event.sender === bridgeId && event.type === 'm.room.encrypted');
    expect(greeting.content.algorithm).toBe('m.megolm.v1.aes-sha2');
    expect(JSON.stringify(greeting)).not.toContain('Hello');
    expect((await bridgeOf(hs).readEvent(roomId, greeting.event_id))?.content.body).toContain('Say "!bridge help"');
    await promoteBridge(hs, alice, roomId);

    // A message encrypted with a session the bridge never received.
    const sent = await alice.send(roomId, { algorithm: 'm.megolm.v1.aes-sha2', sender_key: 'k'.repeat(43), session_id: 'g'.repeat(43), ciphertext: MEGOLM_CIPHERTEXT, device_id: 'NOPE' }, 'm.room.encrypted');
    const reply = await alice.waitForEvent(roomId, (event) => event.sender === bridgeId && event.content?.['m.relates_to']?.['m.in_reply_to']?.event_id === sent, 30_000);
    expect(reply.type).toBe('m.room.encrypted');
    expect((await bridgeOf(hs).readEvent(roomId, reply.event_id))?.content.body).toContain('I could not read this encrypted message: its key never reached my device');
  });

  it('answers at once when the sender withheld the key', async () => {
    hs = await startTestHomeserver(withBridge());
    const [alice] = await clientsFor(hs, 'alice');
    const bridgeId = bridgeIdOf(hs);
    const deviceId = bridgeOf(hs).deviceId!;
    const roomId = await alice.createRoom({ preset: 'private_chat', initial_state: ENCRYPTED });
    await alice.invite(roomId, bridgeId);
    await alice.waitForEvent(roomId, (event) => event.sender === bridgeId && event.type === 'm.room.encrypted');
    const { device_id: aliceDevice } = await alice.ok('GET', '/account/whoami');
    const session = { algorithm: 'm.megolm.v1.aes-sha2', sender_key: 'k'.repeat(43), session_id: 's'.repeat(43) };
    // Her client refuses to share the key with the bridge's (unverified) device, and says so.
    await alice.ok('PUT', `/sendToDevice/m.room_key.withheld/w1`, {
      messages: { [bridgeId]: { [deviceId]: { ...session, room_id: roomId, code: 'm.unverified', reason: 'Device not verified', from_device: aliceDevice } } },
    });
    const sent = await alice.send(roomId, { ...session, ciphertext: MEGOLM_CIPHERTEXT, device_id: aliceDevice }, 'm.room.encrypted');
    // Answered without waiting the minute a missing key is given.
    const reply = await alice.waitForEvent(roomId, (event) => event.sender === bridgeId && event.content?.['m.relates_to']?.['m.in_reply_to']?.event_id === sent, 20_000);
    const body = String((await bridgeOf(hs).readEvent(roomId, reply.event_id))?.content.body);
    expect(body).toContain('withheld its key');
  });
});

describe('without the crypto device', () => {
  it('refuses to post into an encrypted room in clear: the webhook sender is told to retry (503)', async () => {
    hs = await startTestHomeserver(withBridge());
    const [alice] = await clientsFor(hs, 'alice');
    const roomId = await roomWithBridge(hs, alice);
    const webhook = await createWebhook(hs, alice, roomId, 'ci');
    // As in a process that does not hold the bridge (several processes), or whose device failed
    // to start: the device is not open here.
    (bridgeOf(hs) as unknown as { cryptoReady: boolean }).cryptoReady = false;
    expect((await hs.http.post(webhook.path).send({ text: 'in clear, before encryption' })).status).toBe(200);
    await alice.ok('PUT', `/rooms/${encodeURIComponent(roomId)}/state/m.room.encryption/`, ENCRYPTED[0]!.content);

    const refused = await hs.http.post(webhook.path).send({ text: 'must not leak' });
    expectMatrixError(refused, 503, 'M_UNKNOWN');
    expect(refused.headers['retry-after']).toBe('5');
    const said = (await bridgeMessages(hs, alice, roomId)).map((event) => event.content.body);
    expect(said).toContain('in clear, before encryption');
    expect(said.join('\n')).not.toContain('must not leak');
  }, 60_000);
});
