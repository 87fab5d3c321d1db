/**
 * To-device messages (`/sendToDevice`, and `m.direct_to_device` from other servers): each waits in
 * its device's inbox until a sync has delivered it and the client has acknowledged that sync with
 * a later `since`. The transaction ids of senders make a repeated request a no-op. Frozen: later
 * changes get a new migration.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('device_inbox')
    .addColumn('id', 'integer', (c) => c.primaryKey().autoIncrement())
    .addColumn('user_id', 'text', (c) => c.notNull())
    .addColumn('device_id', 'text', (c) => c.notNull())
    .addColumn('sender', 'text', (c) => c.notNull())
    .addColumn('type', 'text', (c) => c.notNull())
    .addColumn('content', 'text', (c) => c.notNull())
    .addColumn('stream_ordering', 'bigint', (c) => c.notNull())
    // The stream position of the sync answer that delivered it; acknowledged by a later since.
    .addColumn('delivered_stream', 'bigint')
    .addColumn('created_ts', 'bigint', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('device_inbox_by_device').on('device_inbox').columns(['user_id', 'device_id', 'id']).execute();
  await db.schema
    .createTable('to_device_txns')
    .addColumn('user_id', 'text', (c) => c.notNull())
    .addColumn('device_id', 'text', (c) => c.notNull())
    .addColumn('txn_id', 'text', (c) => c.notNull())
    .addColumn('created_ts', 'bigint', (c) => c.notNull())
    .addPrimaryKeyConstraint('to_device_txns_pk', ['user_id', 'device_id', 'txn_id'])
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('to_device_txns').execute();
  await db.schema.dropTable('device_inbox').execute();
}
