/** The welcome bot against the test double: the pattern a bot project would copy. */
import { LogLevel, LogService, MatrixAuth, type MatrixClient } from 'matrix-bot-sdk';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startTestHomeserver, type TestHomeserver } from 'bot-homeserver/testing';
import { setUpWelcomeBot } from './welcome-bot.js';

let hs: TestHomeserver;
let client: MatrixClient;

beforeAll(async () => {
  LogService.setLevel(LogLevel.ERROR);
  hs = await startTestHomeserver();
});
afterAll(async () => {
  client?.stop();
  await hs.close();
});

it('greets each newcomer once, by display name', async () => {
  const bot = await hs.createBot('welcome');
  const alice = await hs.createUser('alice');
  const bob = await hs.createUser('bob', { displayName: 'Bob' });

  client = await new MatrixAuth(hs.baseUrl).passwordLogin('welcome', bot.secret);
  await setUpWelcomeBot(client);
  await client.start();

  const roomId = await hs.createRoom(alice, { preset: 'public_chat', invite: [bot] });
  await hs.waitFor(roomId, (e) => e.type === 'm.room.member' && e.state_key === bot.userId && e.content.membership === 'join');

  const joined = (await hs.timeline(roomId)).length;
  await hs.join(bob, roomId);
  const greeting = await hs.waitFor(roomId, (e) => e.sender === bot.userId && e.type === 'm.room.message');
  expect(greeting.content).toEqual({ msgtype: 'm.notice', body: 'Welcome, Bob! 👋' });

  // A profile change is not a new member. The bot handles events in order, so once carol's
  // greeting is there, the rename before it has been seen (and must not have been greeted).
  await hs.setState(bob, roomId, 'm.room.member', bob.userId, { membership: 'join', displayname: 'Robert' });
  const carol = await hs.createUser('carol');
  await hs.join(carol, roomId);
  await hs.waitFor(roomId, (e) => e.sender === bot.userId && e.content.body === 'Welcome, carol! 👋');
  const greetings = (await hs.timeline(roomId)).slice(joined).filter((e) => e.sender === bot.userId);
  expect(greetings.map((e) => e.content.body)).toEqual(['Welcome, Bob! 👋', 'Welcome, carol! 👋']);
});
