/**
 * The cache of other servers' media gets what its bounds need: when each was last downloaded
 * (retention deletes what nobody asked for in `media_retention.remote_media_lifetime`, and the size
 * bound the least recently used first), and whether it was fetched for an authenticated request
 * (as Synapse marks it: such media is never served on the unauthenticated legacy downloads while
 * `enable_authenticated_media` is on; what was cached before stays available there). Frozen.
 */
import { sql, type Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('remote_media').addColumn('last_access_ts', 'bigint', (c) => c.notNull().defaultTo(0)).execute();
  await db.schema.alterTable('remote_media').addColumn('authenticated', 'integer', (c) => c.notNull().defaultTo(0)).execute();
  await sql`UPDATE remote_media SET last_access_ts = fetched_ts`.execute(db);
  await db.schema.createIndex('remote_media_last_access').on('remote_media').columns(['last_access_ts']).execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropIndex('remote_media_last_access').execute();
  await db.schema.alterTable('remote_media').dropColumn('authenticated').execute();
  await db.schema.alterTable('remote_media').dropColumn('last_access_ts').execute();
}
