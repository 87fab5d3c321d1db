/**
 * Issue 33 (cross-signing): `device_list_changes.told_user_id`, the one user told of a change
 * (`NULL`: everyone sharing a room with `user_id`, and `user_id` themself). A signature that Alice
 * makes of Bob's master key with her user-signing key is hers alone: she is told that Bob's keys
 * changed (Bob in her `device_lists.changed`), and nobody else is, as Synapse's
 * `user_signature_stream`. It replaces `own_only` (migration 0037), which could only name the
 * user themself: a new user-signing key is now `told_user_id = user_id`.
 * Frozen: later changes get a new migration.
 */
import { sql, type Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('device_list_changes').addColumn('told_user_id', 'text').execute();
  await sql`UPDATE device_list_changes SET told_user_id = user_id WHERE own_only = 1`.execute(db);
  await db.schema.alterTable('device_list_changes').dropColumn('own_only').execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('device_list_changes').addColumn('own_only', 'integer', (c) => c.notNull().defaultTo(0)).execute();
  // A change told to another user than its own has no form here: it goes.
  await sql`DELETE FROM device_list_changes WHERE told_user_id IS NOT NULL AND told_user_id <> user_id`.execute(db);
  await sql`UPDATE device_list_changes SET own_only = 1 WHERE told_user_id IS NOT NULL`.execute(db);
  await db.schema.alterTable('device_list_changes').dropColumn('told_user_id').execute();
}
