/**
 * A long silence between the main server and the bots' server: B's people talk while A is cut
 * off, and what B queued for A is lost (as Synapse's sender does after a restart: in catch-up it
 * sends only the newest event of each room). Then one more message reaches A. A fetches what
 * get_missing_events reaches, places the oldest of it on the state B gives for the gap, and
 * remembers the gap; the bot's sync stops at the gap, `limited`, and /messages pages back over it,
 * backfilled from B, every message once and in order.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { client, timelineOf, type Json, type TestClient } from '../support/client.js';
import { createUser, startFederation, type Federation, type FederatedServer } from '../support/federation.js';

let federation: Federation;
let a: FederatedServer;
let b: FederatedServer;
let botA: TestClient;
let aliceB: TestClient;

/** An appservice on A interested in every room: what it is sent. */
const appserviceEvents: Json[] = [];
let appserviceServer: Server;

beforeAll(async () => {
  appserviceServer = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      if (req.method === 'PUT' && req.url?.includes('/transactions/')) appserviceEvents.push(...((JSON.parse(Buffer.concat(chunks).toString()) as Json).events as Json[]));
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => appserviceServer.listen(0, '127.0.0.1', resolve));
  const registration = join(mkdtempSync(join(tmpdir(), 'bhs-gaps-')), 'watcher.yaml');
  writeFileSync(
    registration,
    `id: watcher\nurl: http://127.0.0.1:${(appserviceServer.address() as AddressInfo).port}\nas_token: watcher-as\nhs_token: watcher-hs\nsender_localpart: watcher\nrate_limited: false\nnamespaces:\n  users: []\n  aliases: []\n  rooms:\n    - exclusive: false\n      regex: '.*'\n`,
  );
  // The background fill is set low so that /messages has gaps left to fill itself.
  federation = await startFederation(['a.test', 'b.test'], (name) => ({
    federation: { min_retry_interval: '100ms', max_retry_interval: '300ms', backfill: { background_events: 200 } },
    rc_message: { per_second: 100_000, burst_count: 100_000 },
    ...(name === 'a.test' ? { app_service_config_files: [registration] } : {}),
  }));
  a = federation.servers.get('a.test')!;
  b = federation.servers.get('b.test')!;
  botA = client(a.hs, await createUser(a.hs, 'bot'));
  aliceB = client(b.hs, await createUser(b.hs, 'alice'));
});
afterAll(async () => {
  await federation?.close();
  await new Promise((resolve) => appserviceServer?.close(resolve));
});

const enc = encodeURIComponent;

/** What B queued for A is dropped: A never gets it pushed. */
async function dropOutboxOfB(): Promise<void> {
  for (;;) {
    const rows = await b.services.storage.federation.nextBatch('a.test', 1000, 1000);
    if (rows.length === 0) return;
    await b.services.storage.federation.dequeue(rows.map((row) => row.id));
  }
}

/** Pages back through the room from `from` until it ends: the messages' bodies, newest first. */
async function pageBack(viewer: TestClient, roomId: string, from: string): Promise<string[]> {
  const bodies: string[] = [];
  let token: string | undefined = from;
  for (let pages = 0; token !== undefined && pages < 200; pages++) {
    const page: Json = await viewer.ok('GET', `/rooms/${enc(roomId)}/messages`, undefined, { dir: 'b', limit: 100, from: token });
    const chunk = page.chunk as Json[];
    for (const event of chunk) if (typeof event.content?.body === 'string') bodies.push(event.content.body as string);
    token = chunk.length > 0 ? (page.end as string | undefined) : undefined;
  }
  return bodies;
}

describe.each([30, 300, 3000])('%i messages missed', (missed) => {
  it('arrive once and in order through sync and /messages, the gap marked and filled', async () => {
    const roomId = await aliceB.createRoom({ preset: 'public_chat', name: `gap ${missed}` });
    await botA.ok('POST', `/join/${enc(roomId)}`, {}, { server_name: 'b.test' });
    await aliceB.send(roomId, { msgtype: 'm.text', body: 'before' });
    await botA.waitForEvent(roomId, (event) => event.content?.body === 'before');
    const before = await botA.sync({ timeout: 0 });

    federation.partition('a.test', 'b.test');
    // Through the room service, not HTTP: thousands of sends are the setting, not what is tested.
    const alice = { userId: aliceB.userId, deviceId: 'GAPS', accessTokenId: 0 };
    for (let i = 1; i <= missed; i++) await b.services.rooms.sendAsServer(alice, roomId, 'm.room.message', { msgtype: 'm.text', body: `missed ${i}` });
    await dropOutboxOfB();
    federation.heal();
    await b.services.federationSender.resetConnection('a.test');
    await aliceB.send(roomId, { msgtype: 'm.text', body: 'after' });

    // Sync stops at the gap: the newest events, `limited`, and where to page back from (a
    // timeline limit above what get_missing_events reaches, so the gap is what limits it).
    await botA.syncUntil((answer) => (timelineOf(answer, roomId).some((event) => event.content?.body === 'after') ? answer : undefined), 30_000);
    const sync = await botA.sync({ since: before.next_batch as string, timeout: 0, filter: JSON.stringify({ room: { timeline: { limit: 50 } } }) });
    const timeline = sync.rooms.join[roomId].timeline as Json;
    const shown = (timeline.events as Json[]).map((event) => event.content?.body).filter(Boolean);
    expect(timeline.limited).toBe(true);
    expect(shown.at(-1)).toBe('after');
    // What get_missing_events reached (20 at most), oldest first, with nothing before the gap in between.
    const reached = Math.min(missed, 20);
    expect(shown).toEqual([...Array.from({ length: reached }, (_, i) => `missed ${missed - reached + 1 + i}`), 'after']);

    // Paging back from there: every message once, in order, filled from B where A lacked them.
    const history = await pageBack(botA, roomId, timeline.prev_batch as string);
    const expected = Array.from({ length: missed - reached }, (_, i) => `missed ${missed - reached - i}`);
    expect(history.slice(0, expected.length + 1)).toEqual([...expected, 'before']);
    expect(new Set(history).size).toBe(history.length);
    // Filled: no gap is left in the room, and the next sync does not show history as new.
    expect(await a.services.storage.rooms.backwardExtremities(roomId, 10)).toEqual([]);
    const next = await botA.sync({ since: sync.next_batch as string, timeout: 0 });
    expect(timelineOf(next, roomId).filter((event) => String(event.content?.body ?? '').startsWith('missed'))).toEqual([]);
    // Nor is it sent to appservices as new: they get what sync got, once.
    await expect.poll(() => appserviceEvents.some((event) => event.room_id === roomId && event.content?.body === 'after')).toBe(true);
    const toAppservice = appserviceEvents.filter((event) => event.room_id === roomId && String(event.content?.body ?? '').startsWith('missed')).map((event) => event.content.body);
    expect(toAppservice).toEqual(shown.filter((body) => body !== 'after'));
  }, 120_000);
});

/** Sends as Alice through B's room service (many sends are the setting, not what is tested). */
async function sendOnB(roomId: string, bodies: string[]): Promise<void> {
  const alice = { userId: aliceB.userId, deviceId: 'GAPS', accessTokenId: 0 };
  for (const body of bodies) await b.services.rooms.sendAsServer(alice, roomId, 'm.room.message', { msgtype: 'm.text', body });
}

/** Counts A's federation requests to B by kind while `work` runs. */
async function countingRequests<T>(work: () => Promise<T>): Promise<{ result: T; counts: Map<string, number> }> {
  const client = a.services.federation.client;
  const original = client.request.bind(client);
  const counts = new Map<string, number>();
  client.request = (async (destination: string, request: { path: string }) => {
    const kind = /\/_matrix\/federation\/v\d\/([a-z_]+)/.exec(request.path)?.[1] ?? request.path;
    counts.set(kind, (counts.get(kind) ?? 0) + 1);
    return original(destination, request as never);
  }) as typeof client.request;
  try {
    return { result: await work(), counts };
  } finally {
    client.request = original;
  }
}

describe('gaps beside other things', () => {
  it('messages sent here while apart are not lost behind the gap (a fork)', async () => {
    const roomId = await aliceB.createRoom({ preset: 'public_chat', name: 'fork' });
    await botA.ok('POST', `/join/${enc(roomId)}`, {}, { server_name: 'b.test' });
    const carol = client(a.hs, await createUser(a.hs, 'carol-fork'));
    await carol.join(roomId);
    await aliceB.send(roomId, { msgtype: 'm.text', body: 'before' });
    await carol.waitForEvent(roomId, (event) => event.content?.body === 'before');
    const before = await carol.sync({ timeout: 0 });
    federation.partition('a.test', 'b.test');
    await sendOnB(roomId, Array.from({ length: 30 }, (_, i) => `missed ${i + 1}`));
    for (let i = 1; i <= 25; i++) await botA.send(roomId, { msgtype: 'm.text', body: `local ${i}` });
    await dropOutboxOfB();
    await a.services.storage.federation.dequeue((await a.services.storage.federation.nextBatch('b.test', 1000, 1000)).map((row) => row.id));
    federation.heal();
    await b.services.federationSender.resetConnection('a.test');
    await aliceB.send(roomId, { msgtype: 'm.text', body: 'after' });
    await carol.waitForEvent(roomId, (event) => event.content?.body === 'after', 30_000);
    const sync = await carol.sync({ since: before.next_batch as string, timeout: 0, filter: JSON.stringify({ room: { timeline: { limit: 50 } } }) });
    const timeline = sync.rooms.join[roomId].timeline as Json;
    expect(timeline.limited).toBe(true);
    const seen = new Set((timeline.events as Json[]).map((event) => event.content?.body));
    for (const body of await pageBack(carol, roomId, timeline.prev_batch as string)) seen.add(body);
    for (let i = 1; i <= 25; i++) expect(seen.has(`local ${i}`), `local ${i}`).toBe(true);
    for (let i = 1; i <= 30; i++) expect(seen.has(`missed ${i}`), `missed ${i}`).toBe(true);
  }, 60_000);

  it('several rooms with gaps in one transaction: a question each gap needs, asked once', async () => {
    const rooms: string[] = [];
    for (let i = 0; i < 4; i++) {
      const roomId = await aliceB.createRoom({ preset: 'public_chat', name: `many ${i}` });
      await botA.ok('POST', `/join/${enc(roomId)}`, {}, { server_name: 'b.test' });
      rooms.push(roomId);
    }
    // A member who joins during the gap must be known afterwards: the state at the gap is whole.
    const dave = client(b.hs, await createUser(b.hs, 'dave-gaps'));
    federation.partition('a.test', 'b.test');
    for (const roomId of rooms) await sendOnB(roomId, Array.from({ length: 30 }, (_, i) => `missed ${i + 1}`));
    await dave.join(rooms[0]!);
    await sendOnB(rooms[0]!, ['more']);
    await dropOutboxOfB();
    // One message in each room while still apart: they go out together once healed.
    for (const roomId of rooms) await aliceB.send(roomId, { msgtype: 'm.text', body: 'after' });
    const { counts } = await countingRequests(async () => {
      federation.heal();
      await b.services.federationSender.resetConnection('a.test');
      for (const roomId of rooms) await botA.waitForEvent(roomId, (event) => event.content?.body === 'after', 30_000);
    });
    // Per room: one get_missing_events and one state_ids for its gap (before: one per event of the answer).
    expect(counts.get('get_missing_events')).toBe(rooms.length);
    expect(counts.get('state_ids')).toBe(rooms.length);
    await dave.send(rooms[0]!, { msgtype: 'm.text', body: 'dave speaks' });
    await botA.waitForEvent(rooms[0]!, (event) => event.content?.body === 'dave speaks', 30_000);
  }, 60_000);

  it('a redaction made in the gap takes effect when the gap is filled', async () => {
    const roomId = await aliceB.createRoom({ preset: 'public_chat', name: 'redacted in the gap' });
    await botA.ok('POST', `/join/${enc(roomId)}`, {}, { server_name: 'b.test' });
    const secret = await aliceB.send(roomId, { msgtype: 'm.text', body: 'SECRET' });
    await botA.waitForEvent(roomId, (event) => event.content?.body === 'SECRET');
    federation.partition('a.test', 'b.test');
    await aliceB.ok('PUT', `/rooms/${enc(roomId)}/redact/${enc(secret)}/gap-redaction`, { reason: 'oops' });
    await sendOnB(roomId, Array.from({ length: 30 }, (_, i) => `missed ${i + 1}`));
    await dropOutboxOfB();
    federation.heal();
    await b.services.federationSender.resetConnection('a.test');
    await aliceB.send(roomId, { msgtype: 'm.text', body: 'after' });
    await botA.waitForEvent(roomId, (event) => event.content?.body === 'after', 30_000);
    await pageBack(botA, roomId, 't9007199254740991-9007199254740991');
    const seen = await botA.ok('GET', `/rooms/${enc(roomId)}/event/${enc(secret)}`);
    expect(seen.content).toEqual({});
  }, 60_000);
});
