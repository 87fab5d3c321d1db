/**
 * Where a room's current state last changed other than by a new state event (state resolution
 * over events from other servers can bring back an older event, or one known only as an
 * outlier): a sync from before that position gets the room's whole state again. Frozen: later
 * changes get a new migration.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('rooms').addColumn('state_reset_stream', 'bigint', (c) => c.notNull().defaultTo(0)).execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('rooms').dropColumn('state_reset_stream').execute();
}
