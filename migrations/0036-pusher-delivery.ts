/**
 * Delivery to push gateways: each pusher remembers the device (session) that set it, so logging
 * that device out removes it; the stream position it has pushed up to, so a restart neither loses
 * nor repeats a notification; and since when it has been failing (a pusher that fails for long
 * enough skips the notification it is stuck on). Frozen: later changes get a new migration.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  // One column per statement: SQLite adds one at a time.
  await db.schema.alterTable('pushers').addColumn('device_id', 'text').execute();
  await db.schema.alterTable('pushers').addColumn('last_stream_ordering', 'bigint').execute();
  await db.schema.alterTable('pushers').addColumn('failing_since', 'bigint').execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('pushers').dropColumn('failing_since').execute();
  await db.schema.alterTable('pushers').dropColumn('last_stream_ordering').execute();
  await db.schema.alterTable('pushers').dropColumn('device_id').execute();
}
