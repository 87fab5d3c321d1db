/**
 * What is PostgreSQL's own, whichever engine the rest of the run uses: text it cannot hold gets a
 * Matrix error (and the server carries on), search and user search as docs/scaling.md says, a
 * small pool whose connections are handed out again and again, and the statements a transaction
 * sends with its commit.
 */
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WITH_COMMIT } from '../../src/storage/postgres.js';
import { client, type TestClient } from '../support/client.js';
import { createUser, startTestHomeserver, type TestHomeserver } from '../support/homeserver.js';
import { expectMatrixError } from '../support/spec-validator.js';
import { dropSchemas, TEST_SCHEMA_PREFIX } from '../support/postgres-setup.js';

const POSTGRES = process.env.BHS_TEST_POSTGRES ?? 'postgres://postgres@127.0.0.1:5432/test';
const schema = `${TEST_SCHEMA_PREFIX}${process.pid}_pg`;

let hs: TestHomeserver;
let alice: TestClient;
beforeAll(async () => {
  hs = await startTestHomeserver({ database: { path: ':memory:', url: POSTGRES, schema, pool_size: 2 } });
  alice = client(hs, await createUser(hs, 'alice'));
});
afterAll(async () => {
  await hs?.close();
  await dropSchemas(POSTGRES, [schema]);
});

describe('on PostgreSQL', () => {
  it('refuses U+0000 where it would be stored as it came, with 400, and carries on', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    const refused = await alice.request('PUT', `/rooms/${encodeURIComponent(roomId)}/state/org.example.state/${encodeURIComponent('a\u0000b')}`, { ok: true });
    expectMatrixError(refused, 400, 'M_INVALID_PARAM');
    // Inside content it is only JSON's escape, and a message holding it is found by its other words.
    const eventId = await alice.send(roomId, { msgtype: 'm.text', body: 'nul\u0000inside the quarterly figures' });
    const search = await alice.ok('POST', '/search', { search_categories: { room_events: { search_term: 'quarter' } } });
    expect(search.search_categories.room_events.results.map((r: { result: { event_id: string } }) => r.result.event_id)).toEqual([eventId]);
    const event = await alice.ok('GET', `/rooms/${encodeURIComponent(roomId)}/event/${encodeURIComponent(eventId)}`);
    expect(event.content.body).toBe('nul\u0000inside the quarterly figures');
  });

  it('ranks search results and pages through them, newest first on request', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    const once = await alice.send(roomId, { msgtype: 'm.text', body: 'deploy finished' });
    const twice = await alice.send(roomId, { msgtype: 'm.text', body: 'deploy deploy deploy, finished' });
    const search = (order: 'rank' | 'recent') => alice.ok('POST', '/search', { search_categories: { room_events: { search_term: 'deploy', order_by: order, filter: { rooms: [roomId] } } } });
    const ids = (answer: Awaited<ReturnType<typeof search>>) => answer.search_categories.room_events.results.map((r: { result: { event_id: string } }) => r.result.event_id);
    expect(ids(await search('rank'))).toEqual([twice, once]);
    expect(ids(await search('recent'))).toEqual([twice, once]);
    await alice.send(roomId, { msgtype: 'm.text', body: 'deploy started' });
    expect(ids(await search('recent'))[0]).not.toBe(twice);
  });

  it('finds users by name ignoring the case of any letter, not only of ASCII ones', async () => {
    const admin = await createUser(hs, 'admin', { admin: true });
    const zoe = client(hs, await createUser(hs, 'zoe'));
    await zoe.ok('PUT', `/profile/${encodeURIComponent(zoe.userId)}/displayname`, { displayname: 'Zoë ÄRGER' });
    const found = await hs.http.get('/_synapse/admin/v2/users').query({ name: 'ärger' }).auth(admin.accessToken, { type: 'bearer' });
    expect(found.status).toBe(200);
    expect(found.body.users.map((u: { name: string }) => u.name)).toEqual([zoe.userId]);
  });

  it('keeps working through hundreds of requests on a pool of two connections', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    for (let i = 0; i < 200; i++) await alice.send(roomId, { msgtype: 'm.text', body: `message ${i}` });
    const messages = await alice.ok('GET', `/rooms/${encodeURIComponent(roomId)}/messages`, undefined, { dir: 'b', limit: 5 });
    expect(messages.chunk[0].content.body).toBe('message 199');
  });

  it('sends a statement held for the commit with it, drops it on rollback, and recovers when it fails', async () => {
    const db = hs.services.storage.db;
    await sql`CREATE TABLE held_for_commit (n bigint)`.execute(db);
    const rows = async () => (await sql<{ n: number }>`SELECT n FROM held_for_commit ORDER BY n`.execute(db)).rows.map((row) => Number(row.n));
    // Held, then sent with the commit: written.
    await db.transaction().execute(async (trx) => {
      await sql`SELECT 1`.execute(trx);
      await sql.raw(`${WITH_COMMIT}INSERT INTO held_for_commit VALUES (1)`).execute(trx);
    });
    // Held, then another statement: it goes first, and is seen by that statement.
    const seen = await db.transaction().execute(async (trx) => {
      await sql`SELECT 1`.execute(trx);
      await sql.raw(`${WITH_COMMIT}INSERT INTO held_for_commit VALUES (2)`).execute(trx);
      return (await sql<{ count: number }>`SELECT count(*) AS count FROM held_for_commit WHERE n = ${2}`.execute(trx)).rows[0]!.count;
    });
    expect(Number(seen)).toBe(1);
    // Held, then the work fails: dropped with the rollback.
    const failed = db.transaction().execute(async (trx) => {
      await sql`SELECT 1`.execute(trx);
      await sql.raw(`${WITH_COMMIT}INSERT INTO held_for_commit VALUES (3)`).execute(trx);
      throw new Error('the work failed');
    });
    await expect(failed).rejects.toThrow('the work failed');
    // Marked but with values (which a held statement would lose): it goes at once.
    await db.transaction().execute(async (trx) => {
      await sql`SELECT 1`.execute(trx);
      await sql`${sql.raw(WITH_COMMIT)}INSERT INTO held_for_commit VALUES (${4})`.execute(trx);
    });
    // Held and failing at the commit: the commit fails, and the connection is usable again.
    for (let i = 0; i < 3; i++) {
      const failing = db.transaction().execute(async (trx) => {
        await sql`INSERT INTO held_for_commit VALUES (${10 + i})`.execute(trx);
        await sql.raw(`${WITH_COMMIT}INSERT INTO no_such_table VALUES (1)`).execute(trx);
      });
      await expect(failing).rejects.toThrow(/no_such_table/);
    }
    expect(await rows()).toEqual([1, 2, 4]);
    await sql`DROP TABLE held_for_commit`.execute(db);
  });
});
