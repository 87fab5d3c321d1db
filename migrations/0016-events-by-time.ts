/**
 * Events of a room by their sender's timestamp, for `/timestamp_to_event` (bots asking "what was
 * said since yesterday 09:00"). Frozen: later changes get a new migration.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.createIndex('events_by_time').on('events').columns(['room_id', 'origin_server_ts']).execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropIndex('events_by_time').execute();
}
