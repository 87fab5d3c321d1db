/**
 * End-to-end encryption keys: each device's identity keys, its one-time and fallback keys (what
 * another device claims to open an Olm session with it), and the device-list changes that tell
 * other users to fetch a user's keys again. The homeserver never holds a private key. Frozen:
 * later changes get a new migration.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('e2e_device_keys')
    .addColumn('user_id', 'text', (c) => c.notNull())
    .addColumn('device_id', 'text', (c) => c.notNull())
    .addColumn('key_json', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('e2e_device_keys_pk', ['user_id', 'device_id'])
    .execute();
  await db.schema
    .createTable('e2e_one_time_keys')
    .addColumn('user_id', 'text', (c) => c.notNull())
    .addColumn('device_id', 'text', (c) => c.notNull())
    .addColumn('algorithm', 'text', (c) => c.notNull())
    .addColumn('key_id', 'text', (c) => c.notNull())
    .addColumn('key_json', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('e2e_one_time_keys_pk', ['user_id', 'device_id', 'algorithm', 'key_id'])
    .execute();
  await db.schema
    .createTable('e2e_fallback_keys')
    .addColumn('user_id', 'text', (c) => c.notNull())
    .addColumn('device_id', 'text', (c) => c.notNull())
    .addColumn('algorithm', 'text', (c) => c.notNull())
    .addColumn('key_id', 'text', (c) => c.notNull())
    .addColumn('key_json', 'text', (c) => c.notNull())
    .addColumn('used', 'integer', (c) => c.notNull().defaultTo(0))
    .addPrimaryKeyConstraint('e2e_fallback_keys_pk', ['user_id', 'device_id', 'algorithm'])
    .execute();
  await db.schema
    .createTable('device_list_changes')
    .addColumn('stream_ordering', 'bigint', (c) => c.notNull())
    .addColumn('user_id', 'text', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('device_list_changes_by_stream').on('device_list_changes').columns(['stream_ordering']).execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('device_list_changes').execute();
  await db.schema.dropTable('e2e_fallback_keys').execute();
  await db.schema.dropTable('e2e_one_time_keys').execute();
  await db.schema.dropTable('e2e_device_keys').execute();
}
