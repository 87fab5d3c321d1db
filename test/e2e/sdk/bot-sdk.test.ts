/**
 * matrix-bot-sdk (both published packages) living the whole bot story against the server.
 * Any difference from what the SDK expects is a server bug.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startTestHomeserver, type TestHomeserver } from '../../../src/testing/index.js';
import { runBotStory, type StoryBot } from './story.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
const silent = { info() {}, warn() {}, error() {}, debug() {}, trace() {} };

describe.each(['matrix-bot-sdk', '@vector-im/matrix-bot-sdk'])('%s', (sdkPackage) => {
  let hs: TestHomeserver;
  beforeEach(async () => {
    hs = await startTestHomeserver();
  });
  afterEach(() => hs.close());

  it('lives the bot story', async () => {
    const sdk = (await import(sdkPackage)) as typeof import('matrix-bot-sdk');
    sdk.LogService.setLogger(silent);
    sdk.LogService.setLevel(sdk.LogLevel.ERROR);

    await runBotStory(hs, async ({ localpart, password }) => {
      // Logs in with the password; the login answer's well_known must lead back to this server.
      const client = await new sdk.MatrixAuth(hs.baseUrl).passwordLogin(localpart, password);
      const userId = await client.getUserId();
      sdk.AutojoinRoomsMixin.setupOnClient(client);
      const joins: Array<{ roomId: string; event: Json }> = [];
      const joinWaiters = new Set<() => void>();
      client.on('room.event', (roomId: string, event: Json) => {
        if (event.type !== 'm.room.member' || event.content?.membership !== 'join') return;
        joins.push({ roomId, event });
        for (const wake of joinWaiters) wake();
      });
      client.on('room.message', (roomId: string, event: Json) => {
        const body = event.content?.body;
        if (event.sender === userId || typeof body !== 'string' || !body.startsWith('!echo ')) return;
        void client.replyNotice(roomId, event, `echo: ${body.slice('!echo '.length)}`);
      });
      await client.start();

      const bot: StoryBot = {
        userId,
        sawJoin: (roomId, member) =>
          new Promise((resolve) => {
            const check = () => {
              const found = joins.find((j) => j.roomId === roomId && j.event.state_key === member);
              if (!found) return;
              joinWaiters.delete(check);
              resolve(found.event);
            };
            joinWaiters.add(check);
            check();
          }),
        createRoomAndInvite: (name, invitee) => client.createRoom({ name, invite: [invitee] }),
        openDm: (other) => client.dms.getOrCreateDm(other),
        async sendImage(roomId, data, name, mimetype) {
          const mxc = await client.uploadContent(data, mimetype, name);
          // The SDK's own download (authenticated media) must get the bytes back.
          const downloaded = await client.downloadContent(mxc);
          expect(downloaded.contentType).toBe(mimetype);
          expect(Buffer.compare(downloaded.data, data)).toBe(0);
          await client.sendMessage(roomId, { msgtype: 'm.image', body: name, url: mxc, info: { mimetype, size: data.length } });
          return mxc;
        },
        stop: () => client.stop(),
      };
      return bot;
    });
  });
});
