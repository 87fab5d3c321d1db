/**
 * Issue 33 (guest access): whether an account is a guest (`POST /register?kind=guest`). A guest
 * may use only the endpoints Synapse opens to guests and join only rooms whose
 * `m.room.guest_access` is `can_join`; upgrading the account clears the flag.
 * Frozen: later changes get a new migration.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('users').addColumn('is_guest', 'integer', (c) => c.notNull().defaultTo(0)).execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('users').dropColumn('is_guest').execute();
}
