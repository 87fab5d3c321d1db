/**
 * The bridge as an application service of a second instance (issue 31), in an encrypted room: its
 * crypto device is a logged-in device of the bridge user on the main homeserver (appservice login),
 * syncing for its to-device messages; rooms still come as transactions. A matrix-js-sdk Rust
 * crypto client there sends `!bridge webhook ci` encrypted, reads the URL in the encrypted DM,
 * posts to it and decrypts the message.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import * as sdk from 'matrix-js-sdk';
import { logger } from 'matrix-js-sdk/lib/logger.js';
import type { TestHomeserver } from '../../../src/testing/index.js';
import { startBridgeApp, type RunningBridge } from '../../../src/bridge-app.js';
import { bridgeWebhookUrl, decryptedWhere, encryptedRoomWithBridge, startCryptoClient } from '../../support/crypto-clients.js';
import { mainWithBridgeRegistration } from '../../support/bridge-appservice.js';

describe('the bridge as an application service, in an encrypted room', () => {
  let dir: string;
  let main: TestHomeserver | undefined;
  let bridge: RunningBridge | undefined;
  const clients: sdk.MatrixClient[] = [];
  afterEach(async () => {
    for (const client of clients.splice(0)) client.stopClient();
    await bridge?.close();
    await main?.close();
    bridge = undefined;
    main = undefined;
    rmSync(dir, { recursive: true, force: true });
  });

  it('reads the encrypted command, sends the URL in an encrypted DM, and posts encrypted', async () => {
    (logger as unknown as { disableAll(): void }).disableAll();
    dir = mkdtempSync(join(tmpdir(), 'bhs-bridge-as-e2ee-'));
    const started = await mainWithBridgeRegistration(dir);
    main = started.main;
    const config = started.config;
    bridge = await startBridgeApp(config);
    const bridgeId = '@bridge:localhost';
    expect(bridge.bridge.deviceId).toMatch(/^BRIDGE/);

    const alice = await startCryptoClient(main.baseUrl, await main.createUser('alice'));
    clients.push(alice);
    const roomId = await encryptedRoomWithBridge(alice, bridgeId);
    const url = await bridgeWebhookUrl(alice, roomId, bridgeId, 'ci');

    const posted = decryptedWhere(alice, roomId, bridgeId, (body) => body.includes('deployed by the appservice'), 'the webhook message');
    const answer = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ text: 'deployed by the appservice' }) });
    expect(answer.status).toBe(200);
    expect((await posted).getWireType()).toBe('m.room.encrypted');
    // The bridge's device is cross-signed on the main homeserver too (it allows a first upload without a password).
    const deviceId = bridge.bridge.deviceId!;
    const keys = (await main.services.keys.query(alice.getUserId()!, { device_keys: { [bridgeId]: [] } })) as Record<string, any>;
    const selfSigningKeyId = Object.keys(keys.self_signing_keys[bridgeId].keys)[0]!;
    expect(Object.keys(keys.device_keys[bridgeId][deviceId].signatures[bridgeId])).toContain(selfSigningKeyId);
    const device = (await alice.getCrypto()!.getUserDeviceInfo([bridgeId], true)).get(bridgeId)?.get(deviceId);
    expect(device?.displayName).toBe('Bridge (webhooks and feeds)');

    // The bridge restarts: the same device logs in again, its store comes from its database, and a
    // command alice sends meanwhile (in her Megolm session from before) is read once it is back.
    await bridge.close();
    bridge = undefined;
    const listed = decryptedWhere(alice, roomId, bridgeId, (body) => body.startsWith('Webhooks in this room: ci'), 'the webhook list');
    await alice.sendMessage(roomId, { msgtype: sdk.MsgType.Text, body: '!bridge webhook list' });
    bridge = await startBridgeApp(config);
    expect(bridge.bridge.deviceId).toBe(deviceId);
    await listed;
    const again = decryptedWhere(alice, roomId, bridgeId, (body) => body.includes('after the restart'), 'the post after the restart');
    expect((await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ text: 'after the restart' }) })).status).toBe(200);
    expect((await again).getWireType()).toBe('m.room.encrypted');
    const devices = (await alice.getCrypto()!.getUserDeviceInfo([bridgeId], true)).get(bridgeId);
    expect([...(devices?.keys() ?? [])]).toEqual([deviceId]);
  }, 240_000);
});
