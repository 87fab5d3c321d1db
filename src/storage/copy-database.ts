/**
 * Copies everything a SQLite database holds into an empty PostgreSQL one at the same schema version
 * (`bot-homeserver migrate-to-postgres`): every table in one PostgreSQL transaction, so a failed
 * copy leaves nothing behind, then each table's rows are counted on both sides.
 */
import { sql, type Kysely } from 'kysely';
import type { Database } from './schema.js';
import { isPostgres } from './dialect.js';
import { ClusterStore } from './cluster-store.js';

/** Rows per INSERT: PostgreSQL takes at most 65,535 parameters in one statement. */
const ROWS_PER_INSERT = 500;

export interface CopiedTable {
  table: string;
  source: number;
  target: number;
}

export class CopyRefused extends Error {
  override name = 'CopyRefused';
}

/** The tables a SQLite database holds, but for SQLite's and the migrator's own and full-text search's. */
async function sqliteTables(db: Kysely<Database>): Promise<string[]> {
  const { rows } = await sql<{ name: string }>`
    SELECT name FROM sqlite_master
    WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND name NOT LIKE 'kysely\\_%' ESCAPE '\\' AND name NOT LIKE 'event\\_search%' ESCAPE '\\'
    ORDER BY name`.execute(db);
  // Users first: devices name them (the one foreign key of the schema).
  return rows.map((row) => row.name).sort((a, b) => Number(b === 'users') - Number(a === 'users'));
}

async function count(db: Kysely<Database>, table: string): Promise<number> {
  const { rows } = await sql<{ n: number }>`SELECT count(*) AS n FROM ${sql.table(table)}`.execute(db);
  return Number(rows[0]?.n ?? 0);
}

/**
 * Copies `source` (SQLite) into `target` (PostgreSQL), both migrated to the same version; refuses
 * a target that holds any user, room or event already.
 */
export async function copySqliteToPostgres(source: Kysely<Database>, target: Kysely<Database>, progress: (table: string, rows: number) => void = () => undefined): Promise<CopiedTable[]> {
  if (isPostgres(source) || !isPostgres(target)) throw new CopyRefused('the copy goes from SQLite to PostgreSQL');
  const tables = await sqliteTables(source);
  for (const table of ['users', 'rooms', 'events']) {
    if ((await count(target, table)) > 0) throw new CopyRefused(`the PostgreSQL database holds ${table} already; the copy goes into an empty one`);
  }
  await target.transaction().execute(async (trx) => {
    // The migrations wrote their own rows (server_meta); the copy brings the source's instead.
    for (const table of tables) await sql`DELETE FROM ${sql.table(table)}`.execute(trx);
    for (const table of tables) {
      let copied = 0;
      for await (const rows of batches(source.selectFrom(table as keyof Database).selectAll().stream())) {
        await trx.insertInto(table as keyof Database).values(rows.map(withoutNul) as never).execute();
        copied += rows.length;
        progress(table, copied);
      }
    }
    let searched = 0;
    const searchRows = source.selectFrom('event_search' as keyof Database).select([sql<number>`rowid`.as('stream_ordering'), 'value', 'event_id', 'room_id', 'type'] as never).stream();
    for await (const rows of batches(searchRows)) {
      await trx.insertInto('event_search' as keyof Database).values(rows.map(withoutNul) as never).execute();
      searched += rows.length;
      progress('event_search', searched);
    }
    // Identity columns' sequences start after the ids copied, or the next insert would clash.
    const { rows: serials } = await sql<{ table_name: string; column_name: string }>`
      SELECT table_name, column_name FROM information_schema.columns
      WHERE table_schema = current_schema() AND column_default LIKE 'nextval(%'`.execute(trx);
    for (const { table_name: table, column_name: column } of serials) {
      await sql`SELECT setval(pg_get_serial_sequence(${table}, ${column}), max(${sql.ref(column)})) FROM ${sql.table(table)} HAVING count(*) > 0`.execute(trx);
    }
    // So do the blocks of state group ids (the stream head catches up when a server starts).
    await new ClusterStore(trx).reconcileStateGroupIds();
  });
  const counted: CopiedTable[] = [];
  for (const table of [...tables, 'event_search']) counted.push({ table, source: await count(source, table), target: await count(target, table) });
  return counted;
}

/**
 * PostgreSQL's text cannot hold U+0000. Transaction scopes used it as a separator (now U+001F);
 * anywhere else (a state key sent that way) it becomes U+FFFD, the replacement character.
 */
function withoutNul(row: Record<string, unknown>): Record<string, unknown> {
  let copy: Record<string, unknown> | undefined;
  for (const [column, value] of Object.entries(row)) {
    if (typeof value !== 'string' || !value.includes('\u0000')) continue;
    copy ??= { ...row };
    copy[column] = value.replaceAll('\u0000', column === 'txn_scope' ? '\u001f' : '\ufffd');
  }
  return copy ?? row;
}

/** Rows read one by one, inserted ROWS_PER_INSERT at a time. */
async function* batches(rows: AsyncIterable<unknown>): AsyncGenerator<Array<Record<string, unknown>>> {
  let batch: Array<Record<string, unknown>> = [];
  for await (const row of rows) {
    batch.push(row as Record<string, unknown>);
    if (batch.length === ROWS_PER_INSERT) {
      yield batch;
      batch = [];
    }
  }
  if (batch.length > 0) yield batch;
}
