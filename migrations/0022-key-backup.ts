/**
 * Server-side key backup (`/room_keys/...`): each user's backup versions (the algorithm and its
 * public `auth_data`) and the encrypted room keys in them. The server cannot read the keys; it
 * keeps the best copy of each session. Frozen: later changes get a new migration.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('room_key_versions')
    .addColumn('user_id', 'text', (c) => c.notNull())
    .addColumn('version', 'integer', (c) => c.notNull())
    .addColumn('algorithm', 'text', (c) => c.notNull())
    .addColumn('auth_data', 'text', (c) => c.notNull())
    // Moves with every change to the version's keys.
    .addColumn('etag', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('deleted', 'integer', (c) => c.notNull().defaultTo(0))
    .addPrimaryKeyConstraint('room_key_versions_pk', ['user_id', 'version'])
    .execute();
  await db.schema
    .createTable('room_keys')
    .addColumn('user_id', 'text', (c) => c.notNull())
    .addColumn('version', 'integer', (c) => c.notNull())
    .addColumn('room_id', 'text', (c) => c.notNull())
    .addColumn('session_id', 'text', (c) => c.notNull())
    .addColumn('first_message_index', 'integer', (c) => c.notNull())
    .addColumn('forwarded_count', 'integer', (c) => c.notNull())
    .addColumn('is_verified', 'integer', (c) => c.notNull())
    .addColumn('session_data', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('room_keys_pk', ['user_id', 'version', 'room_id', 'session_id'])
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('room_keys').execute();
  await db.schema.dropTable('room_key_versions').execute();
}
