/**
 * A user's changes to push rules (their own rules, and default rules turned off or given other
 * actions), kept apart from the server's defaults so that new defaults reach everyone; and the
 * pushers clients register. Frozen: later changes get a new migration.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('push_rule_changes')
    .addColumn('user_id', 'text', (c) => c.primaryKey())
    .addColumn('content', 'text', (c) => c.notNull())
    .execute();
  await db.schema
    .createTable('pushers')
    .addColumn('user_id', 'text', (c) => c.notNull())
    .addColumn('app_id', 'text', (c) => c.notNull())
    .addColumn('pushkey', 'text', (c) => c.notNull())
    .addColumn('content', 'text', (c) => c.notNull())
    .addColumn('created_ts', 'bigint', (c) => c.notNull())
    .addPrimaryKeyConstraint('pushers_pk', ['app_id', 'pushkey', 'user_id'])
    .execute();
  await db.schema.createIndex('pushers_by_user').on('pushers').column('user_id').execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('pushers').execute();
  await db.schema.dropTable('push_rule_changes').execute();
}
