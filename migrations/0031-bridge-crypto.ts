/**
 * The bridge's crypto device (issue 31): the records of its Matrix Rust SDK crypto store, one row
 * per IndexedDB record (`database` is which of the store's two IndexedDB databases, `object_store`
 * the object store, `record_key` the record's key serialised), written as the store changes. The
 * values are what the SDK wrote: encrypted by it with the store key, which is itself kept sealed
 * in `bridge_state`. Frozen: later changes get a new migration.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('bridge_crypto_records')
    .addColumn('database', 'text', (c) => c.notNull())
    .addColumn('object_store', 'text', (c) => c.notNull())
    .addColumn('record_key', 'text', (c) => c.notNull())
    .addColumn('value', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('bridge_crypto_records_pk', ['database', 'object_store', 'record_key'])
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('bridge_crypto_records').execute();
}
