/**
 * Presence: each user's last known state (local users' from their clients, other servers' users'
 * from `m.presence` EDUs), at the stream position it changed, so syncs learn what changed since
 * their token. Frozen: later changes get a new migration.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('presence')
    .addColumn('user_id', 'text', (c) => c.primaryKey())
    .addColumn('presence', 'text', (c) => c.notNull())
    .addColumn('status_msg', 'text')
    .addColumn('last_active_ts', 'bigint', (c) => c.notNull())
    .addColumn('stream_ordering', 'bigint', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('presence_by_stream').on('presence').column('stream_ordering').execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('presence').execute();
}
