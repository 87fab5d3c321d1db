/**
 * Media of other servers, fetched over federation for our clients and kept: the row names the
 * blob (stored under an id of our own) and says what it is. Frozen: later changes get a new
 * migration.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('remote_media')
    .addColumn('server_name', 'text', (col) => col.notNull())
    .addColumn('media_id', 'text', (col) => col.notNull())
    .addColumn('blob_id', 'text', (col) => col.notNull())
    .addColumn('content_type', 'text', (col) => col.notNull())
    .addColumn('upload_name', 'text')
    .addColumn('size_bytes', 'bigint', (col) => col.notNull())
    .addColumn('sha256', 'text', (col) => col.notNull())
    .addColumn('fetched_ts', 'bigint', (col) => col.notNull())
    .addPrimaryKeyConstraint('remote_media_pk', ['server_name', 'media_id'])
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('remote_media').execute();
}
