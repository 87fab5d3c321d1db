/**
 * The bridge in encrypted rooms (issue 31), lived by a matrix-js-sdk client with Rust crypto, as
 * Element users live it: an encrypted room, the bridge invited, `!bridge webhook ci` sent
 * encrypted, the URL read from the bridge's encrypted direct message, a post to it decrypted in
 * the room; then a feed item; then the same after the server restarts (same device, and the
 * messages from before still decrypt).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import * as sdk from 'matrix-js-sdk';
import { logger } from 'matrix-js-sdk/lib/logger.js';
import { startTestHomeserver, type TestAccount, type TestHomeserver } from '../../../src/testing/index.js';
import { bridgeWebhookUrl, decryptedWhere, encryptedRoomWithBridge, startCryptoClient } from '../../support/crypto-clients.js';
import { startFeedServer, type FeedServer } from '../../support/feed-server.js';

function rss(items: Array<{ id: string; title: string }>): string {
  const entries = items.map((item) => `<item><guid>${item.id}</guid><title>${item.title}</title><link>https://example.org/${item.id}</link></item>`).join('');
  return `<?xml version="1.0"?><rss version="2.0"><channel><title>Releases</title><link>https://example.org/</link>${entries}</channel></rss>`;
}

describe('the bridge in an encrypted room, with a matrix-js-sdk Rust crypto client', () => {
  let dir: string;
  let hs: TestHomeserver | undefined;
  let feeds: FeedServer;
  const clients: sdk.MatrixClient[] = [];
  beforeAll(async () => {
    (logger as unknown as { disableAll(): void }).disableAll();
    feeds = await startFeedServer();
  });
  afterAll(async () => {
    await feeds.close();
  });
  afterEach(async () => {
    for (const client of clients.splice(0)) client.stopClient();
    await hs?.close();
    hs = undefined;
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const start = (port = 0) => startTestHomeserver({ port, config: { database: { path: join(dir, 'homeserver.db') }, bridge: { encryption: { enabled: true } } } });

  async function client(account: TestAccount, fetchFn?: typeof fetch): Promise<sdk.MatrixClient> {
    const started = await startCryptoClient(hs!.baseUrl, account, fetchFn);
    clients.push(started);
    return started;
  }

  async function post(url: string, text: string): Promise<void> {
    const answer = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ text }) });
    expect(answer.status).toBeLessThan(300);
  }

  it('reads an encrypted command, sends the URL in an encrypted DM, and posts encrypted; a feed item too', async () => {
    dir = mkdtempSync(join(tmpdir(), 'bhs-bridge-e2ee-'));
    hs = await start();
    const bridgeId = hs.bridgeUserId!;
    const alice = await client(await hs.createUser('alice'));
    const roomId = await encryptedRoomWithBridge(alice, bridgeId);

    const url = await bridgeWebhookUrl(alice, roomId, bridgeId, 'ci');
    const posted = decryptedWhere(alice, roomId, bridgeId, (body) => body.includes('build passed'), 'the webhook message');
    await post(url, 'build passed');
    const event = await posted;
    expect(event.getWireType()).toBe('m.room.encrypted');

    // The server holds ciphertext only.
    const stored = await hs.timeline(roomId);
    expect(JSON.stringify(stored)).not.toContain('build passed');
    expect(stored.filter((e) => e.sender === bridgeId && e.type === 'm.room.message')).toEqual([]);

    // A feed: the subscription is a command too; a new item arrives encrypted.
    feeds.serve('/releases.xml', { body: rss([{ id: 'v1', title: 'Version 1' }]), contentType: 'application/rss+xml' });
    const subscribed = decryptedWhere(alice, roomId, bridgeId, (body) => body.startsWith('This room now follows'), 'the feed reply');
    await alice.sendMessage(roomId, { msgtype: sdk.MsgType.Text, body: `!bridge feed ${feeds.url('/releases.xml')}` });
    await subscribed;
    feeds.serve('/releases.xml', { body: rss([{ id: 'v2', title: 'Version 2' }, { id: 'v1', title: 'Version 1' }]), contentType: 'application/rss+xml' });
    const item = decryptedWhere(alice, roomId, bridgeId, (body) => body.includes('Version 2'), 'the feed item');
    await hs.pollFeeds();
    expect((await item).getWireType()).toBe('m.room.encrypted');
  }, 180_000);

  it('after a restart: the same device, the old webhook and the feed post encrypted, and messages from before still decrypt', async () => {
    dir = mkdtempSync(join(tmpdir(), 'bhs-bridge-e2ee-'));
    hs = await start();
    const bridgeId = hs.bridgeUserId!;
    const port = hs.port;
    const alice = await client(await hs.createUser('alice'));
    const roomId = await encryptedRoomWithBridge(alice, bridgeId);
    const url = await bridgeWebhookUrl(alice, roomId, bridgeId, 'ci');
    const before = decryptedWhere(alice, roomId, bridgeId, (body) => body.includes('before the restart'), 'the first post');
    await post(url, 'before the restart');
    await before;
    feeds.serve('/restart.xml', { body: rss([{ id: 'r1', title: 'Release 1' }]), contentType: 'application/rss+xml' });
    const subscribed = decryptedWhere(alice, roomId, bridgeId, (body) => body.startsWith('This room now follows'), 'the feed reply');
    await alice.sendMessage(roomId, { msgtype: sdk.MsgType.Text, body: `!bridge feed ${feeds.url('/restart.xml')}` });
    await subscribed;
    const bridge = () => hs!.services && (hs as unknown as { app: { homeserver: { bridge: import('../../../src/bridge/bridge.js').Bridge } } }).app.homeserver.bridge;
    const deviceId = bridge().deviceId;
    expect(deviceId).toMatch(/^BRIDGE/);
    const stored = await hs.timeline(roomId);
    const command = stored.find((e) => e.sender === alice.getUserId() && e.type === 'm.room.encrypted');
    expect(command).toBeDefined();

    await hs.close();
    hs = await start(port);
    // The same device, with the same keys: alice sees one device of the bridge, unchanged.
    expect(bridge().deviceId).toBe(deviceId);
    // A message from before the restart still decrypts.
    const old = await bridge().readEvent(roomId, command!.event_id);
    expect(old?.content.body).toBe('!bridge webhook ci');

    // The old webhook posts, encrypted, readable by alice.
    const after = decryptedWhere(alice, roomId, bridgeId, (body) => body.includes('after the restart'), 'the post after the restart');
    await post(url, 'after the restart');
    expect((await after).getWireType()).toBe('m.room.encrypted');
    // A feed item after the restart, encrypted too.
    feeds.serve('/restart.xml', { body: rss([{ id: 'r2', title: 'Release 2' }, { id: 'r1', title: 'Release 1' }]), contentType: 'application/rss+xml' });
    const item = decryptedWhere(alice, roomId, bridgeId, (body) => body.includes('Release 2'), 'the feed item after the restart');
    await hs.pollFeeds();
    expect((await item).getWireType()).toBe('m.room.encrypted');
    // And alice's next command (in her Megolm session from before the restart) is read and answered.
    const listed = decryptedWhere(alice, roomId, bridgeId, (body) => body.startsWith('Webhooks in this room: ci'), 'the webhook list');
    await alice.sendMessage(roomId, { msgtype: sdk.MsgType.Text, body: '!bridge webhook list' });
    await listed;
    const devices = await alice.getCrypto()!.getUserDeviceInfo([bridgeId], true);
    expect([...(devices.get(bridgeId)?.keys() ?? [])]).toEqual([deviceId]);
  }, 240_000);

  it('reads a command whose key comes after it, once the key arrives', async () => {
    dir = mkdtempSync(join(tmpdir(), 'bhs-bridge-e2ee-'));
    hs = await start();
    const bridgeId = hs.bridgeUserId!;
    // alice's client: while `holding`, its to-device messages (room keys) are answered at once but
    // reach the server only when released, so the bridge sees her message before its key.
    let holding = false;
    const held: Array<() => Promise<Response>> = [];
    const fetchFn: typeof fetch = async (input, init) => {
      const url = typeof input === 'string' ? input : input instanceof URL ? input.href : input.url;
      if (holding && url.includes('/sendToDevice/')) {
        held.push(() => fetch(input, init));
        return new Response('{}', { status: 200, headers: { 'content-type': 'application/json' } });
      }
      return fetch(input, init);
    };
    const alice = await client(await hs.createUser('alice'), fetchFn);
    const roomId = await encryptedRoomWithBridge(alice, bridgeId);
    const bridge = (hs as unknown as { app: { homeserver: { bridge: { waitingForKeys: Map<string, unknown> } } } }).app.homeserver.bridge;

    holding = true;
    const reply = decryptedWhere(alice, roomId, bridgeId, (body) => body.startsWith('I turn webhooks'), 'the help reply');
    await alice.sendMessage(roomId, { msgtype: sdk.MsgType.Text, body: '!bridge help' });
    // The bridge has the message and waits for its key.
    const deadline = Date.now() + 60_000;
    while (bridge.waitingForKeys.size === 0) {
      if (Date.now() > deadline) throw new Error('the bridge never waited for the key');
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect(held.length).toBeGreaterThan(0);
    holding = false;
    for (const send of held.splice(0)) expect((await send()).status).toBe(200);
    await reply;
    expect(bridge.waitingForKeys.size).toBe(0);
  }, 180_000);
});
