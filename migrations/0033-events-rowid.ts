/**
 * SQLite: the events table keyed by its rowid. `stream_ordering bigint primary key` (0002) is not
 * SQLite's rowid alias (only the exact type name `integer` is), so every event was stored twice
 * over: in the table under a hidden rowid, and in an index of its own on stream_ordering. Every
 * send's commit wrote a page of that index to the WAL (one of about ten per sequential send) and
 * fsynced it, for an index that only repeated the table's order. The table is rebuilt with
 * `stream_ordering integer primary key`: the same columns, values and indexes, one b-tree fewer
 * (issue 34). PostgreSQL's bigint primary key is what it should be: nothing to do there.
 * On a large database this copies the table once: 1.8 s for 100k events on a loaded 2-core VM, and
 * the file grows by the table's size (the old pages are free afterwards, reused by later writes;
 * `VACUUM` gives them back to the file system).
 * Frozen: later changes get a new migration.
 */
import { sql, type Kysely } from 'kysely';
import { isPostgres } from '../src/storage/dialect.js';

const OLD_KEY = '"stream_ordering" bigint primary key';
const NEW_KEY = '"stream_ordering" integer primary key';

export async function up(db: Kysely<unknown>): Promise<void> {
  if (isPostgres(db)) return;
  await rebuild(db, OLD_KEY, NEW_KEY);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  if (isPostgres(db)) return;
  await rebuild(db, NEW_KEY, OLD_KEY);
}

/** Recreates `events` with its key column declared `to` instead of `from`, rows and indexes kept. */
async function rebuild(db: Kysely<unknown>, from: string, to: string): Promise<void> {
  const table = (await sql<{ sql: string }>`SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'events'`.execute(db)).rows[0];
  if (!table) throw new Error('migration 0033: the events table is missing');
  if (!table.sql.includes(from)) {
    if (table.sql.includes(to)) return;
    throw new Error(`migration 0033: unexpected definition of the events table: ${table.sql}`);
  }
  const prefix = 'CREATE TABLE "events" (';
  if (!table.sql.startsWith(prefix)) throw new Error(`migration 0033: unexpected definition of the events table: ${table.sql}`);
  // The indexes declared by migrations (the unique constraint's own index comes with the table).
  const indexes = (await sql<{ sql: string }>`SELECT sql FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'events' AND sql IS NOT NULL`.execute(db)).rows;
  const triggers = (await sql<{ n: number }>`SELECT count(*) AS n FROM sqlite_schema WHERE type IN ('trigger', 'view') AND sql LIKE '%events%'`.execute(db)).rows[0];
  if (triggers && Number(triggers.n) > 0) throw new Error('migration 0033: a trigger or view refers to the events table; rebuild it by hand');
  await sql.raw(`CREATE TABLE "events_rebuilt" (${table.sql.slice(prefix.length).replace(from, to)}`).execute(db);
  await sql`INSERT INTO events_rebuilt SELECT * FROM events`.execute(db);
  await sql`DROP TABLE events`.execute(db);
  await sql`ALTER TABLE events_rebuilt RENAME TO events`.execute(db);
  for (const index of indexes) await sql.raw(index.sql).execute(db);
}
