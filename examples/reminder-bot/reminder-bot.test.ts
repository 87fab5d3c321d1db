/** The reminder bot against the test double, with a schedule the test fires by hand. */
import { LogLevel, LogService, MatrixAuth, type MatrixClient } from 'matrix-bot-sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestHomeserver, type TestHomeserver } from 'bot-homeserver/testing';
import { parseRemind, setUpReminderBot } from './reminder-bot.js';

describe('parseRemind', () => {
  it.each([
    ['!remind 10m stand up', { ms: 600_000, text: 'stand up' }],
    ['!remind 2h  drink water ', { ms: 7_200_000, text: 'drink water' }],
    ['!remind 5s x', { ms: 5000, text: 'x' }],
    ['hello', null],
    ['!reminder 5m x', null],
  ])('%s', (body, expected) => {
    expect(parseRemind(body)).toEqual(expected);
  });
  it('explains what is wrong', () => {
    expect(parseRemind('!remind soon')).toMatchObject({ error: expect.stringContaining('Usage') });
    expect(parseRemind('!remind 0m x')).toMatchObject({ error: expect.stringContaining('between') });
    expect(parseRemind('!remind 31d x')).toMatchObject({ error: expect.stringContaining('between') });
  });
});

describe('reminder bot', () => {
  let hs: TestHomeserver;
  let client: MatrixClient;
  const scheduled: Array<{ ms: number; run: () => void }> = [];

  beforeAll(async () => {
    // The SDK logs expected 404s (unset account data) as errors; keep test output clean.
    LogService.setLogger({ info() {}, warn() {}, error() {}, debug() {}, trace() {} });
    LogService.setLevel(LogLevel.ERROR);
    hs = await startTestHomeserver();
  });
  afterAll(async () => {
    client?.stop();
    await hs.close();
  });

  it('acknowledges, then reminds when the time comes', async () => {
    const bot = await hs.createBot('reminder');
    const alice = await hs.createUser('alice');
    client = await new MatrixAuth(hs.baseUrl).passwordLogin('reminder', bot.secret);
    await setUpReminderBot(client, (ms, run) => scheduled.push({ ms, run }));
    await client.start();
    const roomId = await hs.createRoom(alice, { invite: [bot] });
    await hs.waitFor(roomId, (e) => e.type === 'm.room.member' && e.state_key === bot.userId && e.content.membership === 'join');

    const ask = await hs.send(alice, roomId, '!remind 10m stand up');
    const ack = await hs.waitFor(roomId, (e) => e.sender === bot.userId, { after: ask });
    expect(ack.content.body).toContain('OK, I will remind you in 10m.');
    expect(scheduled.map((s) => s.ms)).toEqual([600_000]);

    scheduled[0]!.run();
    const reminder = await hs.waitFor(roomId, (e) => e.sender === bot.userId, { after: ack.event_id });
    expect(reminder.content).toMatchObject({ body: `${alice.userId}: ⏰ stand up`, 'm.mentions': { user_ids: [alice.userId] } });

    const bad = await hs.send(alice, roomId, '!remind whenever');
    const help = await hs.waitFor(roomId, (e) => e.sender === bot.userId, { after: bad });
    expect(help.content.body).toContain('Usage');
    expect(scheduled).toHaveLength(1);
  });
});
