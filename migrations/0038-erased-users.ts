/**
 * Issue 33 (conformance): the users erased on deactivation (`erase: true`). Their events are
 * served redacted to those who were not in the room when they were sent, and to other servers,
 * as Synapse does (its `erased_users`).
 * Frozen: later changes get a new migration.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('erased_users')
    .addColumn('user_id', 'text', (c) => c.primaryKey())
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('erased_users').execute();
}
