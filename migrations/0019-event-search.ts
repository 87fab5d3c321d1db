/**
 * Full-text search of messages, room names and topics (`POST /search`): SQLite's FTS5 (built into
 * better-sqlite3), keyed by the event's stream position, filled from the events already stored;
 * on PostgreSQL a table with a tsvector column.
 * Frozen: later changes get a new migration.
 */
import { sql, type Kysely } from 'kysely';
import { isPostgres } from '../src/storage/dialect.js';

export async function up(db: Kysely<unknown>): Promise<void> {
  if (isPostgres(db)) {
    // PostgreSQL's full-text search: a tsvector kept by the table itself, under a GIN index. The
    // 'simple' configuration lower-cases words and stems nothing, as FTS5's unicode61 does.
    await sql`CREATE TABLE event_search (
      stream_ordering bigint PRIMARY KEY, value text NOT NULL, event_id text NOT NULL, room_id text NOT NULL, type text NOT NULL,
      words tsvector GENERATED ALWAYS AS (to_tsvector('simple', value)) STORED)`.execute(db);
    await sql`CREATE INDEX event_search_words ON event_search USING gin (words)`.execute(db);
    await sql`CREATE INDEX event_search_room ON event_search (room_id, stream_ordering)`.execute(db);
    return;
  }
  await sql`CREATE VIRTUAL TABLE event_search USING fts5(value, event_id UNINDEXED, room_id UNINDEXED, type UNINDEXED, tokenize = 'unicode61 remove_diacritics 2')`.execute(db);
  for (const [type, key] of [['m.room.message', 'body'], ['m.room.name', 'name'], ['m.room.topic', 'topic']] as const) {
    await sql`
      INSERT INTO event_search (rowid, value, event_id, room_id, type)
      SELECT stream_ordering, json_extract(content, ${`$.${key}`}), event_id, room_id, type
      FROM events
      WHERE type = ${type} AND outlier = 0 AND rejected IS NULL AND stream_ordering > 0 AND redacted_by IS NULL
        AND json_valid(content) AND json_type(content, ${`$.${key}`}) = 'text'
    `.execute(db);
  }
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`DROP TABLE event_search`.execute(db);
}
