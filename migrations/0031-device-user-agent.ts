/**
 * The user agent a device was last seen with, beside its address and time (`devices` had those
 * two from the start, unfilled until now): the admin `whois` API and `/devices` show them.
 * Frozen: later changes get a new migration.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('devices').addColumn('last_seen_user_agent', 'text').execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('devices').dropColumn('last_seen_user_agent').execute();
}
