/**
 * A long silence between the main server and the bots' server: B's people talk while A is cut
 * off, and what B queued for A is lost (as Synapse's sender does after a restart: in catch-up it
 * sends only the newest event of each room). Then one more message reaches A. A fetches what
 * get_missing_events reaches, places the oldest of it on the state B gives for the gap, and
 * remembers the gap; the bot's sync stops at the gap, `limited`, and /messages pages back over it,
 * backfilled from B, every message once and in order.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { client, timelineOf, type Json, type TestClient } from '../support/client.js';
import { createUser, startFederation, type Federation, type FederatedServer } from '../support/federation.js';

let federation: Federation;
let a: FederatedServer;
let b: FederatedServer;
let botA: TestClient;
let aliceB: TestClient;

beforeAll(async () => {
  // The background fill is set low so that /messages has gaps left to fill itself.
  federation = await startFederation(['a.test', 'b.test'], () => ({
    federation: { min_retry_interval: '100ms', max_retry_interval: '300ms', backfill: { background_events: 200 } },
    rc_message: { per_second: 100_000, burst_count: 100_000 },
  }));
  a = federation.servers.get('a.test')!;
  b = federation.servers.get('b.test')!;
  botA = client(a.hs, await createUser(a.hs, 'bot'));
  aliceB = client(b.hs, await createUser(b.hs, 'alice'));
});
afterAll(() => federation?.close());

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
  }, 120_000);
});
