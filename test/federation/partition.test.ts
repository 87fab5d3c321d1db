/**
 * Two servers partitioned while both change the room's state, then reconnected: each sends what
 * it queued, receives the other's fork, resolves the two states, and both end with the same
 * current state.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { client, type Json, type TestClient } from '../support/client.js';
import { createUser, startFederation, type Federation } from '../support/federation.js';

let federation: Federation;
let botA: TestClient;
let aliceB: TestClient;

beforeAll(async () => {
  federation = await startFederation(['a.test', 'b.test'], () => ({ federation: { min_retry_interval: '100ms', max_retry_interval: '300ms' } }));
  const a = federation.servers.get('a.test')!.hs;
  const b = federation.servers.get('b.test')!.hs;
  botA = client(a, await createUser(a, 'bot'));
  aliceB = client(b, await createUser(b, 'alice'));
});
afterAll(() => federation?.close());

/** The room's current state as a client of each server sees it: (type, state_key) → event id. */
async function stateOf(viewer: TestClient, roomId: string): Promise<Record<string, string>> {
  const events = (await viewer.ok('GET', `/rooms/${encodeURIComponent(roomId)}/state`)) as unknown as Json[];
  return Object.fromEntries(events.map((event) => [`${event.type}|${event.state_key}`, event.event_id as string]).sort());
}

describe('a partition', () => {
  it('both servers change state while apart and agree on the room\u2019s state once reconnected', async () => {
    const roomId = await aliceB.createRoom({ preset: 'public_chat', name: 'before' });
    await botA.ok('POST', `/join/${encodeURIComponent(roomId)}`, {}, { server_name: 'b.test' });
    // The bot may change the topic and name (moderator), as it usually is in the rooms it serves.
    await aliceB.ok('PUT', `/rooms/${encodeURIComponent(roomId)}/state/m.room.power_levels/`, {
      ...(await aliceB.ok('GET', `/rooms/${encodeURIComponent(roomId)}/state/m.room.power_levels/`)),
      users: { [aliceB.userId]: 100, [botA.userId]: 50 },
    });
    await botA.waitForEvent(roomId, (event) => event.type === 'm.room.power_levels' && event.content.users?.[botA.userId] === 50);

    federation.partition('a.test', 'b.test');
    await botA.setState(roomId, 'm.room.topic', '', { topic: 'set on A while apart' });
    await botA.send(roomId, { msgtype: 'm.text', body: 'A while apart' });
    await aliceB.setState(roomId, 'm.room.name', '', { name: 'set on B while apart' });
    await aliceB.send(roomId, { msgtype: 'm.text', body: 'B while apart' });
    // Really apart: both sides fail to send and hold their events.
    for (const [from, to] of [['a.test', 'b.test'], ['b.test', 'a.test']] as const) {
      const sender = federation.servers.get(from)!.services.federationSender;
      await expect.poll(async () => (await sender.status(to)).failures, { timeout: 10_000 }).toBeGreaterThan(0);
      expect((await sender.status(to)).queued).toBeGreaterThanOrEqual(2);
    }
    // A's transaction goes without an answer: its rows keep its id, and it goes again under that id
    // (were it received after all, B would take it once).
    const a = federation.servers.get('a.test')!.services.storage;
    const unansweredTxn = async () => (await a.db.selectFrom('federation_outbox').select('txn_id').where('destination', '=', 'b.test').where('txn_id', 'is not', null).executeTakeFirst())?.txn_id ?? undefined;
    await expect.poll(unansweredTxn, { timeout: 10_000 }).toEqual(expect.any(String));
    const unanswered = (await unansweredTxn())!;
    federation.heal();

    await aliceB.waitForEvent(roomId, (event) => event.content?.body === 'A while apart', 20_000);
    const b = federation.servers.get('b.test')!.services.storage;
    expect(await b.federation.inboundTxn('a.test', unanswered)).toBeDefined();
    await botA.waitForEvent(roomId, (event) => event.content?.body === 'B while apart', 20_000);
    await expect.poll(async () => JSON.stringify(await stateOf(botA, roomId)) === JSON.stringify(await stateOf(aliceB, roomId)), { timeout: 10_000 }).toBe(true);
    const state = await stateOf(botA, roomId);
    const topic = await botA.ok('GET', `/rooms/${encodeURIComponent(roomId)}/state/m.room.topic/`);
    const name = await aliceB.ok('GET', `/rooms/${encodeURIComponent(roomId)}/state/m.room.name/`);
    expect(topic.topic).toBe('set on A while apart');
    expect(name.name).toBe('set on B while apart');
    expect(Object.keys(state).length).toBeGreaterThan(5);

    // And the room goes on: the next events build on both forks.
    await aliceB.send(roomId, { msgtype: 'm.text', body: 'after' });
    await botA.waitForEvent(roomId, (event) => event.content?.body === 'after');

    // /messages pages in topological order on both servers (depth, then arrival), whatever order
    // the forks arrived in; sync showed them in arrival order.
    for (const [name, viewer] of [['a.test', botA], ['b.test', aliceB]] as const) {
      const page = await viewer.ok('GET', `/rooms/${encodeURIComponent(roomId)}/messages`, undefined, { dir: 'b', limit: 50 });
      const storage = federation.servers.get(name)!.services.storage;
      const depths = await Promise.all((page.chunk as Json[]).map(async (event) => Number((await storage.rooms.getEvent(event.event_id as string))!.depth)));
      expect(depths).toEqual([...depths].sort((x, y) => y - x));
      expect((page.chunk as Json[]).map((event) => event.content?.body)).toEqual(expect.arrayContaining(['A while apart', 'B while apart', 'after']));
    }
  });

  it('fills a gap: what get_missing_events returns, and beyond its reach the state at the gap', async () => {
    const roomId = await aliceB.createRoom({ preset: 'public_chat' });
    await botA.ok('POST', `/join/${encodeURIComponent(roomId)}`, {}, { server_name: 'b.test' });
    await aliceB.waitForEvent(roomId, (event) => event.type === 'm.room.member' && event.state_key === botA.userId);
    const a = federation.servers.get('a.test')!;
    const dropOutbox = async () => {
      const rows = await a.services.storage.federation.nextBatch('b.test', 1000, 1000);
      await a.services.storage.federation.dequeue(rows.map((row) => row.id));
    };

    // A small gap: three events B never got, then one it gets.
    federation.partition('a.test', 'b.test');
    for (const body of ['lost 1', 'lost 2', 'lost 3']) await botA.send(roomId, { msgtype: 'm.text', body });
    await dropOutbox();
    federation.heal();
    await a.services.federationSender.resetConnection('b.test');
    await botA.send(roomId, { msgtype: 'm.text', body: 'after the small gap' });
    await aliceB.waitForEvent(roomId, (event) => event.content?.body === 'after the small gap');
    const page = await aliceB.ok('GET', `/rooms/${encodeURIComponent(roomId)}/messages`, undefined, { dir: 'b', limit: 10 });
    expect((page.chunk as Json[]).map((event) => event.content?.body).filter(Boolean).slice(0, 4)).toEqual(['after the small gap', 'lost 3', 'lost 2', 'lost 1']);

    // A gap wider than get_missing_events reaches (20): bridged with the state before the event.
    await aliceB.ok('PUT', `/rooms/${encodeURIComponent(roomId)}/state/m.room.power_levels/`, {
      ...(await aliceB.ok('GET', `/rooms/${encodeURIComponent(roomId)}/state/m.room.power_levels/`)),
      users: { [aliceB.userId]: 100, [botA.userId]: 50 },
    });
    await botA.waitForEvent(roomId, (event) => event.type === 'm.room.power_levels' && event.content.users?.[botA.userId] === 50);
    federation.partition('a.test', 'b.test');
    for (let i = 0; i < 40; i++) await botA.send(roomId, { msgtype: 'm.text', body: `far ${i}` });
    await botA.setState(roomId, 'm.room.topic', '', { topic: 'set during the wide gap' });
    for (let i = 40; i < 45; i++) await botA.send(roomId, { msgtype: 'm.text', body: `far ${i}` });
    await dropOutbox();
    federation.heal();
    await a.services.federationSender.resetConnection('b.test');
    await botA.send(roomId, { msgtype: 'm.text', body: 'after the wide gap' });
    await aliceB.waitForEvent(roomId, (event) => event.content?.body === 'after the wide gap', 20_000);
    // The state changed in the gap arrived with the state at it.
    expect((await aliceB.ok('GET', `/rooms/${encodeURIComponent(roomId)}/state/m.room.topic/`)).topic).toBe('set during the wide gap');
    // And the room goes on from both sides.
    await aliceB.send(roomId, { msgtype: 'm.text', body: 'B after the gap' });
    await botA.waitForEvent(roomId, (event) => event.content?.body === 'B after the gap');
  });

  it('a change undone by state resolution reaches clients in their next sync', async () => {
    const a = federation.servers.get('a.test')!;
    const carolA = client(a.hs, await createUser(a.hs, 'carol'));
    const roomId = await aliceB.createRoom({ preset: 'public_chat' });
    await aliceB.setState(roomId, 'm.room.topic', '', { topic: 'before' });
    await botA.ok('POST', `/join/${encodeURIComponent(roomId)}`, {}, { server_name: 'b.test' });
    await carolA.ok('POST', `/join/${encodeURIComponent(roomId)}`, {});
    await aliceB.ok('PUT', `/rooms/${encodeURIComponent(roomId)}/state/m.room.power_levels/`, {
      ...(await aliceB.ok('GET', `/rooms/${encodeURIComponent(roomId)}/state/m.room.power_levels/`)),
      users: { [aliceB.userId]: 100, [botA.userId]: 50 },
    });
    await carolA.waitForEvent(roomId, (event) => event.type === 'm.room.power_levels' && event.content.users?.[botA.userId] === 50);

    federation.partition('a.test', 'b.test');
    // On A the bot changes the topic; on B, meanwhile, it is banned (Alice outranks it).
    await botA.setState(roomId, 'm.room.topic', '', { topic: 'set by the bot while apart' });
    await carolA.waitForEvent(roomId, (event) => event.type === 'm.room.topic' && event.content.topic === 'set by the bot while apart');
    await aliceB.ok('POST', `/rooms/${encodeURIComponent(roomId)}/ban`, { user_id: botA.userId });
    federation.heal();
    await a.services.federationSender.resetConnection('b.test');
    await federation.servers.get('b.test')!.services.federationSender.resetConnection('a.test');

    // A resolves its fork against B's: the ban stands and the bot's topic falls. Carol's sync,
    // incremental, must bring the old topic back (its event is not new).
    const topic = await carolA.syncUntil((sync) =>
      (sync.rooms?.join?.[roomId]?.state?.events as Json[] | undefined)?.find((event) => event.type === 'm.room.topic' && event.content.topic === 'before'),
    );
    expect(topic.content.topic).toBe('before');
    expect((await carolA.ok('GET', `/rooms/${encodeURIComponent(roomId)}/state/m.room.topic/`)).topic).toBe('before');
    expect((await aliceB.ok('GET', `/rooms/${encodeURIComponent(roomId)}/state/m.room.topic/`)).topic).toBe('before');
  });
});
