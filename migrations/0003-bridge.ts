/**
 * The bridge user's own records: its sync position, webhooks, and feed subscriptions with what it
 * has already posted. Frozen once landed: later changes get a new migration.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  // Small named values the bridge keeps across restarts (its sync token).
  await db.schema
    .createTable('bridge_state')
    .addColumn('key', 'text', (col) => col.primaryKey())
    .addColumn('value', 'text', (col) => col.notNull())
    .execute();

  // A webhook's id is its only credential, so only its SHA-256 is kept.
  await db.schema
    .createTable('bridge_webhooks')
    .addColumn('id_hash', 'text', (col) => col.primaryKey())
    .addColumn('room_id', 'text', (col) => col.notNull())
    .addColumn('name', 'text', (col) => col.notNull())
    .addColumn('created_by', 'text', (col) => col.notNull())
    .addColumn('created_ts', 'bigint', (col) => col.notNull())
    .execute();
  await db.schema.createIndex('bridge_webhooks_room_name').on('bridge_webhooks').columns(['room_id', 'name']).unique().execute();

  // One row per feed URL however many rooms follow it: it is fetched once per interval.
  await db.schema
    .createTable('bridge_feeds')
    .addColumn('url', 'text', (col) => col.primaryKey())
    .addColumn('title', 'text')
    .addColumn('etag', 'text')
    .addColumn('last_modified', 'text')
    .addColumn('last_success_ts', 'bigint')
    .addColumn('last_error', 'text')
    .addColumn('last_error_ts', 'bigint')
    .addColumn('failures', 'integer', (col) => col.notNull().defaultTo(0))
    .addColumn('next_poll_ts', 'bigint', (col) => col.notNull())
    .execute();

  await db.schema
    .createTable('bridge_room_feeds')
    .addColumn('room_id', 'text', (col) => col.notNull())
    .addColumn('url', 'text', (col) => col.notNull())
    .addColumn('label', 'text')
    .addColumn('added_by', 'text', (col) => col.notNull())
    .addColumn('created_ts', 'bigint', (col) => col.notNull())
    // Set once the room has been told about the current failure streak; cleared on success.
    .addColumn('failure_notified', 'integer', (col) => col.notNull().defaultTo(0))
    .addPrimaryKeyConstraint('bridge_room_feeds_pk', ['room_id', 'url'])
    .execute();
  await db.schema.createIndex('bridge_room_feeds_url').on('bridge_room_feeds').column('url').execute();

  // Items already posted (or present when the feed was added), so each appears once.
  await db.schema
    .createTable('bridge_feed_seen')
    .addColumn('url', 'text', (col) => col.notNull())
    .addColumn('item_id', 'text', (col) => col.notNull())
    .addColumn('seen_ts', 'bigint', (col) => col.notNull())
    .addPrimaryKeyConstraint('bridge_feed_seen_pk', ['url', 'item_id'])
    .execute();
  await db.schema.createIndex('bridge_feed_seen_age').on('bridge_feed_seen').columns(['url', 'seen_ts']).execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  for (const table of ['bridge_feed_seen', 'bridge_room_feeds', 'bridge_feeds', 'bridge_webhooks', 'bridge_state']) {
    await db.schema.dropTable(table).execute();
  }
}
