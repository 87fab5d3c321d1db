/** Fault injection and the request log of the test double: what a bot's retry logic is tested with. */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import * as sdk from 'matrix-js-sdk';
import { logger } from 'matrix-js-sdk/lib/logger.js';
import { startTestHomeserver, type TestHomeserver } from '../../src/testing/index.js';

let hs: TestHomeserver;
beforeAll(async () => {
  hs = await startTestHomeserver();
});
beforeEach(() => hs.reset());
afterAll(() => hs.close());

const auth = (token: string) => ({ Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' });

async function send(token: string, roomId: string, txnId: string): Promise<Response> {
  return fetch(`${hs.baseUrl}/_matrix/client/v3/rooms/${encodeURIComponent(roomId)}/send/m.room.message/${txnId}`, {
    method: 'PUT',
    headers: auth(token),
    body: JSON.stringify({ msgtype: 'm.text', body: txnId }),
  });
}

describe('hs.faults', () => {
  it('answers the next matching requests 429 with retry_after_ms, then lets them through', async () => {
    const bot = await hs.createBot('retrier');
    const room = await hs.createRoom(bot);
    const fault = hs.faults.rateLimit('PUT /_matrix/client/*/rooms/*/send/*/*', { times: 2, retryAfterMs: 250 });
    const first = await send(bot.accessToken, room, 'a');
    expect(first.status).toBe(429);
    expect(first.headers.get('retry-after')).toBe('1');
    expect(await first.json()).toEqual({ errcode: 'M_LIMIT_EXCEEDED', error: 'Too Many Requests', retry_after_ms: 250 });
    expect((await send(bot.accessToken, room, 'a')).status).toBe(429);
    expect(fault.remaining).toBe(0);
    expect((await send(bot.accessToken, room, 'a')).status).toBe(200);
    // Requests that do not match are never touched.
    expect((await fetch(`${hs.baseUrl}/_matrix/client/versions`)).status).toBe(200);

    // What the bot did, as the server saw it: two refusals, then the send.
    const sends = hs.requests.filter((r) => r.path.includes('/send/'));
    expect(sends.map((r) => [r.status, r.fault, r.userId])).toEqual([
      [429, '429', undefined],
      [429, '429', undefined],
      [200, undefined, bot.userId],
    ]);
    expect((await hs.sentBy(bot, room)).filter((e) => e.type === 'm.room.message').map((e) => e.content.body)).toEqual(['a']);
  });

  it('answers 500, drops the connection, hangs, or serves late', async () => {
    const bot = await hs.createBot('unlucky');
    hs.faults.serverError('/_matrix/client/v3/account/whoami');
    const failed = await fetch(`${hs.baseUrl}/_matrix/client/v3/account/whoami`, { headers: auth(bot.accessToken) });
    expect(failed.status).toBe(500);
    expect(((await failed.json()) as { errcode: string }).errcode).toBe('M_UNKNOWN');

    hs.faults.drop(/\/whoami$/);
    await expect(fetch(`${hs.baseUrl}/_matrix/client/v3/account/whoami`, { headers: auth(bot.accessToken) })).rejects.toThrow();

    hs.faults.hang('GET /_matrix/client/v3/account/whoami');
    const hung = fetch(`${hs.baseUrl}/_matrix/client/v3/account/whoami`, { headers: auth(bot.accessToken), signal: AbortSignal.timeout(300) });
    await expect(hung).rejects.toThrow(/timeout|aborted/i);

    hs.faults.delay('GET /_matrix/client/v3/account/whoami', 200);
    const started = performance.now();
    const late = await fetch(`${hs.baseUrl}/_matrix/client/v3/account/whoami`, { headers: auth(bot.accessToken) });
    expect(late.status).toBe(200);
    expect(performance.now() - started).toBeGreaterThanOrEqual(190);
    expect(hs.requests.filter((r) => r.path.endsWith('/whoami')).map((r) => r.fault)).toEqual(['500', 'drop', 'hang', 'delay']);
  });

  it('stalls every sync until removed; reset() removes every fault and empties the log', async () => {
    const bot = await hs.createBot('patient');
    const stall = hs.faults.stallSync(150);
    const t0 = performance.now();
    expect((await fetch(`${hs.baseUrl}/_matrix/client/r0/sync`, { headers: auth(bot.accessToken) })).status).toBe(200);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(140);
    expect(stall.hits).toBe(1);
    stall.remove();
    hs.faults.serverError('/_matrix/client/versions', { times: Infinity });
    await hs.reset();
    expect(hs.requests).toEqual([]);
    expect((await fetch(`${hs.baseUrl}/_matrix/client/versions`)).status).toBe(200);
  });

  it('keeps tokens out of the log and bounds it', async () => {
    const bot = await hs.createBot('logged');
    await fetch(`${hs.baseUrl}/_matrix/client/v3/account/whoami?access_token=${bot.accessToken}&x=1`);
    const entry = hs.requests.at(-1)!;
    expect(entry).toMatchObject({ method: 'GET', path: '/_matrix/client/v3/account/whoami', query: 'access_token=<redacted>&x=1', status: 200, userId: bot.userId });
    for (let i = 0; i < 1_010; i++) await fetch(`${hs.baseUrl}/_matrix/client/versions`);
    expect(hs.requests.length).toBe(1_000);
  });

  it('lets a real SDK show its retry logic: matrix-js-sdk waits out two 429s and sends once', async () => {
    // The SDK's logger is a loglevel logger; its types do not say so.
    (logger as unknown as { disableAll(): void }).disableAll();
    const bot = await hs.createBot('js-retrier');
    const room = await hs.createRoom(bot);
    const client = sdk.createClient({ baseUrl: hs.baseUrl, accessToken: bot.accessToken, userId: bot.userId, scheduler: new sdk.MatrixScheduler() });
    hs.faults.rateLimit('PUT /_matrix/client/*/rooms/*/send/m.room.message/*', { times: 2, retryAfterMs: 20 });
    const { event_id: eventId } = await client.sendTextMessage(room, 'sent despite the limit');
    expect(hs.requests.filter((r) => r.path.includes('/send/')).map((r) => r.status)).toEqual([429, 429, 200]);
    const sent = (await hs.sentBy(bot, room)).filter((e) => e.type === 'm.room.message');
    expect(sent.map((e) => [e.event_id, e.content.body])).toEqual([[eventId, 'sent despite the limit']]);
    client.stopClient();
  });
});
