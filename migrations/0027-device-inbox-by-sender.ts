/**
 * A device's waiting to-device messages by sender: the inbox is shared fairly between senders
 * (`sync/inbox-admission.ts`), which needs each sender's count and oldest messages for one device.
 * Frozen: later changes get a new migration.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.createIndex('device_inbox_by_sender').on('device_inbox').columns(['user_id', 'device_id', 'sender', 'id']).execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropIndex('device_inbox_by_sender').execute();
}
