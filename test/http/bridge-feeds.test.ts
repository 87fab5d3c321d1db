import { capturingLogger } from '../support/logs.js';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createUser, FakeClock, startTestHomeserver, type TestHomeserver } from '../support/homeserver.js';
import { client, clientsFor, type Json, type TestClient } from '../support/client.js';
import { bridgeIdOf, command, promoteBridge, roomWithBridge, withBridge } from '../support/bridge.js';
import { startFeedServer, type FeedServer } from '../support/feed-server.js';
import { FAILURE_NOTICE_AFTER } from '../../src/bridge/feeds/service.js';
import { persistentDatabase } from '../support/test-schemas.js';

const FEEDS = resolve(import.meta.dirname, '../fixtures/feeds');
const fixture = (name: string) => readFileSync(join(FEEDS, name), 'utf8');
const INTERVAL_S = 60;
const feedConfig = (extra: Record<string, unknown> = {}) =>
  withBridge({ feeds: { poll_interval_seconds: INTERVAL_S, allow_private_addresses: true, max_items_per_poll: 3, ...extra } });

/** The WordPress fixture with extra items placed first (newest first, as the feed lists them). */
function blogWith(newItems: Array<{ guid: string; title: string; date: string }>): string {
  const base = fixture('rss2-wordpress-natashatherobot.xml');
  const items = newItems
    .map((item) => `<item><title>${item.title}</title><link>https://blog.example/${item.guid}</link><guid isPermaLink="false">${item.guid}</guid><pubDate>${item.date}</pubDate><description><![CDATA[<p>About ${item.title} <script>alert(1)</script></p>]]></description></item>`)
    .join('');
  const at = base.indexOf('<item>');
  return base.slice(0, at) + items + base.slice(at);
}

const rss = (items: string) =>
  `<?xml version="1.0"?><rss version="2.0"><channel><title>Archive</title><link>https://archive.example/</link>${items}</channel></rss>`;

let hs: TestHomeserver | undefined;
let feeds: FeedServer;
const dirs: string[] = [];
beforeEach(async () => {
  feeds = await startFeedServer();
});
afterEach(async () => {
  await hs?.close();
  hs = undefined;
  await feeds.close();
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

async function pollAfter(server: TestHomeserver, seconds: number): Promise<void> {
  server.clock.advance(seconds * 1000);
  await server.app.homeserver.bridge!.feeds.pollDue();
}

/** Bridge messages in the room from the server's history (not a client's view). */
async function bridgeSaid(server: TestHomeserver, viewer: TestClient, roomId: string): Promise<Json[]> {
  const history = await viewer.ok('GET', `/rooms/${encodeURIComponent(roomId)}/messages`, undefined, { dir: 'f', limit: 1000 });
  return (history.chunk as Json[]).filter((event) => event.sender === bridgeIdOf(server) && event.type === 'm.room.message');
}

/** Alice's room with the bridge following the (empty) blog feed as "Blog"; `before`: what the bridge has said there. */
async function followingBlog(server: TestHomeserver): Promise<{ alice: TestClient; roomId: string; before: number }> {
  const [alice] = await clientsFor(server, 'alice');
  const roomId = await roomWithBridge(server, alice);
  feeds.serve('/blog.xml', { body: blogWith([]) });
  await command(server, alice, roomId, `!bridge feed ${feeds.url('/blog.xml')} Blog`);
  return { alice, roomId, before: (await bridgeSaid(server, alice, roomId)).length };
}

describe('bridge feeds', () => {
  it('subscribes without posting old items, posts new ones exactly once across 304s and a restart', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'bhs-feeds-'));
    dirs.push(dir);
    const config = { ...persistentDatabase(join(dir, 'hs.db')), ...feedConfig() };
    const clock = new FakeClock();
    hs = await startTestHomeserver(config, { clock });
    const aliceUser = await createUser(hs, 'alice');
    let alice = client(hs, aliceUser);
    const roomId = await roomWithBridge(hs, alice);
    feeds.serve('/blog.xml', { body: blogWith([]), etag: '"v1"' });

    const added = await command(hs, alice, roomId, `!bridge feed ${feeds.url('/blog.xml')} Team blog`);
    expect(added.content.body).toContain('now follows Team blog');
    expect(added.content.body).toContain('current 10 items are not posted');
    const afterSubscribe = (await bridgeSaid(hs, alice, roomId)).length;

    // Unchanged: a conditional GET answered 304, nothing posted.
    await pollAfter(hs, INTERVAL_S * 2);
    expect(feeds.requests.at(-1)).toMatchObject({ status: 304, headers: { 'if-none-match': '"v1"' } });
    expect((await bridgeSaid(hs, alice, roomId)).length).toBe(afterSubscribe);

    feeds.serve('/blog.xml', {
      body: blogWith([
        { guid: 'post-b', title: 'Second &amp; newer', date: 'Tue, 02 Jan 2035 10:00:00 +0000' },
        { guid: 'post-a', title: 'First new post', date: 'Mon, 01 Jan 2035 10:00:00 +0000' },
      ]),
      etag: '"v2"',
    });
    await pollAfter(hs, INTERVAL_S * 2);
    let said = await bridgeSaid(hs, alice, roomId);
    const posted = said.slice(afterSubscribe);
    expect(posted.map((event) => event.content.body.split('\n')[0])).toEqual(['Team blog: First new post', 'Team blog: Second & newer']);
    expect(posted[0]!.content).toMatchObject({
      msgtype: 'm.notice',
      format: 'org.matrix.custom.html',
      body: expect.stringContaining('https://blog.example/post-a'),
      formatted_body: expect.stringContaining('<a href="https://blog.example/post-a">First new post</a>'),
    });
    expect(posted[0]!.content.formatted_body).not.toContain('script');

    // Polling again, and after a restart, posts nothing twice; a newer item appears once.
    await pollAfter(hs, INTERVAL_S * 2);
    await hs.close();
    hs = await startTestHomeserver(config, { clock });
    alice = client(hs, aliceUser);
    await pollAfter(hs, INTERVAL_S * 2);
    expect((await bridgeSaid(hs, alice, roomId)).length).toBe(said.length);
    feeds.serve('/blog.xml', {
      body: blogWith([
        { guid: 'post-c', title: 'Third', date: 'Wed, 03 Jan 2035 10:00:00 +0000' },
        { guid: 'post-b', title: 'Second &amp; newer', date: 'Tue, 02 Jan 2035 10:00:00 +0000' },
        { guid: 'post-a', title: 'First new post', date: 'Mon, 01 Jan 2035 10:00:00 +0000' },
      ]),
      etag: '"v3"',
    });
    await pollAfter(hs, INTERVAL_S * 2);
    await pollAfter(hs, INTERVAL_S * 2);
    said = await bridgeSaid(hs, alice, roomId);
    const titles = said.map((event) => String(event.content.body).split('\n')[0]);
    for (const title of ['Team blog: First new post', 'Team blog: Second & newer', 'Team blog: Third']) {
      expect(titles.filter((line) => line === title)).toHaveLength(1);
    }
    // The ETag was kept across the restart.
    expect(feeds.requests.filter((request) => request.headers['if-none-match'] === '"v2"').length).toBeGreaterThan(0);

    const list = await command(hs, alice, roomId, '!bridge feed list');
    expect(list.content.body).toContain(`Team blog: ${feeds.url('/blog.xml')} (last fetched`);
  });

  it('fetches a feed once per interval for all rooms, caps items per poll, and reports failure streaks once', async () => {
    hs = await startTestHomeserver(feedConfig());
    const [alice, bob] = await clientsFor(hs, 'alice', 'bob');
    const first = await roomWithBridge(hs, alice);
    const second = await roomWithBridge(hs, bob);
    feeds.serve('/news.xml', { body: blogWith([]) });
    await command(hs, alice, first, `!bridge feed ${feeds.url('/news.xml')}`);
    const again = await command(hs, alice, first, `!bridge feed ${feeds.url('/news.xml')}`);
    expect(again.content.body).toContain('already follows');
    await command(hs, bob, second, `!bridge feed ${feeds.url('/news.xml')} News`);
    const before = [(await bridgeSaid(hs, alice, first)).length, (await bridgeSaid(hs, bob, second)).length];

    const fresh = Array.from({ length: 5 }, (_, i) => ({ guid: `n${i}`, title: `Item ${i}`, date: `Mon, 0${i + 1} Jan 2035 10:00:00 +0000` })).reverse();
    feeds.serve('/news.xml', { body: blogWith(fresh) });
    const requestsBefore = feeds.requests.length;
    await pollAfter(hs, INTERVAL_S * 2);
    expect(feeds.requests.length - requestsBefore).toBe(1);
    for (const [viewer, roomId, index, name] of [[alice, first, 0, 'Natasha The Robot'], [bob, second, 1, 'News']] as const) {
      const posted = (await bridgeSaid(hs, viewer, roomId)).slice(before[index]).map((event) => String(event.content.body).split('\n')[0]);
      // The newest three, oldest first, then one line for the rest.
      expect(posted).toEqual([`${name}: Item 2`, `${name}: Item 3`, `${name}: Item 4`, expect.stringContaining(`${name}: 2 more new items not shown`)]);
    }

    // A failing feed: one notice per room once it keeps failing, one when it recovers.
    feeds.serve('/news.xml', { body: 'oops', status: 500, contentType: 'text/plain' });
    const count = async () => (await bridgeSaid(hs!, alice, first)).length;
    const beforeFailures = await count();
    for (let i = 0; i < FAILURE_NOTICE_AFTER + 2; i += 1) await pollAfter(hs, 7 * 3600);
    const failed = (await bridgeSaid(hs, alice, first)).slice(beforeFailures);
    expect(failed).toHaveLength(1);
    expect(failed[0]!.content.body).toContain('has failed 3 times in a row');
    expect(failed[0]!.content.body).toContain('500');
    const listed = await command(hs, alice, first, '!bridge feed list');
    expect(listed.content.body).toContain('failing (5×)');
    feeds.serve('/news.xml', { body: blogWith(fresh) });
    await pollAfter(hs, 7 * 3600);
    const recovered = (await bridgeSaid(hs, alice, first)).slice(beforeFailures + 2);
    expect(recovered.map((event) => event.content.body)).toEqual([expect.stringContaining('works again')]);

    // Removing the last follower stops the fetching.
    await command(hs, alice, first, `!bridge feed remove ${feeds.url('/news.xml')}`);
    expect((await command(hs, bob, second, `!bridge feed remove ${feeds.url('/news.xml')}`)).content.body).toContain('no longer follows');
    const requestsAfterRemoval = feeds.requests.length;
    await pollAfter(hs, 7 * 3600);
    expect(feeds.requests.length).toBe(requestsAfterRemoval);
  });

  it('explains feeds it cannot add, and refuses private addresses unless allowed', async () => {
    const logs = capturingLogger('info');
    hs = await startTestHomeserver(withBridge({ feeds: { allow_private_addresses: false } }), { logger: logs.logger });
    const [alice, bob] = await clientsFor(hs, 'alice', 'bob');
    const roomId = await roomWithBridge(hs, alice, { invite: [bob.userId] });
    await bob.join(roomId);
    feeds.serve('/blog.xml', { body: blogWith([]) });

    const refused = await command(hs, alice, roomId, `!bridge feed ${feeds.url('/blog.xml')}`);
    expect(refused.content.body).toMatch(/I could not add .*(private|loopback|internal)/);
    // Who can change that, and the setting's name; the operator's log has it too.
    expect(refused.content.body).toContain("unless the server's operator allows them (bridge.feeds.allow_private_addresses in its configuration)");
    expect(logs.lines.some((line) => line.includes('feed refused: not on a public address') && line.includes(alice.userId))).toBe(true);
    expect(feeds.requests).toHaveLength(0);
    const notAllowed = await command(hs, bob, roomId, '!bridge feed https://blog.example/feed');
    expect(notAllowed.content.body).toContain('you have 0');
    expect((await command(hs, bob, roomId, '!bridge feed list')).content.body).toBe('This room follows no feeds.');
    expect((await command(hs, alice, roomId, '!bridge feed ftp://x/y')).content.body).toContain('Usage: !bridge feed');
  });

  it('says how many current items it leaves unposted, in good grammar for none and one', async () => {
    hs = await startTestHomeserver(feedConfig());
    const [alice] = await clientsFor(hs, 'alice');
    const roomId = await roomWithBridge(hs, alice);
    const item = '<item><title>Only</title><link>https://archive.example/only</link><guid>only</guid></item>';
    feeds.serve('/one.xml', { body: rss(item) });
    feeds.serve('/none.xml', { body: rss('') });
    expect((await command(hs, alice, roomId, `!bridge feed ${feeds.url('/one.xml')} One`)).content.body).toBe(
      `This room now follows One (${feeds.url('/one.xml')}). Its current item is not posted; new ones will be.`,
    );
    expect((await command(hs, alice, roomId, `!bridge feed ${feeds.url('/none.xml')} None`)).content.body).toBe(
      `This room now follows None (${feeds.url('/none.xml')}). It has no items yet; new ones will be posted.`,
    );
  });

  it('tells a user when the URL is a web page, not a feed', async () => {
    hs = await startTestHomeserver(feedConfig());
    const [alice] = await clientsFor(hs, 'alice');
    const roomId = await roomWithBridge(hs, alice);
    feeds.serve('/', { body: fixture('not-a-feed-daringfireball-homepage.html'), contentType: 'text/html; charset=utf-8' });
    const reply = await command(hs, alice, roomId, `!bridge feed ${feeds.url('/')}`);
    expect(reply.content.body).toContain('I could not add');
    expect(reply.content.body).toMatch(/HTML/i);
    expect(reply.content.body).toContain(feeds.url('/feeds/main'));
    feeds.serve('/gone.xml', { body: 'nope', status: 404, contentType: 'text/plain' });
    expect((await command(hs, alice, roomId, `!bridge feed ${feeds.url('/gone.xml')}`)).content.body).toContain('404');
  });

  it('does not lose an item it could not post, and posts huge items within the event limit', async () => {
    hs = await startTestHomeserver(feedConfig());
    const { alice, roomId, before } = await followingBlog(hs);

    const links = Array.from({ length: 400 }, (_, i) => `<a href="https://example.org/${'x'.repeat(300)}/${i}">link ${i}</a>`).join(' ');
    const body = blogWith([{ guid: 'huge', title: 'Newsletter', date: 'Mon, 01 Jan 2035 10:00:00 +0000' }]).replace('About Newsletter', links);
    feeds.serve('/blog.xml', { body });
    // The first attempt to post fails (the bridge may not send just now): the item waits.
    const bridge = hs.app.homeserver.bridge!;
    const post = bridge.post.bind(bridge);
    bridge.post = async () => {
      throw new Error('cannot send right now');
    };
    await pollAfter(hs, INTERVAL_S * 2);
    bridge.post = post;
    expect((await bridgeSaid(hs, alice, roomId)).length).toBe(before);
    await pollAfter(hs, INTERVAL_S * 2);
    await pollAfter(hs, INTERVAL_S * 2);
    const posted = (await bridgeSaid(hs, alice, roomId)).slice(before);
    expect(posted).toHaveLength(1);
    expect(posted[0]!.content.body).toContain('Blog: Newsletter');
    expect(Buffer.byteLength(JSON.stringify(posted[0]!.content))).toBeLessThan(20_000);
  });

  it('posts an item once when its poll runs again before the item was marked seen (a crash, a takeover)', async () => {
    hs = await startTestHomeserver(feedConfig());
    const { alice, roomId, before } = await followingBlog(hs);
    feeds.serve('/blog.xml', { body: blogWith([{ guid: 'once', title: 'Only once', date: 'Mon, 01 Jan 2035 10:00:00 +0000' }]) });
    // Posted, then the process dies before it records the item as seen.
    const bridgeStore = hs.services.storage.bridge;
    const markSeen = bridgeStore.markSeen.bind(bridgeStore);
    bridgeStore.markSeen = async () => {
      throw new Error('killed before marking');
    };
    await pollAfter(hs, INTERVAL_S * 2);
    bridgeStore.markSeen = markSeen;
    expect((await bridgeSaid(hs, alice, roomId)).slice(before)).toHaveLength(1);
    // The next poll (here, or in the process that took the feeds over) finds it unseen and posts
    // it with the same transaction id: the first event answers, no second one is made.
    await pollAfter(hs, INTERVAL_S * 2);
    await pollAfter(hs, INTERVAL_S * 2);
    const posted = (await bridgeSaid(hs, alice, roomId)).slice(before);
    expect(posted.map((event) => String(event.content.body).split('\n')[0])).toEqual(['Blog: Only once']);
  });

  it('keeps answering while it reads a 20,000-item feed, and reads only its newest items', async () => {
    hs = await startTestHomeserver(feedConfig({ max_bytes: 16 * 1024 * 1024 }));
    const [alice] = await clientsFor(hs, 'alice');
    const roomId = await roomWithBridge(hs, alice);
    // An archive that appends: its newest items are at the end.
    const items = Array.from({ length: 20_000 }, (_, i) => {
      const date = new Date(Date.UTC(2020, 0, 1) + i * 3_600_000).toUTCString();
      return `<item><title>Post ${i}</title><link>https://archive.example/${i}</link><pubDate>${date}</pubDate><description>Text of post ${i}</description></item>`;
    });
    feeds.serve('/archive.xml', { body: rss(items.join('')) });
    const served = feeds.whenServed('/archive.xml');
    const commandId = await alice.send(roomId, { msgtype: 'm.text', body: `!bridge feed ${feeds.url('/archive.xml')}` });
    const replied = alice.waitForEvent(roomId, (event) => event.content?.['m.relates_to']?.['m.in_reply_to']?.event_id === commandId);
    await served;
    // While the bridge parses the document, the server answers others. Parsed on the request
    // thread, as before, it answered none: the document held the event loop for a minute.
    const parser = hs.app.homeserver.bridge!.feedParser;
    while (!parser.busy) await new Promise((resolve) => setImmediate(resolve));
    let answered = 0;
    while (parser.busy) {
      expect((await hs.http.get('/_matrix/client/versions')).status).toBe(200);
      answered += 1;
    }
    expect(answered).toBeGreaterThanOrEqual(20);
    expect((await replied).content.body).toContain('current 500 items are not posted');

    // The newest 500 were read: a new item after them is news, an old one from the start is not.
    items.push('<item><title>Post 20000</title><link>https://archive.example/20000</link><pubDate>Sat, 01 Jan 2050 00:00:00 GMT</pubDate></item>');
    feeds.serve('/archive.xml', { body: rss(items.join('')) });
    await pollAfter(hs, INTERVAL_S * 2);
    const posted = (await bridgeSaid(hs, alice, roomId)).map((event) => String(event.content.body).split('\n')[0] ?? '');
    expect(posted.filter((line) => line.includes('Post '))).toEqual([expect.stringContaining('Post 20000')]);
  });

  it('ends a room\'s subscriptions when the bridge is kicked; a new invite starts with none', async () => {
    hs = await startTestHomeserver(feedConfig());
    const [alice] = await clientsFor(hs, 'alice');
    const roomId = await roomWithBridge(hs, alice);
    feeds.serve('/blog.xml', { body: blogWith([]) });
    await command(hs, alice, roomId, `!bridge feed ${feeds.url('/blog.xml')}`);
    await alice.ok('POST', `/rooms/${encodeURIComponent(roomId)}/kick`, { user_id: bridgeIdOf(hs) });
    await alice.invite(roomId, bridgeIdOf(hs));
    const bridgeId = bridgeIdOf(hs);
    const joins = () => alice.seenIn(roomId).filter((e) => e.type === 'm.room.member' && e.state_key === bridgeId && e.content.membership === 'join');
    const firstJoin = joins()[0]!.event_id;
    await alice.waitForEvent(roomId, (e) => e.type === 'm.room.member' && e.state_key === bridgeId && e.content.membership === 'join' && e.event_id !== firstJoin);
    await promoteBridge(hs, alice, roomId);
    expect((await command(hs, alice, roomId, '!bridge feed list')).content.body).toBe('This room follows no feeds.');
    const requests = feeds.requests.length;
    feeds.serve('/blog.xml', { body: blogWith([{ guid: 'new', title: 'New', date: 'Mon, 01 Jan 2035 10:00:00 +0000' }]) });
    await pollAfter(hs, INTERVAL_S * 2);
    expect(feeds.requests.length).toBe(requests);
  });
});
