/**
 * Uploaded media: one row per file, written only after its bytes are durably stored, so a row
 * always has a file behind it. Frozen: later changes get a new migration.
 * (0003 is the bridge's; the numbers say the order they are applied in.)
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('media')
    .addColumn('media_id', 'text', (col) => col.primaryKey())
    .addColumn('content_type', 'text', (col) => col.notNull())
    // The filename given at upload (`?filename=`), shown in Content-Disposition.
    .addColumn('upload_name', 'text')
    .addColumn('size_bytes', 'bigint', (col) => col.notNull())
    .addColumn('sha256', 'text', (col) => col.notNull())
    .addColumn('uploader', 'text', (col) => col.notNull())
    .addColumn('created_ts', 'bigint', (col) => col.notNull())
    .execute();
  await db.schema.createIndex('media_uploader').on('media').columns(['uploader', 'created_ts']).execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('media').execute();
}
