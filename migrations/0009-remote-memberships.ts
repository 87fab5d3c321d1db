/**
 * Federation, memberships in rooms this server is not in: an invite from another server is kept
 * with the stripped state its server sent (what the invited user sees before joining), and EDUs
 * kept for the encryption work (device list updates, to-device messages) wait in a bounded table.
 * Frozen: later changes get a new migration.
 */
import { type Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('remote_memberships')
    .addColumn('room_id', 'text', (c) => c.notNull())
    .addColumn('user_id', 'text', (c) => c.notNull())
    // 'invite', or 'leave' once rejected (or rescinded).
    .addColumn('membership', 'text', (c) => c.notNull())
    .addColumn('event_id', 'text', (c) => c.notNull())
    .addColumn('room_version', 'text', (c) => c.notNull())
    // JSON list of stripped state events (the invite_room_state the inviting server sent).
    .addColumn('stripped_state', 'text', (c) => c.notNull())
    // The membership event as a PDU (JSON), signed by both servers for an invite.
    .addColumn('pdu', 'text', (c) => c.notNull())
    .addColumn('updated_ts', 'bigint', (c) => c.notNull())
    .addPrimaryKeyConstraint('remote_memberships_pk', ['room_id', 'user_id'])
    .execute();

  await db.schema
    .createTable('federation_kept_edus')
    .addColumn('id', 'integer', (c) => c.primaryKey().autoIncrement())
    .addColumn('origin', 'text', (c) => c.notNull())
    .addColumn('edu_type', 'text', (c) => c.notNull())
    .addColumn('content', 'text', (c) => c.notNull())
    .addColumn('received_ts', 'bigint', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('federation_kept_edus_origin').on('federation_kept_edus').columns(['origin', 'id']).execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('federation_kept_edus').execute();
  await db.schema.dropTable('remote_memberships').execute();
}
