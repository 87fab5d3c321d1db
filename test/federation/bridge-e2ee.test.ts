/**
 * The bridge in an encrypted room of another server (issue 31): alice on b.test makes an encrypted
 * room and invites the bridge of a.test; her encrypted `!bridge webhook ci` reaches it with its
 * key over federation, the URL comes in an encrypted DM made on a.test, and a post to the webhook
 * arrives in her room encrypted for her device, which decrypts it.
 */
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as sdk from 'matrix-js-sdk';
import { logger } from 'matrix-js-sdk/lib/logger.js';
import { createUser, startFederation, type Federation } from '../support/federation.js';
import { fetchTrusting, testCertificates } from '../support/tls.js';
import { bridgeWebhookUrl, decryptedWhere, encryptedRoomWithBridge, startCryptoClient } from '../support/crypto-clients.js';

let federation: Federation;
const clients: sdk.MatrixClient[] = [];
const fetchTls = fetchTrusting(readFileSync(testCertificates().caPath));
beforeAll(async () => {
  federation = await startFederation(['a.test', 'b.test'], (name) => (name === 'a.test' ? { bridge: { enabled: true } } : {}));
  (logger as unknown as { disableAll(): void }).disableAll();
});
afterAll(async () => {
  for (const client of clients) client.stopClient();
  await federation?.close();
});

describe('the bridge of one server in an encrypted room of another', () => {
  it('reads the encrypted command, sends the URL in an encrypted DM, and posts encrypted across servers', { timeout: 180_000 }, async () => {
    const a = federation.servers.get('a.test')!;
    const b = federation.servers.get('b.test')!;
    const bridgeId = a.server.app.homeserver.bridge!.userId;
    expect(bridgeId).toBe('@bridge:a.test');
    const alice = await startCryptoClient(b.server.url.replace(/\/$/, ''), await createUser(b.hs, 'alice'), fetchTls);
    clients.push(alice);

    const roomId = await encryptedRoomWithBridge(alice, bridgeId);
    const url = await bridgeWebhookUrl(alice, roomId, bridgeId, 'ci', 'https://a.test/webhook/');

    // The webhook URL names a.test; here it is reached at a.test's own listener.
    const posted = decryptedWhere(alice, roomId, bridgeId, (body) => body.includes('deployed across servers'), 'the webhook message');
    const answer = await fetchTls(a.server.url.replace(/\/$/, '') + new URL(url).pathname, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ text: 'deployed across servers' }) });
    expect(answer.status).toBe(200);
    expect((await posted).getWireType()).toBe('m.room.encrypted');
  });
});
