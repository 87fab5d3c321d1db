/**
 * `/messages` pages rooms in topological order (depth, then arrival): an index to walk a room's
 * events that way in both directions. Frozen: later changes get a new migration.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.createIndex('events_room_topological').on('events').columns(['room_id', 'depth', 'stream_ordering']).execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropIndex('events_room_topological').execute();
}
