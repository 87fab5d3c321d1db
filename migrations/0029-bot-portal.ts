/**
 * The bot portal (issue 32): who owns which bot, who may create bots by an operator's grant, the
 * audit log of what was done to bots and grants, the portal's sign-in sessions, the secret its
 * cookies are signed with, and when each account last logged in and was last active.
 * Frozen: later changes get a new migration.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('bot_owners')
    .addColumn('user_id', 'text', (c) => c.primaryKey())
    // A person's user id on the organisation's homeserver (portal.people_server_name).
    .addColumn('owner_id', 'text', (c) => c.notNull())
    .addColumn('description', 'text', (c) => c.notNull().defaultTo(''))
    .addColumn('created_ts', 'bigint', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('bot_owners_by_owner').on('bot_owners').columns(['owner_id']).execute();
  await db.schema
    .createTable('bot_creator_grants')
    .addColumn('user_id', 'text', (c) => c.primaryKey())
    .addColumn('granted_by', 'text', (c) => c.notNull())
    .addColumn('granted_ts', 'bigint', (c) => c.notNull())
    .addColumn('note', 'text')
    .execute();
  await db.schema
    .createTable('bot_audit_log')
    .addColumn('id', 'integer', (c) => c.primaryKey().autoIncrement())
    .addColumn('ts', 'bigint', (c) => c.notNull())
    // Who: a person's user id, an admin's user id, or "cli:<os user>".
    .addColumn('actor', 'text', (c) => c.notNull())
    .addColumn('action', 'text', (c) => c.notNull())
    // The bot, or the person a grant is about.
    .addColumn('target', 'text', (c) => c.notNull())
    // JSON: what else is worth knowing (the new owner, a grant's note); never a secret.
    .addColumn('detail', 'text')
    .execute();
  await db.schema.createIndex('bot_audit_log_by_target').on('bot_audit_log').columns(['target', 'id']).execute();
  await db.schema
    .createTable('portal_sessions')
    // SHA-256 of the random session id the signed cookie carries.
    .addColumn('id_hash', 'text', (c) => c.primaryKey())
    .addColumn('owner_id', 'text', (c) => c.notNull())
    .addColumn('display_name', 'text')
    .addColumn('idp_id', 'text', (c) => c.notNull())
    .addColumn('sub', 'text', (c) => c.notNull())
    // The provider's session id (back-channel logout names it), and the ID token for RP-initiated logout.
    .addColumn('sid', 'text')
    .addColumn('id_token', 'text')
    // Whether the provider's attributes gave the right to create bots at sign-in.
    .addColumn('attributes_grant', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('created_ts', 'bigint', (c) => c.notNull())
    .addColumn('last_seen_ts', 'bigint', (c) => c.notNull())
    .addColumn('expires_ts', 'bigint', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('portal_sessions_by_owner').on('portal_sessions').columns(['owner_id']).execute();
  await db.schema.createIndex('portal_sessions_by_sub').on('portal_sessions').columns(['idp_id', 'sub']).execute();
  await db.schema
    .createTable('portal_secrets')
    .addColumn('name', 'text', (c) => c.primaryKey())
    .addColumn('value', 'text', (c) => c.notNull())
    .execute();
  await db.schema
    .createTable('user_activity')
    .addColumn('user_id', 'text', (c) => c.primaryKey())
    .addColumn('last_login_ts', 'bigint')
    .addColumn('last_seen_ts', 'bigint')
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  for (const table of ['user_activity', 'portal_secrets', 'portal_sessions', 'bot_audit_log', 'bot_creator_grants', 'bot_owners']) {
    await db.schema.dropTable(table).execute();
  }
}
