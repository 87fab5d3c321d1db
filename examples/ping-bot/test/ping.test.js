import { startTestHomeserver } from 'bot-homeserver/testing';
import { LogLevel, LogService, MatrixAuth } from 'matrix-bot-sdk';
import { afterAll, beforeAll, beforeEach, expect, it } from 'vitest';
import { setUpMyBot } from '../src/bot.js';

LogService.setLevel(LogLevel.WARN); // matrix-bot-sdk logs every request at INFO

/** @type {import('bot-homeserver/testing').TestHomeserver} */
let hs;
beforeAll(async () => { hs = await startTestHomeserver(); });   // one server per test file
beforeEach(() => hs.reset());                                    // empty state per test, same URL
afterAll(() => hs.close());

it('answers !ping', async () => {
  const bot = await hs.createBot('pingbot');
  const alice = await hs.createUser('alice');

  const client = await new MatrixAuth(hs.baseUrl).passwordLogin('pingbot', bot.secret);
  await setUpMyBot(client);
  await client.start();

  const roomId = await hs.createRoom(alice, { name: 'Test', members: [bot] });
  const ping = await hs.send(alice, roomId, '!ping');
  const reply = await hs.waitFor(roomId, (e) => e.sender === bot.userId, { after: ping });
  expect(reply.content.body).toBe('pong');
  client.stop();
});
