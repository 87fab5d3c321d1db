/**
 * `!bridge` commands the bridge has seen and not yet finished, written in the same transaction as
 * its sync position: a command seen before a crash runs after the restart instead of being lost.
 * Only the event id is kept; the command's text (which may hold a secret) stays in the event.
 * Frozen: later changes get a new migration.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('bridge_commands')
    .addColumn('event_id', 'text', (c) => c.primaryKey())
    .addColumn('room_id', 'text', (c) => c.notNull())
    .addColumn('received_ts', 'integer', (c) => c.notNull())
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('bridge_commands').execute();
}
