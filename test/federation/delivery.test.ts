/**
 * Delivery between servers: B stopped while A keeps sending, then started again on the same
 * database: everything arrives once and in order (the outbox survives, the backoff ends when B
 * is back). Typing and receipts travel as EDUs. A restarted while B holds its transaction
 * unanswered: the transaction goes again as it was, under its id.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { client, type Json, type TestClient } from '../support/client.js';
import { createUser, startFederation, type Federation } from '../support/federation.js';
import { persistentDatabase } from '../support/test-schemas.js';

let federation: Federation;
let botA: TestClient;
let aliceB: TestClient;
let roomId: string;

const fast = { federation: { min_retry_interval: '100ms', max_retry_interval: '500ms' } };

beforeAll(async () => {
  const dir = mkdtempSync(join(tmpdir(), 'federation-delivery-'));
  federation = await startFederation(['a.test', 'b.test'], (name) => ({ ...fast, ...persistentDatabase(join(dir, `${name}.db`)) }));
  const a = federation.servers.get('a.test')!.hs;
  const b = federation.servers.get('b.test')!.hs;
  botA = client(a, await createUser(a, 'bot'));
  aliceB = client(b, await createUser(b, 'alice'));
  roomId = await aliceB.createRoom({ preset: 'public_chat' });
  await botA.ok('POST', `/join/${encodeURIComponent(roomId)}`, {}, { server_name: 'b.test' });
  await aliceB.waitForEvent(roomId, (event) => event.type === 'm.room.member' && event.state_key === botA.userId);
});
afterAll(() => federation?.close());

const messages = (events: Json[]) => events.filter((event) => event.type === 'm.room.message').map((event) => event.content.body as string);

describe('delivery across a restart', () => {
  it('queues while the destination is down and delivers everything once, in order, when it returns', async () => {
    const b = federation.servers.get('b.test')!;
    await b.stop();
    const sent: string[] = [];
    for (let i = 0; i < 60; i++) {
      sent.push(`while down ${i}`);
      await botA.send(roomId, { msgtype: 'm.text', body: `while down ${i}` });
    }
    const a = federation.servers.get('a.test')!;
    await expect.poll(async () => (await a.services.federationSender.status('b.test')).failures, { timeout: 10_000 }).toBeGreaterThan(0);
    expect((await a.services.federationSender.status('b.test')).queued).toBeGreaterThanOrEqual(60);
    // What an operator sees of it (Synapse's admin API, with the queue and the last error).
    const operator = await createUser(a.hs, 'operator', { admin: true });
    const asOperator = (path: string) => a.http.get(path).set('Authorization', `Bearer ${operator.accessToken}`);
    const described = await asOperator('/_synapse/admin/v1/federation/destinations/b.test');
    expect(described.status).toBe(200);
    expect(described.body).toMatchObject({ destination: 'b.test', queued: expect.any(Number), failures: expect.any(Number), retry_interval: expect.any(Number) });
    expect(described.body.queued).toBeGreaterThanOrEqual(60);
    expect(described.body.last_error).toMatch(/b.test/);
    const listed = await asOperator('/_synapse/admin/v1/federation/destinations');
    expect(listed.body.destinations.map((d: Json) => d.destination)).toContain('b.test');

    // Started again on the same database file, on a new port (found again through SRV).
    const restarted = await federation.start('b.test');
    const alice = client(restarted.hs, { ...aliceB.user });
    const seen = new Set<string>();
    await expect
      .poll(async () => {
        const page = await alice.ok('GET', `/rooms/${encodeURIComponent(roomId)}/messages`, undefined, { dir: 'b', limit: 100 });
        const bodies = messages(page.chunk as Json[]).reverse();
        for (const body of bodies) seen.add(body);
        return bodies.filter((body) => body.startsWith('while down'));
      }, { timeout: 20_000, interval: 200 })
      .toEqual(sent);
    await expect.poll(async () => (await a.services.federationSender.status('b.test')).queued, { timeout: 5_000 }).toBe(0);
  });
});

describe('an event the destination cannot take', () => {
  it('is sent on its own, refused again and dropped from the queue; what came after it is delivered', async () => {
    const b = federation.servers.get('b.test')!;
    const roomFederation = b.services.roomFederation;
    const original = roomFederation.transaction.bind(roomFederation);
    // B fails any transaction holding this event, as Synapse does one nested deeper than it can encode.
    roomFederation.transaction = async (origin, txnId, body) => {
      if (JSON.stringify(body.pdus ?? []).includes('TOXIC')) throw new Error('simulated failure');
      return original(origin, txnId, body);
    };
    try {
      await botA.send(roomId, { msgtype: 'm.text', body: 'TOXIC' });
      for (let i = 0; i < 3; i++) await botA.send(roomId, { msgtype: 'm.text', body: `behind the poison ${i}` });
      const alice = client(b.hs, { ...aliceB.user });
      await alice.waitForEvent(roomId, (event) => event.content?.body === 'behind the poison 2', 20_000);
      const page = await alice.ok('GET', `/rooms/${encodeURIComponent(roomId)}/messages`, undefined, { dir: 'b', limit: 10 });
      // (B pulls the dropped event itself through get_missing_events when the next one names it.)
      expect(messages(page.chunk as Json[]).slice(0, 3).reverse()).toEqual(['behind the poison 0', 'behind the poison 1', 'behind the poison 2']);
      const a = federation.servers.get('a.test')!;
      // A dequeues once B has answered, which is after B shows the event.
      await expect.poll(async () => (await a.services.federationSender.status('b.test')).queued, { timeout: 5_000 }).toBe(0);
    } finally {
      roomFederation.transaction = original;
    }
  });
});

describe('EDUs', () => {
  it('typing and read receipts of a local user reach the other server', async () => {
    const b = federation.servers.get('b.test')!;
    const alice = client(b.hs, { ...aliceB.user });
    const eventId = await alice.send(roomId, { msgtype: 'm.text', body: 'read me' });
    await botA.waitForEvent(roomId, (event) => event.event_id === eventId);
    await botA.ok('PUT', `/rooms/${encodeURIComponent(roomId)}/typing/${encodeURIComponent(botA.userId)}`, { typing: true, timeout: 10_000 });
    await alice.syncUntil((sync) => (sync.rooms?.join?.[roomId]?.ephemeral?.events as Json[] | undefined)?.find((event) => event.type === 'm.typing' && event.content.user_ids.includes(botA.userId)));
    await botA.ok('POST', `/rooms/${encodeURIComponent(roomId)}/receipt/m.read/${encodeURIComponent(eventId)}`, {});
    const receipt = await alice.syncUntil((sync) =>
      (sync.rooms?.join?.[roomId]?.ephemeral?.events as Json[] | undefined)?.find((event) => event.type === 'm.receipt' && event.content[eventId]?.['m.read']?.[botA.userId]),
    );
    expect(receipt.content[eventId]['m.read'][botA.userId].ts).toEqual(expect.any(Number));
  });
});

// Last: it restarts A, whose clients above would need new connections.
describe('a transaction cut off by a restart of the sending server', () => {
  it('goes again with the same id and the same PDUs; what was queued behind it comes in later transactions', async () => {
    const b = federation.servers.get('b.test')!;
    const roomFederation = b.services.roomFederation;
    const original = roomFederation.transaction.bind(roomFederation);
    // What B is sent from A, answered or not: each transaction id and its PDUs (by content hash).
    const attempts: Array<{ txnId: string; pdus: string[] }> = [];
    let cutTxn: string | undefined;
    let release = () => {};
    const released = new Promise<void>((resolve) => (release = resolve));
    // B applies the first transaction holding "cut off" but answers only once released: A is
    // stopped meanwhile, as if it had crashed between sending and hearing back.
    roomFederation.transaction = async (origin, txnId, body) => {
      const pdus = (body.pdus ?? []) as Json[];
      if (origin === 'a.test') attempts.push({ txnId, pdus: pdus.map((pdu) => (pdu.hashes as Json).sha256 as string) });
      const result = await original(origin, txnId, body);
      if (cutTxn === undefined && JSON.stringify(pdus).includes('cut off')) {
        cutTxn = txnId;
        await released;
      }
      return result;
    };
    try {
      await botA.send(roomId, { msgtype: 'm.text', body: 'cut off' });
      await expect.poll(() => cutTxn, { timeout: 10_000 }).toEqual(expect.any(String));
      for (let i = 0; i < 3; i++) await botA.send(roomId, { msgtype: 'm.text', body: `behind the cut ${i}` });
      await federation.servers.get('a.test')!.stop();
      await federation.start('a.test');
      const alice = client(b.hs, { ...aliceB.user });
      await alice.waitForEvent(roomId, (event) => event.content?.body === 'behind the cut 2', 10_000);
    } finally {
      release();
      roomFederation.transaction = original;
    }
    const byId = new Map<string, string[]>();
    for (const attempt of attempts) {
      const first = byId.get(attempt.txnId);
      if (first) expect(attempt).toEqual({ txnId: attempt.txnId, pdus: first });
      else byId.set(attempt.txnId, attempt.pdus);
    }
    expect(attempts.filter((attempt) => attempt.txnId === cutTxn).length).toBeGreaterThanOrEqual(2);
    const taken = [...byId.values()].flat();
    expect(taken.filter((hash, i) => taken.indexOf(hash) !== i)).toEqual([]);
  });
});
