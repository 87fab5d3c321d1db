/**
 * Rooms, events, room state, membership, aliases, account data, receipts and filters. Frozen:
 * later changes get a new migration.
 *
 * Everything sync returns is ordered by one stream: `events.stream_ordering`, and the same
 * counter stamps account data and receipts, so a sync token is one number.
 */
import { sql, type Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('rooms')
    .addColumn('room_id', 'text', (col) => col.primaryKey())
    .addColumn('room_version', 'text', (col) => col.notNull())
    .addColumn('creator', 'text', (col) => col.notNull())
    .addColumn('is_public', 'integer', (col) => col.notNull().defaultTo(0))
    .addColumn('created_ts', 'bigint', (col) => col.notNull())
    .execute();

  await db.schema
    .createTable('events')
    .addColumn('stream_ordering', 'bigint', (col) => col.primaryKey())
    .addColumn('event_id', 'text', (col) => col.notNull().unique())
    .addColumn('room_id', 'text', (col) => col.notNull())
    .addColumn('type', 'text', (col) => col.notNull())
    .addColumn('state_key', 'text')
    .addColumn('sender', 'text', (col) => col.notNull())
    .addColumn('origin_server_ts', 'bigint', (col) => col.notNull())
    .addColumn('content', 'text', (col) => col.notNull())
    // The state event this one replaced (and what it said), so clients get unsigned.prev_content
    // and the state at any point of the timeline can be derived.
    .addColumn('replaces_state', 'text')
    .addColumn('prev_content', 'text')
    .addColumn('prev_sender', 'text')
    .addColumn('redacts', 'text')
    .addColumn('redacted_by', 'text')
    // The room's history visibility when the event was sent: who may read it is judged by that.
    .addColumn('history_visibility', 'text', (col) => col.notNull())
    // Set when sent with a transaction id: retries are answered from here, and the sending
    // device sees `unsigned.transaction_id`. The scope names the endpoint, room and target, since a
    // transaction id identifies one request path, not one device-wide action.
    .addColumn('txn_device_id', 'text')
    .addColumn('txn_scope', 'text')
    .addColumn('txn_id', 'text')
    .execute();
  await db.schema.createIndex('events_room_stream').on('events').columns(['room_id', 'stream_ordering']).execute();
  await db.schema
    .createIndex('events_txn')
    .on('events')
    .columns(['sender', 'txn_device_id', 'txn_scope', 'txn_id'])
    .unique()
    .where((eb) => eb('txn_id', 'is not', null))
    .execute();
  // A user's membership history in a room, read for every visibility check.
  await db.schema
    .createIndex('events_room_state')
    .on('events')
    .columns(['room_id', 'type', 'state_key', 'stream_ordering'])
    .where((eb) => eb('state_key', 'is not', null))
    .execute();
  // The state changes of a room after a position: what sync and /context undo or send.
  await db.schema
    .createIndex('events_room_state_changes')
    .on('events')
    .columns(['room_id', 'stream_ordering'])
    .where(sql<boolean>`state_key is not null`)
    .execute();
  // The events that replaced a state event, whose prev_content a redaction must strip too.
  await db.schema
    .createIndex('events_replaces_state')
    .on('events')
    .column('replaces_state')
    .where((eb) => eb('replaces_state', 'is not', null))
    .execute();

  await db.schema
    .createTable('current_state')
    .addColumn('room_id', 'text', (col) => col.notNull())
    .addColumn('type', 'text', (col) => col.notNull())
    .addColumn('state_key', 'text', (col) => col.notNull())
    .addColumn('event_id', 'text', (col) => col.notNull())
    .addPrimaryKeyConstraint('current_state_pk', ['room_id', 'type', 'state_key'])
    .execute();

  await db.schema
    .createTable('memberships')
    .addColumn('room_id', 'text', (col) => col.notNull())
    .addColumn('user_id', 'text', (col) => col.notNull())
    .addColumn('membership', 'text', (col) => col.notNull())
    .addColumn('event_id', 'text', (col) => col.notNull())
    .addColumn('stream_ordering', 'bigint', (col) => col.notNull())
    .addColumn('forgotten', 'integer', (col) => col.notNull().defaultTo(0))
    .addPrimaryKeyConstraint('memberships_pk', ['room_id', 'user_id'])
    .execute();
  await db.schema.createIndex('memberships_user').on('memberships').columns(['user_id']).execute();

  await db.schema
    .createTable('room_aliases')
    .addColumn('alias', 'text', (col) => col.primaryKey())
    .addColumn('room_id', 'text', (col) => col.notNull())
    .addColumn('creator', 'text', (col) => col.notNull())
    .execute();
  await db.schema.createIndex('room_aliases_room').on('room_aliases').columns(['room_id']).execute();

  await db.schema
    .createTable('account_data')
    .addColumn('user_id', 'text', (col) => col.notNull())
    // '' for global account data.
    .addColumn('room_id', 'text', (col) => col.notNull())
    .addColumn('type', 'text', (col) => col.notNull())
    .addColumn('content', 'text', (col) => col.notNull())
    .addColumn('stream_ordering', 'bigint', (col) => col.notNull())
    .addPrimaryKeyConstraint('account_data_pk', ['user_id', 'room_id', 'type'])
    .execute();
  await db.schema.createIndex('account_data_stream').on('account_data').columns(['user_id', 'stream_ordering']).execute();

  await db.schema
    .createTable('receipts')
    .addColumn('room_id', 'text', (col) => col.notNull())
    .addColumn('user_id', 'text', (col) => col.notNull())
    .addColumn('receipt_type', 'text', (col) => col.notNull())
    // '' for unthreaded receipts.
    .addColumn('thread_id', 'text', (col) => col.notNull())
    .addColumn('event_id', 'text', (col) => col.notNull())
    .addColumn('ts', 'bigint', (col) => col.notNull())
    .addColumn('stream_ordering', 'bigint', (col) => col.notNull())
    .addPrimaryKeyConstraint('receipts_pk', ['room_id', 'user_id', 'receipt_type', 'thread_id'])
    .execute();
  await db.schema.createIndex('receipts_room_stream').on('receipts').columns(['room_id', 'stream_ordering']).execute();

  await db.schema
    .createTable('filters')
    .addColumn('user_id', 'text', (col) => col.notNull())
    .addColumn('filter_id', 'integer', (col) => col.notNull())
    .addColumn('definition', 'text', (col) => col.notNull())
    .addPrimaryKeyConstraint('filters_pk', ['user_id', 'filter_id'])
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  for (const table of ['filters', 'receipts', 'account_data', 'room_aliases', 'memberships', 'current_state', 'events', 'rooms']) {
    await db.schema.dropTable(table).execute();
  }
}
