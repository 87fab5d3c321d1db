/**
 * Issue 34: a sync's `device_lists.changed` looked at every device-list change since its token
 * (`stream_ordering` alone was indexed), though only the user's own, their roommates' and those
 * told to them alone can be shown. With 10,000 users each of whose first login made a change, a
 * parked sync read 10,000 rows: parking them all cost quadratic time. These indexes let it read
 * the changes of the users it may show, each a range of its own.
 * Frozen: later changes get a new migration.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.createIndex('device_list_changes_by_user').on('device_list_changes').columns(['user_id', 'stream_ordering']).execute();
  await db.schema
    .createIndex('device_list_changes_by_told_user')
    .on('device_list_changes')
    .columns(['told_user_id', 'stream_ordering'])
    .where((eb) => eb('told_user_id', 'is not', null))
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropIndex('device_list_changes_by_told_user').execute();
  await db.schema.dropIndex('device_list_changes_by_user').execute();
}
