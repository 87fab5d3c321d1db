/**
 * matrix-js-sdk living the whole bot story against the server. Pinned to 37.5.0, the last release
 * that supports Node 20 (38+ needs Promise.withResolvers from Node 22).
 * Any difference from what the SDK expects is a server bug.
 */
import { afterEach, beforeEach, describe, it } from 'vitest';
import * as sdk from 'matrix-js-sdk';
import { logger } from 'matrix-js-sdk/lib/logger.js';
import { startTestHomeserver, type TestHomeserver } from '../../../src/testing/index.js';
import { runBotStory, type StoryBot } from './story.js';

describe('matrix-js-sdk', () => {
  let hs: TestHomeserver;
  beforeEach(async () => {
    hs = await startTestHomeserver();
    // The SDK's logger is a loglevel logger; its types do not say so.
    (logger as unknown as { disableAll(): void }).disableAll();
  });
  afterEach(() => hs.close());

  it('lives the bot story', async () => {
    await runBotStory(hs, async ({ localpart, password }) => {
      const login = await sdk.createClient({ baseUrl: hs.baseUrl }).loginRequest({
        type: 'm.login.password',
        identifier: { type: 'm.id.user', user: localpart },
        password,
      });
      const client = sdk.createClient({
        baseUrl: hs.baseUrl,
        userId: login.user_id,
        deviceId: login.device_id,
        accessToken: login.access_token,
      });
      const me = login.user_id;

      // Auto-join invites addressed to the bot.
      client.on(sdk.RoomMemberEvent.Membership, (_event, member) => {
        if (member.userId === me && member.membership === 'invite') void client.joinRoom(member.roomId);
      });
      const joinWaiters = new Set<(roomId: string, userId: string) => void>();
      client.on(sdk.RoomEvent.Timeline, (event, room, toStartOfTimeline) => {
        if (toStartOfTimeline || !room) return;
        if (event.getType() === 'm.room.member' && event.getContent().membership === 'join') {
          for (const wake of joinWaiters) wake(room.roomId, event.getStateKey() ?? '');
        }
        const body = event.getContent().body;
        if (event.getType() !== 'm.room.message' || event.getSender() === me || typeof body !== 'string' || !body.startsWith('!echo ')) return;
        void client.sendMessage(room.roomId, { msgtype: sdk.MsgType.Notice, body: `echo: ${body.slice('!echo '.length)}` });
      });

      const prepared = new Promise<void>((resolve, reject) => {
        client.on(sdk.ClientEvent.Sync, (state) => {
          if (state === sdk.SyncState.Prepared) resolve();
          if (state === sdk.SyncState.Error) reject(new Error('the first sync failed'));
        });
      });
      await client.startClient({ initialSyncLimit: 10 });
      await prepared;

      const bot: StoryBot = {
        userId: me,
        sawJoin: (roomId, member) =>
          new Promise((resolve) => {
            // The join may already be in the SDK's copy of the room.
            if (client.getRoom(roomId)?.getMember(member)?.membership === 'join') return resolve(undefined);
            const wake = (joinedRoom: string, userId: string) => {
              if (joinedRoom !== roomId || userId !== member) return;
              joinWaiters.delete(wake);
              resolve(undefined);
            };
            joinWaiters.add(wake);
          }),
        createRoomAndInvite: async (name, invitee) => (await client.createRoom({ name, invite: [invitee] })).room_id,
        async openDm(other) {
          const { room_id: roomId } = await client.createRoom({ is_direct: true, invite: [other], preset: sdk.Preset.TrustedPrivateChat });
          // Resolves only once the change comes back in a sync.
          await client.setAccountData(sdk.EventType.Direct, { [other]: [roomId] });
          return roomId;
        },
        async sendImage(roomId, data, name, mimetype) {
          const { content_uri: mxc } = await client.uploadContent(data, { name, type: mimetype });
          await client.sendMessage(roomId, { msgtype: sdk.MsgType.Image, body: name, url: mxc, info: { mimetype, size: data.length } });
          return mxc;
        },
        stop: () => client.stopClient(),
      };
      return bot;
    });
  });
});
