/**
 * A real matrix-bot-sdk bot (both published packages) against the server: password login, sync,
 * auto-join on invite, answering a message, and seeing another member join. Any difference from
 * what the SDK expects is a server bug.
 */
import { createServer } from 'node:net';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createUser, startTestHomeserver, type TestHomeserver } from '../support/homeserver.js';
import { client, type Json, type TestClient } from '../support/client.js';

/** A free loopback port, so the server's public base URL (which bot-sdk follows) can name it. */
async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** Syncs as `watcher` until an event in `roomId` matches, long-polling (no sleeps). */
async function waitForEvent(watcher: TestClient, roomId: string, matches: (event: Json) => boolean, since?: string): Promise<Json> {
  const deadline = Date.now() + 20_000;
  let token = since;
  while (Date.now() < deadline) {
    const answer = await watcher.sync(token === undefined ? {} : { since: token, timeout: 5000 });
    const events = (answer.rooms.join[roomId]?.timeline.events ?? []) as Json[];
    const found = events.find(matches);
    if (found) return found;
    token = answer.next_batch;
  }
  throw new Error(`no matching event in ${roomId} within 20 s`);
}

const silent = { info() {}, warn() {}, error() {}, debug() {}, trace() {} };

describe.each(['matrix-bot-sdk', '@vector-im/matrix-bot-sdk'])('%s', (sdkPackage) => {
  let hs: TestHomeserver;
  let baseUrl: string;

  beforeEach(async () => {
    const port = await freePort();
    baseUrl = `http://127.0.0.1:${port}`;
    hs = await startTestHomeserver({ public_baseurl: `${baseUrl}/`, listen: { host: '127.0.0.1', port } });
    await hs.app.listen({ host: '127.0.0.1', port });
  });
  afterEach(() => hs.close());

  it('logs in, auto-joins on invite, answers a message and sees a member join', async () => {
    const sdk = (await import(sdkPackage)) as typeof import('matrix-bot-sdk');
    sdk.LogService.setLogger(silent);
    sdk.LogService.setLevel(sdk.LogLevel.ERROR);

    const bot = await hs.services.accounts.createOrRotateBot('echo');
    const alice = client(hs, await createUser(hs, 'alice'));
    const carol = client(hs, await createUser(hs, 'carol'));

    const botClient = await new sdk.MatrixAuth(baseUrl).passwordLogin('echo', bot.password);
    expect(await botClient.getUserId()).toBe(bot.user_id);
    sdk.AutojoinRoomsMixin.setupOnClient(botClient);
    const carolId = '@carol:test.local';
    let resolveJoinSeen!: (event: Json) => void;
    const joinSeen = new Promise<Json>((resolve) => (resolveJoinSeen = resolve));
    botClient.on('room.event', (_roomId: string, event: Json) => {
      if (event.type === 'm.room.member' && event.content?.membership === 'join' && event.state_key === carolId) resolveJoinSeen(event);
    });
    botClient.on('room.message', (roomId: string, event: Json) => {
      const body = event.content?.body;
      if (event.sender === bot.user_id || typeof body !== 'string' || !body.startsWith('!echo ')) return;
      void botClient.replyNotice(roomId, event, `echo: ${body.slice('!echo '.length)}`);
    });
    await botClient.start();
    try {
      const roomId = await alice.createRoom({ preset: 'public_chat', name: 'Echo test' });
      const since = (await alice.sync()).next_batch as string;
      await alice.invite(roomId, bot.user_id);
      await waitForEvent(alice, roomId, (e) => e.type === 'm.room.member' && e.state_key === bot.user_id && e.content.membership === 'join', since);

      const question = await alice.send(roomId, { msgtype: 'm.text', body: '!echo hello bots' });
      const reply = await waitForEvent(alice, roomId, (e) => e.sender === bot.user_id && e.type === 'm.room.message', since);
      expect(reply.content).toMatchObject({ msgtype: 'm.notice', body: expect.stringContaining('echo: hello bots') });
      expect(reply.content['m.relates_to']).toEqual({ 'm.in_reply_to': { event_id: question } });

      await carol.join(roomId);
      expect(await joinSeen).toMatchObject({ sender: carol.userId, state_key: carol.userId, room_id: roomId });
      expect(await botClient.getJoinedRooms()).toEqual([roomId]);
    } finally {
      botClient.stop();
    }
  });
});
