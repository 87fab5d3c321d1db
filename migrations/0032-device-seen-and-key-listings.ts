/**
 * Issue 33 (conformance):
 * - the user agent a device was last seen with, beside its address and time (`devices` had those
 *   two from the start, unfilled until now): the admin `whois` API and `/devices` show them;
 * - every key listing a server gave, by key id, so that this server as a notary still serves a
 *   key its server no longer lists once a newer listing came (`server_key_responses` keeps only
 *   the newest listing of each server).
 * Frozen: later changes get a new migration.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('devices').addColumn('last_seen_user_agent', 'text').execute();
  await db.schema
    .createTable('server_key_listings')
    .addColumn('server_name', 'text', (c) => c.notNull())
    .addColumn('key_id', 'text', (c) => c.notNull())
    // The listing as its server signed it (our signature is added when it is served).
    .addColumn('response', 'text', (c) => c.notNull())
    .addColumn('valid_until_ts', 'bigint', (c) => c.notNull())
    .addPrimaryKeyConstraint('server_key_listings_pk', ['server_name', 'key_id'])
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('server_key_listings').execute();
  await db.schema.alterTable('devices').dropColumn('last_seen_user_agent').execute();
}
