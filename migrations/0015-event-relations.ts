/**
 * Relations between events (`m.relates_to` with a `rel_type`: edits, reactions, threads,
 * references), indexed by the event they point at, for `/relations` and `/threads`. Filled from the
 * events already stored. Frozen: later changes get a new migration.
 */
import { sql, type Kysely } from 'kysely';
import { isPostgres } from '../src/storage/dialect.js';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('event_relations')
    .addColumn('event_id', 'text', (c) => c.primaryKey())
    .addColumn('relates_to_id', 'text', (c) => c.notNull())
    .addColumn('rel_type', 'text', (c) => c.notNull())
    .addColumn('room_id', 'text', (c) => c.notNull())
    .addColumn('stream_ordering', 'bigint', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('event_relations_by_parent').on('event_relations').columns(['relates_to_id', 'rel_type', 'stream_ordering']).execute();
  await db.schema.createIndex('event_relations_threads').on('event_relations').columns(['room_id', 'rel_type', 'relates_to_id']).execute();
  // Filled from an older SQLite database's events; a PostgreSQL database is always made empty.
  if (isPostgres(db)) return;
  await sql`
    INSERT INTO event_relations (event_id, relates_to_id, rel_type, room_id, stream_ordering)
    SELECT event_id, json_extract(content, '$."m.relates_to".event_id'), json_extract(content, '$."m.relates_to".rel_type'), room_id, stream_ordering
    FROM events
    WHERE instr(content, 'm.relates_to') > 0 AND outlier = 0 AND rejected IS NULL AND stream_ordering > 0
      AND json_valid(content)
      AND json_type(content, '$."m.relates_to".event_id') = 'text'
      AND json_type(content, '$."m.relates_to".rel_type') = 'text'
  `.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('event_relations').execute();
}
