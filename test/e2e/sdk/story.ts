/**
 * The life of a bot, the same for every SDK: log in with a password, sync, auto-join on invite,
 * answer `!echo <text>` with `echo: <text>`, see a member join, create a room and invite someone,
 * open a direct chat and record it in `m.direct`, upload an image and send it.
 * The people around the bot are driven through the test double; the bot is the real SDK.
 */
import { expect } from 'vitest';
import type { TestAccount, TestHomeserver } from '../../../src/testing/index.js';

// A 1x1 PNG.
export const PNG = Buffer.from(
  '89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082',
  'hex',
);

/** What each SDK's bot must be able to do when asked; the rest it does by itself once started. */
export interface StoryBot {
  userId: string;
  /** Resolves with the member event once the bot has seen `userId` join `roomId`. */
  sawJoin(roomId: string, userId: string): Promise<unknown>;
  createRoomAndInvite(name: string, userId: string): Promise<string>;
  /** Creates a direct chat with `userId` and records it in the bot's `m.direct`. */
  openDm(userId: string): Promise<string>;
  /** Uploads the bytes and sends them as an `m.image`; resolves with the mxc URI. */
  sendImage(roomId: string, data: Buffer, name: string, mimetype: string): Promise<string>;
  stop(): Promise<void> | void;
}

export interface StoryCast {
  alice: TestAccount;
  carol: TestAccount;
}

/**
 * Runs the story. `startBot` logs the bot in with its password and starts its sync loop (the bot
 * auto-joins invites and answers `!echo`).
 */
export async function runBotStory(
  hs: TestHomeserver,
  startBot: (login: { userId: string; localpart: string; password: string; cast: StoryCast }) => Promise<StoryBot>,
): Promise<void> {
  const alice = await hs.createUser('alice');
  const carol = await hs.createUser('carol');
  const credentials = await hs.createBot('storybot');
  const bot = await startBot({ userId: credentials.userId, localpart: credentials.localpart, password: credentials.secret, cast: { alice, carol } });
  expect(bot.userId).toBe(credentials.userId);
  try {
    // Invited, the bot joins by itself.
    const roomId = await hs.createRoom(alice, { name: 'Story', preset: 'public_chat' });
    await hs.invite(alice, roomId, bot.userId);
    await hs.waitFor(roomId, (e) => e.type === 'm.room.member' && e.state_key === bot.userId && e.content.membership === 'join');

    // It answers a message.
    const question = await hs.send(alice, roomId, '!echo hello bots');
    const reply = await hs.waitFor(roomId, (e) => e.sender === bot.userId && e.type === 'm.room.message', { after: question });
    expect(reply.content.body).toContain('echo: hello bots');

    // It sees someone else join.
    const seen = bot.sawJoin(roomId, carol.userId);
    await hs.join(carol, roomId);
    await seen;

    // It creates a room and invites.
    const ownRoom = await bot.createRoomAndInvite('Bot room', alice.userId);
    const invite = await hs.waitFor(ownRoom, (e) => e.type === 'm.room.member' && e.state_key === alice.userId);
    expect(invite).toMatchObject({ sender: bot.userId, content: { membership: 'invite' } });
    expect((await hs.waitFor(ownRoom, (e) => e.type === 'm.room.name')).content).toEqual({ name: 'Bot room' });

    // It opens a direct chat and records it.
    const dm = await bot.openDm(alice.userId);
    const dmInvite = await hs.waitFor(dm, (e) => e.type === 'm.room.member' && e.state_key === alice.userId);
    expect(dmInvite.content).toMatchObject({ membership: 'invite', is_direct: true });
    expect(await hs.services.accountData.get(bot.userId, undefined, 'm.direct')).toEqual({ [alice.userId]: [dm] });

    // It uploads an image and sends it; the bytes come back from the mxc URI.
    const mxc = await bot.sendImage(roomId, PNG, 'dot.png', 'image/png');
    const image = await hs.waitFor(roomId, (e) => e.sender === bot.userId && e.content.msgtype === 'm.image');
    expect(image.content).toMatchObject({ url: mxc, body: 'dot.png' });
    const [server, mediaId] = mxc.slice('mxc://'.length).split('/');
    const download = await fetch(`${hs.baseUrl}/_matrix/media/v3/download/${server}/${mediaId}`);
    expect(download.status).toBe(200);
    expect(download.headers.get('content-type')).toBe('image/png');
    expect(Buffer.compare(Buffer.from(await download.arrayBuffer()), PNG)).toBe(0);
  } finally {
    await bot.stop();
  }
}
