/**
 * A large feed must not freeze the server (issue 14). A room member subscribes the bridge to a
 * 5 MiB RSS document of 20,000 items, served from this process; from the command until the
 * bridge's reply, /versions is asked back to back, and each answer's latency is recorded. Feeds
 * are parsed in a worker thread, so the main thread keeps answering while the document is read.
 */
import http from 'node:http';
import { Client, CS, roomPath } from '../lib/http-client.mjs';
import { registerUsers } from '../lib/setup.mjs';
import { summarize } from '../lib/stats.mjs';
import { round } from '../lib/server.mjs';

export const name = 'feed-parse';
export const standalone = true;

const BRIDGE = '@bridge:bench.local';
const FEED_BYTES = 5 * 1024 * 1024;
const WAIT_MS = 60_000;

/** @param {import('../run.mjs').StandaloneContext} ctx */
export async function run(ctx) {
  const feed = rssOf(FEED_BYTES);
  const origin = await serve(feed.body);
  const server = await ctx.startServer({
    synchronous: 'full',
    env: {
      BOT_HOMESERVER_BRIDGE__FEEDS__ALLOW_PRIVATE_ADDRESSES: 'true',
      BOT_HOMESERVER_BRIDGE__FEEDS__MAX_BYTES: String(2 * FEED_BYTES),
    },
  });
  const client = new Client(server.baseUrl);
  const prober = new Client(server.baseUrl);
  try {
    const [owner] = await registerUsers({ ...ctx, server }, 'feedowner', 1);
    const token = owner.access_token;
    const roomId = await roomWithBridge(client, token);
    const room = roomPath(roomId);
    let { next_batch: since } = await client.ok('GET', `${CS}/sync?timeout=0`, { token });

    const cpuFrom = server.cpuMs();
    const sent = performance.now();
    const { event_id: commandId } = await client.ok('PUT', `${CS}/rooms/${room}/send/m.room.message/${ctx.runId}-feed`, {
      token,
      body: { msgtype: 'm.text', body: `!bridge feed ${origin.url}` },
    });
    let replied;
    const reply = (async () => {
      while (!replied) {
        const body = await client.ok('GET', `${CS}/sync?timeout=10000&since=${encodeURIComponent(since)}`, { token, timeoutMs: 20_000 });
        since = body.next_batch;
        for (const event of body.rooms?.join?.[roomId]?.timeline?.events ?? []) {
          if (event.content?.['m.relates_to']?.['m.in_reply_to']?.event_id === commandId) replied = { event, ms: performance.now() - sent };
        }
        if (performance.now() - sent > WAIT_MS) throw new Error(`feed-parse: no reply from the bridge within ${WAIT_MS / 1000} s`);
      }
    })();
    const latencies = [];
    while (!replied) {
      const res = await prober.request('GET', '/_matrix/client/versions');
      if (res.status !== 200) throw new Error(`feed-parse: /versions answered ${res.status}`);
      latencies.push(res.ms);
    }
    await reply;
    const wallMs = performance.now() - sent;
    const cpuMs = server.cpuMs() - cpuFrom;
    const served = origin.servedAt === undefined ? undefined : round(origin.servedAt - sent);
    return [
      {
        scenario: name,
        variant: `/versions while a ${round(feed.body.length / 1048576, 1)} MiB feed (${feed.items} items) is fetched and parsed`,
        synchronous: 'full',
        params: { feed_bytes: feed.body.length, items: feed.items },
        ops: latencies.length,
        errors: 0,
        latency_ms: summarize(latencies),
        // The server's whole CPU time over the window (both threads), per /versions answered.
        server: { cpu_ms_per_op: round(cpuMs / latencies.length, 3), cpu_pct: round((cpuMs / wallMs) * 100, 1), rss_mb: server.memory().rssMb, rss_hwm_mb: server.memory().hwmMb ?? null },
        notes: [`the bridge replied ${round(replied.ms)} ms after the command (the document was served after ${served} ms): ${String(replied.event.content.body).slice(0, 100)}`],
        subscribe_ms: round(replied.ms),
        served_ms: served,
      },
    ];
  } finally {
    client.close();
    prober.close();
    origin.close();
  }
}

/** A room of `token`'s with the bridge joined and made Moderator; returns its id. */
async function roomWithBridge(client, token) {
  const { room_id: roomId } = await client.ok('POST', `${CS}/createRoom`, { token, body: { preset: 'public_chat', name: 'feed bench' } });
  const room = roomPath(roomId);
  await client.ok('POST', `${CS}/rooms/${room}/invite`, { token, body: { user_id: BRIDGE } });
  const deadline = Date.now() + 10_000;
  for (;;) {
    const { joined } = await client.ok('GET', `${CS}/rooms/${room}/joined_members`, { token });
    if (joined?.[BRIDGE] !== undefined) break;
    if (Date.now() > deadline) throw new Error('feed-parse: the bridge did not join within 10 s');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  const levels = await client.ok('GET', `${CS}/rooms/${room}/state/m.room.power_levels/`, { token });
  levels.users = { ...levels.users, [BRIDGE]: 50 };
  await client.ok('PUT', `${CS}/rooms/${room}/state/m.room.power_levels/`, { token, body: levels });
  return roomId;
}

/** An RSS 2.0 document of about `bytes`, newest item first, as a blog archive would be. */
function rssOf(bytes) {
  const head = '<?xml version="1.0" encoding="utf-8"?><rss version="2.0"><channel><title>Archive</title><link>https://archive.example/</link>';
  const parts = [head];
  let size = head.length;
  let items = 0;
  const start = Date.UTC(2026, 0, 1);
  while (size < bytes - 400) {
    const i = items++;
    const item = `<item><title>Post number ${i} of the archive</title><link>https://archive.example/posts/${i}</link><guid>https://archive.example/posts/${i}</guid><pubDate>${new Date(start - i * 3_600_000).toUTCString()}</pubDate><description>&lt;p&gt;The text of post ${i}, with &lt;a href="/tags/${i % 50}"&gt;a link&lt;/a&gt; and some words.&lt;/p&gt;</description></item>`;
    parts.push(item);
    size += item.length;
  }
  parts.push('</channel></rss>');
  return { body: Buffer.from(parts.join('')), items };
}

async function serve(body) {
  const origin = { url: '', servedAt: undefined, close: () => undefined };
  const server = http.createServer((request, response) => {
    response.writeHead(200, { 'content-type': 'application/rss+xml; charset=utf-8', 'content-length': body.length });
    response.end(body, () => (origin.servedAt = performance.now()));
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  origin.url = `http://127.0.0.1:${server.address().port}/archive.xml`;
  origin.close = () => server.close();
  return origin;
}
