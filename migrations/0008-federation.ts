/**
 * Federation's own records: other servers' signing keys (and the signed answers they came in, to
 * serve as a notary), transactions received (answered once per origin and id), and the outbound
 * queue per destination with its backoff, so what local users were told succeeded reaches other
 * servers across restarts. Frozen: later changes get a new migration.
 */
import { type Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('server_keys')
    .addColumn('server_name', 'text', (c) => c.notNull())
    .addColumn('key_id', 'text', (c) => c.notNull())
    .addColumn('verify_key', 'text', (c) => c.notNull())
    .addColumn('valid_until_ts', 'bigint', (c) => c.notNull())
    // Set for old keys: events signed after this are not accepted with it.
    .addColumn('expired_ts', 'bigint')
    .addColumn('fetched_ts', 'bigint', (c) => c.notNull())
    .addPrimaryKeyConstraint('server_keys_pk', ['server_name', 'key_id'])
    .execute();
  // The newest signed key listing of each server, served again by POST /_matrix/key/v2/query.
  await db.schema
    .createTable('server_key_responses')
    .addColumn('server_name', 'text', (c) => c.primaryKey())
    .addColumn('response', 'text', (c) => c.notNull())
    .addColumn('valid_until_ts', 'bigint', (c) => c.notNull())
    .execute();

  await db.schema
    .createTable('federation_inbound_txns')
    .addColumn('origin', 'text', (c) => c.notNull())
    .addColumn('txn_id', 'text', (c) => c.notNull())
    .addColumn('response', 'text', (c) => c.notNull())
    .addColumn('received_ts', 'bigint', (c) => c.notNull())
    .addPrimaryKeyConstraint('federation_inbound_txns_pk', ['origin', 'txn_id'])
    .execute();
  await db.schema.createIndex('federation_inbound_txns_ts').on('federation_inbound_txns').column('received_ts').execute();

  // What is still to be sent to each destination, in order: PDUs by event id, EDUs as JSON.
  await db.schema
    .createTable('federation_outbox')
    .addColumn('id', 'integer', (c) => c.primaryKey().autoIncrement())
    .addColumn('destination', 'text', (c) => c.notNull())
    .addColumn('kind', 'text', (c) => c.notNull())
    .addColumn('payload', 'text', (c) => c.notNull())
    .addColumn('created_ts', 'bigint', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('federation_outbox_destination').on('federation_outbox').columns(['destination', 'id']).execute();
  await db.schema
    .createTable('federation_destinations')
    .addColumn('destination', 'text', (c) => c.primaryKey())
    .addColumn('failures', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('retry_after_ts', 'bigint', (c) => c.notNull().defaultTo(0))
    .addColumn('last_success_ts', 'bigint')
    .addColumn('last_error', 'text')
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  for (const table of ['federation_destinations', 'federation_outbox', 'federation_inbound_txns', 'server_key_responses', 'server_keys']) {
    await db.schema.dropTable(table).execute();
  }
}
