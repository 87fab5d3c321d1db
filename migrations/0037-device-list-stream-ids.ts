/**
 * Issue 33 (device lists):
 * - `device_list_changes.own_only`: a change only the user themselves is told of (a new
 *   user-signing key, a signature of another user's master key), as Synapse tells them;
 * - for each user, the `stream_id` of the last `m.device_list_update` EDU
 * about them that crossed the federation. For a user of this server it is the last one sent (the
 * next EDU's `prev_id`); for a user of another server, the last one applied here (an EDU whose
 * `prev_id` is not it means an update was lost: the user's devices are fetched afresh).
 * Frozen: later changes get a new migration.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('device_list_stream_ids')
    .addColumn('user_id', 'text', (c) => c.notNull().primaryKey())
    .addColumn('stream_id', 'bigint', (c) => c.notNull())
    .execute();
  await db.schema.alterTable('device_list_changes').addColumn('own_only', 'integer', (c) => c.notNull().defaultTo(0)).execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('device_list_changes').dropColumn('own_only').execute();
  await db.schema.dropTable('device_list_stream_ids').execute();
}
