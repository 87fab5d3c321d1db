/**
 * The bot portal's security review (after issue 32):
 * - `portal_identities`: which account at which provider (its stable subject) is which person. A
 *   person is bound to the first account they sign in with; another account whose user name maps
 *   to the same person (a name given again, a renamed account) is refused, not let in as them.
 *   Seeded from the sessions of people signed in now, earliest first; a session of a later,
 *   other account as the same person ends.
 * - `portal_sign_ins`: sign-ins started and not yet come back, by the SHA-256 of their `state`,
 *   so that each can finish once only (a replayed callback is refused here, before the provider).
 * Frozen: later changes get a new migration.
 */
import { sql, type Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('portal_identities')
    .addColumn('idp_id', 'text', (c) => c.notNull())
    // The provider's subject (the claim user_mapping_provider.config.subject_claim names, `sub`).
    .addColumn('subject', 'text', (c) => c.notNull())
    .addColumn('owner_id', 'text', (c) => c.notNull().unique())
    .addColumn('created_ts', 'bigint', (c) => c.notNull())
    .addPrimaryKeyConstraint('portal_identities_pk', ['idp_id', 'subject'])
    .execute();
  // `WHERE true`: SQLite reads an ON CONFLICT after a bare SELECT as part of a join.
  await sql`INSERT INTO portal_identities (idp_id, subject, owner_id, created_ts)
    SELECT idp_id, sub, owner_id, MIN(created_ts) FROM portal_sessions WHERE true
    GROUP BY idp_id, sub, owner_id ORDER BY MIN(created_ts)
    ON CONFLICT DO NOTHING`.execute(db);
  // A session of another account as someone already bound (the takeover this stops) ends now.
  await sql`DELETE FROM portal_sessions WHERE NOT EXISTS (SELECT 1 FROM portal_identities i
    WHERE i.idp_id = portal_sessions.idp_id AND i.subject = portal_sessions.sub AND i.owner_id = portal_sessions.owner_id)`.execute(db);
  await db.schema
    .createTable('portal_sign_ins')
    .addColumn('state_hash', 'text', (c) => c.primaryKey())
    .addColumn('idp_id', 'text', (c) => c.notNull())
    .addColumn('expires_ts', 'bigint', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('portal_sign_ins_by_expiry').on('portal_sign_ins').columns(['expires_ts']).execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('portal_sign_ins').execute();
  await db.schema.dropTable('portal_identities').execute();
}
