/**
 * Application services: the events each registered appservice is to receive, written in the same
 * transaction as the events themselves (so nothing is lost by a restart) and deleted once the
 * appservice has acknowledged the transaction that carried them. `txn_id` is set when a
 * transaction's first attempt fails, so every retry sends exactly the same one. Frozen: later
 * changes get a new migration.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('appservice_outbox')
    .addColumn('id', 'integer', (c) => c.primaryKey().autoIncrement())
    .addColumn('as_id', 'text', (c) => c.notNull())
    .addColumn('event_id', 'text', (c) => c.notNull())
    .addColumn('txn_id', 'bigint')
    .addColumn('created_ts', 'bigint', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('appservice_outbox_by_service').on('appservice_outbox').columns(['as_id', 'id']).execute();
  await db.schema.createIndex('appservice_outbox_by_txn').on('appservice_outbox').columns(['as_id', 'txn_id']).execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('appservice_outbox').execute();
}
