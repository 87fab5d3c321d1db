/** POST /search (room_events): full-text search in the rooms one is in, as one may see them. */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { client, type Json, type TestClient } from '../support/client.js';
import { createUser, startTestHomeserver, type TestHomeserver } from '../support/homeserver.js';

let hs: TestHomeserver;
let alice: TestClient;
let bob: TestClient;
beforeEach(async () => {
  hs = await startTestHomeserver();
  alice = client(hs, await createUser(hs, 'alice'));
  bob = client(hs, await createUser(hs, 'bob'));
});
afterEach(() => hs.close());

const search = (who: TestClient, body: Json, nextBatch?: string) => who.ok('POST', '/search', { search_categories: { room_events: body } }, nextBatch ? { next_batch: nextBatch } : undefined);
const bodies = (answer: Json) => (answer.search_categories.room_events.results as Json[]).map((r) => r.result.content.body ?? r.result.content.name ?? r.result.content.topic);

describe('search', () => {
  it('finds messages, names and topics by words and word prefixes, in the rooms one is in', async () => {
    const ops = await alice.createRoom({ preset: 'public_chat', name: 'Deploy room', topic: 'Where deployments are announced' });
    await bob.join(ops);
    await alice.send(ops, { msgtype: 'm.text', body: 'The deploy of api failed' });
    await alice.send(ops, { msgtype: 'm.text', body: 'Deployed api v2 successfully' });
    await alice.send(ops, { msgtype: 'm.text', body: 'lunch?' });
    const secret = await alice.createRoom({ preset: 'private_chat' });
    await alice.send(secret, { msgtype: 'm.text', body: 'secret deploy plans' });

    const found = await search(bob, { search_term: 'deploy api', order_by: 'recent' });
    expect(bodies(found)).toEqual(['Deployed api v2 successfully', 'The deploy of api failed']);
    expect(found.search_categories.room_events.count).toBe(2);
    expect(bodies(await search(bob, { search_term: 'deploy' }))).toHaveLength(4); // 2 messages, the name, the topic
    expect(bodies(await search(bob, { search_term: 'deploy', keys: ['content.name'] }))).toEqual(['Deploy room']);
    // alice finds her private room's message; bob, not in it, does not.
    expect(bodies(await search(alice, { search_term: 'secret' }))).toEqual(['secret deploy plans']);
    expect(bodies(await search(bob, { search_term: 'secret' }))).toEqual([]);
    expect(bodies(await search(alice, { search_term: 'deploy', filter: { rooms: [secret] } }))).toEqual(['secret deploy plans']);
  });

  it('pages, forgets redacted messages, and survives odd input', async () => {
    const room = await alice.createRoom({ preset: 'public_chat' });
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push(await alice.send(room, { msgtype: 'm.text', body: `alert number ${i}` }));
    const first = await search(alice, { search_term: 'alert', order_by: 'recent', filter: { limit: 2 } });
    expect(bodies(first)).toEqual(['alert number 4', 'alert number 3']);
    const second = await search(alice, { search_term: 'alert', order_by: 'recent', filter: { limit: 2 } }, first.search_categories.room_events.next_batch);
    expect(bodies(second)).toEqual(['alert number 2', 'alert number 1']);

    await alice.ok('PUT', `/rooms/${encodeURIComponent(room)}/redact/${encodeURIComponent(ids[4]!)}/r1`, {});
    expect(bodies(await search(alice, { search_term: 'alert', order_by: 'recent', filter: { limit: 1 } }))).toEqual(['alert number 3']);
    const oddTerms = ['"', 'NEAR(', '*', 'a AND OR', ''];
    for (const term of oddTerms) {
      const answer = await search(alice, { search_term: term });
      expect(answer.search_categories.room_events.results).toEqual(expect.any(Array));
    }
  });

  it('is off with enable_search: false, as on Synapse', async () => {
    const off = await startTestHomeserver({ enable_search: false });
    try {
      const carol = client(off, await createUser(off, 'carol'));
      const answer = await carol.request('POST', '/search', { search_categories: { room_events: { search_term: 'x' } } });
      expect([answer.status, answer.body.errcode]).toEqual([400, 'M_UNKNOWN']);
    } finally {
      await off.close();
    }
  });
});
