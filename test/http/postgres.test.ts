/**
 * What is PostgreSQL's own, whichever engine the rest of the run uses: text it cannot hold gets a
 * Matrix error (and the server carries on), search and user search as docs/scaling.md says, a
 * small pool whose connections are handed out again and again, and the statements a transaction
 * sends with its commit, and the statements it prepares.
 */
import { sql, type Kysely } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dedicatedConnection, ensureSchema, openPostgres, StatementNames, WITH_COMMIT } from '../../src/storage/postgres.js';
import type { Database } from '../../src/storage/schema.js';
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

describe('prepared statements on PostgreSQL', () => {
  const prepared = async (db: Kysely<Database>) =>
    (await sql<{ name: string; statement: string }>`SELECT name, statement FROM pg_prepared_statements`.execute(db)).rows;

  it('prepares the statements of a send, on the connections that run them', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    for (let i = 0; i < 5; i++) await alice.send(roomId, { msgtype: 'm.text', body: `prepared ${i}` });
    // Both connections of the pool, held at once: the union of what they prepared.
    const db = hs.services.storage.db;
    let release!: () => void;
    const bothHeld = new Promise<void>((resolve) => (release = resolve));
    let held = 0;
    const statements = (
      await Promise.all(
        [0, 1].map(() =>
          db.connection().execute(async (connection) => {
            if (++held === 2) release();
            await bothHeld;
            return prepared(connection);
          }),
        ),
      )
    ).flat();
    const insertsOfEvents = statements.filter((row) => /insert into "events"/i.test(row.statement));
    expect(insertsOfEvents.length).toBeGreaterThan(0);
    expect(insertsOfEvents.every((row) => /^bhs_\d+$/.test(row.name))).toBe(true);
    const messages = await alice.ok('GET', `/rooms/${encodeURIComponent(roomId)}/messages`, undefined, { dir: 'b', limit: 1 });
    expect(messages.chunk[0].content.body).toBe('prepared 4');
  });

  it('writes a message as one statement that moves the stream head too: no lock, no transaction', async () => {
    // A server of its own, started with every statement of `pg` seen (its connections bind the
    // method when they open).
    const texts: string[] = [];
    const query = pg.Client.prototype.query;
    pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
      const first = args[0] as string | { text?: string } | undefined;
      texts.push(typeof first === 'string' ? first : (first?.text ?? ''));
      return (query as (...a: unknown[]) => unknown).apply(this, args);
    } as typeof query;
    const ownSchema = `${TEST_SCHEMA_PREFIX}${process.pid}_onestatement`;
    let own: TestHomeserver | undefined;
    try {
      own = await startTestHomeserver({ database: { path: ':memory:', url: POSTGRES, schema: ownSchema, pool_size: 2 } });
      const bob = client(own, await createUser(own, 'bob'));
      const roomId = await bob.createRoom({ preset: 'public_chat' });
      await bob.send(roomId, { msgtype: 'm.text', body: 'warm' });
      texts.length = 0;
      const eventId = await bob.send(roomId, { msgtype: 'm.text', body: 'one round trip' });
      const writes = texts.filter((text) => /stream_head|insert into "events"|^begin|for update/i.test(text));
      expect(writes).toHaveLength(1);
      expect(writes[0]).toMatch(/UPDATE stream_head SET position = .* WHERE id = 1 AND position = /);
      expect(writes[0]).toMatch(/insert into "events"/i);
      const head = await sql<{ position: number }>`SELECT position FROM stream_head`.execute(own.services.storage.db);
      const stored = await own.services.storage.db.selectFrom('events').select('stream_ordering').where('event_id', '=', eventId).executeTakeFirstOrThrow();
      expect(Number(head.rows[0]!.position)).toBe(Number(stored.stream_ordering));
    } finally {
      pg.Client.prototype.query = query;
      await own?.close();
      await dropSchemas(POSTGRES, [ownSchema]);
    }
  });

  describe('on a connection of its own', () => {
    const ownSchema = `${TEST_SCHEMA_PREFIX}${process.pid}_prep`;
    let db: Kysely<Database>;
    beforeAll(async () => {
      db = openPostgres({ url: POSTGRES, poolSize: 1, statementTimeoutMs: 0, schema: ownSchema });
      await ensureSchema(db, ownSchema);
      await sql`CREATE TABLE prep (a bigint, b text)`.execute(db);
      await sql`INSERT INTO prep VALUES (1, 'one'), (2, 'two')`.execute(db);
    });
    afterAll(async () => {
      await db?.destroy();
      await dropSchemas(POSTGRES, [ownSchema]);
    });

    it('names a statement with values the second time it comes, never one without', async () => {
      const select = (a: number) => sql<{ b: string }>`SELECT b FROM prep WHERE a = ${a} /* twice */`.execute(db);
      expect((await select(1)).rows).toEqual([{ b: 'one' }]);
      expect((await prepared(db)).filter((row) => row.statement.includes('/* twice */'))).toEqual([]);
      expect((await select(2)).rows).toEqual([{ b: 'two' }]);
      const named = (await prepared(db)).filter((row) => row.statement.includes('/* twice */'));
      expect(named).toHaveLength(1);
      expect(named[0]!.name).toMatch(/^bhs_\d+$/);
      // Used again under its name, inside a transaction too (its begin and commit go unnamed).
      expect(await db.transaction().execute(async (trx) => (await sql<{ b: string }>`SELECT b FROM prep WHERE a = ${1} /* twice */`.execute(trx)).rows)).toEqual([{ b: 'one' }]);
      expect((await select(2)).rows).toEqual([{ b: 'two' }]);
      expect((await prepared(db)).filter((row) => row.statement.includes('/* twice */'))).toHaveLength(1);
      // Without values: never named, however often.
      for (let i = 0; i < 3; i++) await sql`SELECT count(*) FROM prep /* no values */`.execute(db);
      await db.transaction().execute(async (trx) => {
        await sql`SELECT count(*) FROM prep /* no values */`.execute(trx);
      });
      expect((await prepared(db)).filter((row) => row.statement.includes('/* no values */') || /^(begin|commit)/i.test(row.statement))).toEqual([]);
    });

    it('sends a statement again unnamed when another process changed the table under it, and names it no more', async () => {
      const other = dedicatedConnection(db)!;
      await other.connect();
      try {
        await other.query(`CREATE TABLE "${ownSchema}".changing (a bigint)`);
        await other.query(`INSERT INTO "${ownSchema}".changing VALUES (1)`);
        const select = () => sql<Record<string, unknown>>`SELECT * FROM changing WHERE a = ${1} /* changing */`.execute(db);
        await select();
        expect((await select()).rows).toEqual([{ a: 1 }]);
        expect((await prepared(db)).filter((row) => row.statement.includes('/* changing */'))).toHaveLength(1);
        // A column added by another process: the prepared statement's result type changed.
        await other.query(`ALTER TABLE "${ownSchema}".changing ADD COLUMN b text DEFAULT 'new'`);
        expect((await select()).rows).toEqual([{ a: 1, b: 'new' }]);
        // Inside a transaction the error aborts it, so it is reported; the text is named no more.
        const inTransaction = () => db.transaction().execute(async (trx) => (await sql<Record<string, unknown>>`SELECT * FROM changing WHERE a = ${1} /* changing in trx */`.execute(trx)).rows);
        await inTransaction();
        expect(await inTransaction()).toEqual([{ a: 1, b: 'new' }]);
        await other.query(`ALTER TABLE "${ownSchema}".changing ADD COLUMN c text DEFAULT 'newer'`);
        await expect(inTransaction()).rejects.toThrow(/cached plan must not change result type/);
        expect(await inTransaction()).toEqual([{ a: 1, b: 'new', c: 'newer' }]);
        expect((await select()).rows).toEqual([{ a: 1, b: 'new', c: 'newer' }]);
      } finally {
        await other.end();
      }
    });

    it('(last: it takes the names left) names at most 100 statements in a process; the rest go unnamed and work as before', async () => {
      for (let round = 0; round < 2; round++) {
        for (let i = 0; i < 120; i++) {
          const { rows } = await sql<{ n: number }>`SELECT ${i}::bigint AS n FROM prep WHERE a = ${1} /* cap ${sql.raw(String(i))} */`.execute(db);
          expect(rows).toEqual([{ n: i }]);
        }
      }
      const names = await prepared(db);
      expect(names.length).toBeLessThanOrEqual(100);
      expect(names.filter((row) => row.statement.includes('/* cap ')).length).toBeLessThan(120);
    });

    it('names nothing with database.prepared_statements off', async () => {
      const off = openPostgres({ url: POSTGRES, poolSize: 1, statementTimeoutMs: 0, schema: ownSchema, preparedStatements: false });
      try {
        for (let i = 0; i < 3; i++) await sql`SELECT b FROM prep WHERE a = ${1} /* off */`.execute(off);
        expect(await prepared(off)).toEqual([]);
      } finally {
        await off.destroy();
      }
    });
  });

  it('gives at most its cap of names, the same one to a text every time, and a retired one to none', () => {
    const names = new StatementNames(2);
    expect(names.nameFor('a')).toBeUndefined();
    const a = names.nameFor('a');
    expect(a).toBeDefined();
    expect(names.nameFor('a')).toBe(a);
    names.nameFor('b');
    const b = names.nameFor('b');
    expect(b).toBeDefined();
    expect(b).not.toBe(a);
    // Full: c is never named.
    for (let i = 0; i < 3; i++) expect(names.nameFor('c')).toBeUndefined();
    names.retire('a');
    expect(names.nameFor('a')).toBeUndefined();
    // Its slot stays taken: a connection may still hold the name.
    expect(names.nameFor('c')).toBeUndefined();
    expect(names.nameFor('b')).toBe(b);
  });
});
