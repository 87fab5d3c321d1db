/**
 * The appservice bridge keeps its rooms' members from the main homeserver's transactions (it does
 * not ask them at each post): someone who joins an encrypted room gets the bridge's next post
 * encrypted for their device, once the transaction with their join has reached the bridge.
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
import { mainAndProxies, taken } from '../../support/bridge-appservice.js';
import type { CountingProxy } from '../../support/counting-proxy.js';

describe('the appservice bridge’s cached members, in an encrypted room', () => {
  let dir: string;
  let main: TestHomeserver | undefined;
  let bridge: RunningBridge | undefined;
  const clients: sdk.MatrixClient[] = [];
  const proxies: CountingProxy[] = [];
  afterEach(async () => {
    for (const client of clients.splice(0)) client.stopClient();
    await bridge?.close();
    await main?.close();
    for (const proxy of proxies.splice(0)) await proxy.close();
    bridge = undefined;
    main = undefined;
    rmSync(dir, { recursive: true, force: true });
  });

  it('encrypts the next post for a member who joined', async () => {
    (logger as unknown as { disableAll(): void }).disableAll();
    dir = mkdtempSync(join(tmpdir(), 'bhs-bridge-cache-e2ee-'));
    const started = await mainAndProxies(dir);
    main = started.main;
    const { requests, transactions } = started;
    proxies.push(requests, transactions);
    bridge = await startBridgeApp(started.config);
    const bridgeId = '@bridge:localhost';

    const alice = await startCryptoClient(main.baseUrl, await main.createUser('alice'));
    clients.push(alice);
    const roomId = await encryptedRoomWithBridge(alice, bridgeId);
    const url = await bridgeWebhookUrl(alice, roomId, bridgeId, 'ci');
    const post = async (text: string) => {
      const answer = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ text }) });
      expect(answer.status).toBe(200);
    };
    const first = decryptedWhere(alice, roomId, bridgeId, (body) => body === 'before bob', 'the first post');
    await post('before bob');
    await first;

    // Bob joins (his client joins when invited); the bridge learns it from the transactions.
    const bobAccount = await main.createUser('bob');
    const bob = await startCryptoClient(main.baseUrl, bobAccount);
    clients.push(bob);
    await alice.invite(roomId, bobAccount.userId);
    const joined = await main.waitFor(roomId, (e) => e.type === 'm.room.member' && e.state_key === bobAccount.userId && e.content.membership === 'join');
    await taken(transactions, joined.event_id);

    const mark = requests.requests.length;
    const bobGets = decryptedWhere(bob, roomId, bridgeId, (body) => body === 'after bob', 'the post after his join');
    const aliceGets = decryptedWhere(alice, roomId, bridgeId, (body) => body === 'after bob', 'the post after bob’s join');
    await post('after bob');
    expect((await bobGets).getWireType()).toBe('m.room.encrypted');
    await aliceGets;
    // Encrypted for him without asking the homeserver who the members are.
    expect(requests.requests.slice(mark).filter((request) => request.path.endsWith('/members'))).toEqual([]);
  }, 240_000);
});
