/**
 * Events become PDUs (federation issue, step 1): every event keeps what it is made of across
 * servers (depth, prev_events, auth_events, and the rest of the signed PDU: hashes, signatures,
 * any other key), the state group after it, and whether it is an outlier, rejected or soft failed.
 * Rooms keep their forward extremities, depth and current state group. State groups hold the
 * state after events as a chain of deltas with a full snapshot every so often.
 *
 * Rooms made before this migration are marked legacy: their events have random ids and no auth
 * chain, so they stay local (federation refuses them); new events in them are PDUs all the same.
 * Frozen: later changes get a new migration.
 */
import { sql, type Kysely } from 'kysely';
import { isPostgres } from '../src/storage/dialect.js';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('events').addColumn('depth', 'bigint', (c) => c.notNull().defaultTo(0)).execute();
  // JSON arrays of event ids; null for events older than this migration.
  await db.schema.alterTable('events').addColumn('prev_events', 'text').execute();
  await db.schema.alterTable('events').addColumn('auth_events', 'text').execute();
  // The PDU's other keys as JSON (hashes, signatures, anything a remote server added): with the
  // columns, the exact signed event can be served again.
  await db.schema.alterTable('events').addColumn('pdu_extra', 'text').execute();
  await db.schema.alterTable('events').addColumn('state_group', 'bigint').execute();
  // Known for auth chains and state only, not part of the room's timeline.
  await db.schema.alterTable('events').addColumn('outlier', 'integer', (c) => c.notNull().defaultTo(0)).execute();
  // Why it was rejected (failed auth): stored to be referenced, never shown or built upon.
  await db.schema.alterTable('events').addColumn('rejected', 'text').execute();
  await db.schema.alterTable('events').addColumn('soft_failed', 'integer', (c) => c.notNull().defaultTo(0)).execute();

  await db.schema.alterTable('rooms').addColumn('legacy', 'integer', (c) => c.notNull().defaultTo(0)).execute();
  // The room's forward extremities (JSON array), the depth new events build on, the current state group.
  await db.schema.alterTable('rooms').addColumn('extremities', 'text', (c) => c.notNull().defaultTo('[]')).execute();
  await db.schema.alterTable('rooms').addColumn('depth', 'bigint', (c) => c.notNull().defaultTo(0)).execute();
  await db.schema.alterTable('rooms').addColumn('state_group', 'bigint').execute();
  // Rooms of an older SQLite database; a PostgreSQL database is always made empty at the latest schema.
  if (!isPostgres(db)) {
    await sql`update rooms set legacy = 1,
    extremities = coalesce((select json_array(event_id) from events where events.room_id = rooms.room_id order by stream_ordering desc limit 1), '[]')`.execute(db);
  }

  await db.schema
    .createTable('state_groups')
    .addColumn('id', 'bigint', (c) => c.primaryKey())
    .addColumn('room_id', 'text', (c) => c.notNull())
    // The group this one is a delta of; null for a full snapshot.
    .addColumn('prev_group', 'bigint')
    // Deltas since the last snapshot: past a limit the next group is a snapshot again.
    .addColumn('delta_depth', 'integer', (c) => c.notNull())
    .execute();
  await db.schema
    .createTable('state_group_entries')
    .addColumn('group_id', 'bigint', (c) => c.notNull())
    .addColumn('type', 'text', (c) => c.notNull())
    .addColumn('state_key', 'text', (c) => c.notNull())
    // Null: the key is gone in this group (state resolution can drop a key).
    .addColumn('event_id', 'text')
    .addPrimaryKeyConstraint('state_group_entries_pk', ['group_id', 'type', 'state_key'])
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('state_group_entries').execute();
  await db.schema.dropTable('state_groups').execute();
  for (const column of ['state_group', 'depth', 'extremities', 'legacy']) await db.schema.alterTable('rooms').dropColumn(column).execute();
  for (const column of ['soft_failed', 'rejected', 'outlier', 'state_group', 'pdu_extra', 'auth_events', 'prev_events', 'depth']) {
    await db.schema.alterTable('events').dropColumn(column).execute();
  }
}
