/** `bot-homeserver/testing`: the test double bot projects use, through its own helpers and plain HTTP. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestHomeserver, TestHomeserverError, type TestHomeserver } from '../../src/testing/index.js';

let hs: TestHomeserver;
beforeAll(async () => {
  hs = await startTestHomeserver();
});
afterAll(() => hs.close());

async function get(path: string, token: string): Promise<Response> {
  return fetch(`${hs.baseUrl}${path}`, { headers: { Authorization: `Bearer ${token}` } });
}

describe('startTestHomeserver', () => {
  it('listens on 127.0.0.1 and creates users and bots that can log in over HTTP', async () => {
    expect(hs.baseUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(hs.serverName).toBe('localhost');
    const alice = await hs.createUser('alice', { displayName: 'Alice' });
    const bot = await hs.createBot('helper');
    expect(alice.userId).toBe('@alice:localhost');
    expect(bot).toMatchObject({ userId: '@helper:localhost', secret: bot.password });
    expect(await (await get('/_matrix/client/v3/account/whoami', bot.accessToken)).json()).toMatchObject({ user_id: bot.userId });
    const login = await fetch(`${hs.baseUrl}/_matrix/client/v3/login`, {
      method: 'POST',
      body: JSON.stringify({ type: 'm.login.password', identifier: { type: 'm.id.user', user: 'helper' }, password: bot.secret }),
    });
    const answer = (await login.json()) as { well_known: unknown };
    // SDKs that follow well_known (matrix-bot-sdk does) must land back here.
    expect(answer.well_known).toEqual({ 'm.homeserver': { base_url: `${hs.baseUrl}/` } });
  });

  it('sets up rooms, sends, and waits for events without polling', async () => {
    const owner = await hs.createUser('owner');
    const member = await hs.createUser('member');
    const guest = await hs.createUser('guest');
    const roomId = await hs.createRoom(owner, { name: 'Lobby', members: [member], invite: [guest] });
    const timeline = await hs.timeline(roomId);
    expect(timeline.map((e) => e.type)).toContain('m.room.name');
    expect(timeline.filter((e) => e.type === 'm.room.member').map((e) => [e.state_key, e.content.membership])).toEqual([
      [owner.userId, 'join'],
      [guest.userId, 'invite'],
      [member.userId, 'invite'],
      [member.userId, 'join'],
    ]);

    // The event arrives after waitFor starts waiting.
    const waiting = hs.waitFor(roomId, (e) => e.type === 'm.room.message' && e.content.body === 'later');
    const first = await hs.send(member, roomId, 'sooner');
    const later = await hs.send(member, roomId, 'later');
    expect((await waiting).event_id).toBe(later);

    // Events from before the call count too, unless `after` says otherwise.
    expect((await hs.waitFor(roomId, (e) => e.content.body === 'sooner')).event_id).toBe(first);
    const afterFirst = hs.waitFor(roomId, (e) => e.type === 'm.room.message', { after: first });
    expect((await afterFirst).event_id).toBe(later);

    await hs.join(guest, roomId);
    await hs.setState(owner, roomId, 'm.room.topic', '', { topic: 'hello' });
    expect((await hs.waitFor(roomId, (e) => e.type === 'm.room.topic')).content).toEqual({ topic: 'hello' });
  });

  it('rejects waitFor after the timeout, saying what it saw', async () => {
    const owner = await hs.createUser('waiter');
    const roomId = await hs.createRoom(owner);
    await expect(hs.waitFor(roomId, () => false, { timeout: 50 })).rejects.toThrow(/no matching event.*\n.*m\.room\.create/);
  });

  it('reports HTTP errors with their errcode', async () => {
    const a = await hs.createUser('errs');
    await expect(hs.join(a, '!nope:localhost')).rejects.toMatchObject({ name: 'TestHomeserverError', errcode: 'M_NOT_FOUND', status: 404 });
    await expect(hs.createUser('errs')).rejects.toMatchObject({ errcode: 'M_USER_IN_USE' });
    expect(TestHomeserverError).toBeTypeOf('function');
  });

  it('throws TestHomeserverError from every helper, naming what it was asked', async () => {
    await hs.createUser('taken');
    const taken = await hs.createUser('taken').catch((err: unknown) => err);
    expect(taken).toBeInstanceOf(TestHomeserverError);
    expect(taken).toMatchObject({ status: 400, errcode: 'M_USER_IN_USE', message: expect.stringContaining('createUser("taken")') });
    const bad = await hs.createBot('Bad Name').catch((err: unknown) => err);
    expect(bad).toBeInstanceOf(TestHomeserverError);
    expect(bad).toMatchObject({ errcode: 'M_INVALID_USERNAME', message: expect.stringContaining('createBot("Bad Name")') });
    const someone = await hs.createUser('someone');
    const refused = await hs.join(someone, '!nope:localhost').catch((err: unknown) => err);
    expect((refused as Error).message).toContain(`as ${someone.userId}`);
    // Misuse is the same type, without a status.
    const timedOut = await hs.waitFor(await hs.createRoom(someone), () => false, { timeout: 10 }).catch((err: unknown) => err);
    expect(timedOut).toBeInstanceOf(TestHomeserverError);
    expect(timedOut).toMatchObject({ status: undefined, errcode: undefined });
    // What join, invite and leave resolve with.
    const room = await hs.createRoom(someone, { alias: 'helpers-answer', preset: 'public_chat' });
    const other = await hs.createUser('other-helper');
    expect(await hs.join(other, '#helpers-answer:localhost')).toBe(room);
    expect(await hs.invite(someone, room, await hs.createUser('invitee-helper'))).toBeUndefined();
    expect(await hs.leave(other, room)).toBeUndefined();
  });

  it('passes config overrides through and keeps the port across reset()', async () => {
    const small = await startTestHomeserver({ serverName: 'bots.test', config: { max_upload_size: 1234 } });
    try {
      const user = await small.createUser('u');
      expect(user.userId).toBe('@u:bots.test');
      expect(await (await fetch(`${small.baseUrl}/_matrix/media/v3/config`, { headers: { Authorization: `Bearer ${user.accessToken}` } })).json()).toEqual({ 'm.upload.size': 1234 });
      const roomId = await small.createRoom(user);
      const baseUrl = small.baseUrl;

      await small.reset();
      expect(small.baseUrl).toBe(baseUrl);
      // Everything is gone: the old token, the room, the user.
      expect((await fetch(`${baseUrl}/_matrix/client/v3/account/whoami`, { headers: { Authorization: `Bearer ${user.accessToken}` } })).status).toBe(401);
      const again = await small.createUser('u');
      expect(await small.timeline(roomId)).toEqual([]);
      expect(again.userId).toBe('@u:bots.test');
    } finally {
      await small.close();
    }
    await expect(fetch(`${small.baseUrl}/_matrix/client/versions`)).rejects.toThrow();
  });
});

describe('the bridge in the test double', () => {
  it('makes webhooks and follows feeds served by the test itself, without waiting for intervals', async () => {
    const { startFeedServer } = await import('../support/feed-server.js');
    const feeds = await startFeedServer();
    try {
      const owner = await hs.createUser('bridge-owner');
      const bridgeId = hs.bridgeUserId!;
      expect(bridgeId).toBe('@bridge:localhost');
      const roomId = await hs.createRoom(owner, { invite: [bridgeId], extra: { power_level_content_override: { users: { [owner.userId]: 100, [bridgeId]: 50 } } } });
      await hs.waitFor(roomId, (e) => e.type === 'm.room.member' && e.state_key === bridgeId && e.content.membership === 'join');

      const rss = (items: string[]) =>
        `<?xml version="1.0"?><rss version="2.0"><channel><title>Status</title><link>https://status.example/</link>${items
          .map((title) => `<item><title>${title}</title><guid>${title}</guid><link>https://status.example/${title}</link></item>`)
          .join('')}</channel></rss>`;
      feeds.serve('/status.xml', { body: rss(['old']) });
      const command = await hs.send(owner, roomId, `!bridge feed ${feeds.url('/status.xml')}`);
      await hs.waitFor(roomId, (e) => e.sender === bridgeId && String(e.content.body).includes('now follows Status'), { after: command });
      feeds.serve('/status.xml', { body: rss(['incident', 'old']) });
      await hs.pollFeeds();
      const item = await hs.waitFor(roomId, (e) => e.sender === bridgeId && String(e.content.body).startsWith('Status: incident'));
      expect(item.content.body).toContain('https://status.example/incident');

      const asked = await hs.send(owner, roomId, '!bridge webhook alerts');
      await hs.waitFor(roomId, (e) => e.sender === bridgeId && String(e.content.body).startsWith('Created the webhook'), { after: asked });
      const direct = await hs.services.accountData.get(bridgeId, undefined, 'm.direct');
      const dm = (direct[owner.userId] as string[])[0]!;
      const details = await hs.waitFor(dm, (e) => e.sender === bridgeId && String(e.content.body).includes('/webhook/'));
      const url = String(details.content.body).split('\n').find((line) => line.startsWith(hs.baseUrl))!;
      const posted = await fetch(url, { method: 'POST', body: JSON.stringify({ text: 'disk full' }) });
      expect(posted.status).toBe(200);
      expect((await hs.waitFor(roomId, (e) => e.content.body === 'disk full')).sender).toBe(bridgeId);
    } finally {
      await feeds.close();
    }
  });
});

describe('reset and close', () => {
  it('a close() during reset() leaves nothing running, and reset() refuses a database file', async () => {
    const server = await startTestHomeserver();
    const resetting = server.reset();
    await server.close();
    await resetting;
    await expect(fetch(`${server.baseUrl}/_matrix/client/versions`)).rejects.toThrow();
    await expect(server.reset()).rejects.toThrow('closed');

    const { mkdtempSync, rmSync } = await import('node:fs');
    const { join } = await import('node:path');
    const { tmpdir } = await import('node:os');
    const dir = mkdtempSync(join(tmpdir(), 'bhs-reset-'));
    const onDisk = await startTestHomeserver({ config: { database: { path: join(dir, 'hs.db') } } });
    try {
      await expect(onDisk.reset()).rejects.toThrow('in-memory database');
    } finally {
      await onDisk.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
