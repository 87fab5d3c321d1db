/**
 * Accounts, devices and tokens. Frozen: later changes get a new migration.
 * Booleans are integers (0/1) and times are epoch milliseconds, so the same
 * migration reads the same on SQLite and PostgreSQL.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('users')
    .addColumn('user_id', 'text', (col) => col.primaryKey())
    .addColumn('localpart', 'text', (col) => col.notNull().unique())
    .addColumn('password_hash', 'text')
    .addColumn('admin', 'integer', (col) => col.notNull().defaultTo(0))
    .addColumn('user_type', 'text')
    .addColumn('displayname', 'text')
    .addColumn('avatar_url', 'text')
    .addColumn('deactivated', 'integer', (col) => col.notNull().defaultTo(0))
    .addColumn('created_ts', 'bigint', (col) => col.notNull())
    .execute();

  await db.schema
    .createTable('devices')
    .addColumn('user_id', 'text', (col) => col.notNull().references('users.user_id'))
    .addColumn('device_id', 'text', (col) => col.notNull())
    .addColumn('display_name', 'text')
    .addColumn('created_ts', 'bigint', (col) => col.notNull())
    .addColumn('last_seen_ts', 'bigint')
    .addColumn('last_seen_ip', 'text')
    .addPrimaryKeyConstraint('devices_pk', ['user_id', 'device_id'])
    .execute();

  await db.schema
    .createTable('refresh_tokens')
    .addColumn('id', 'integer', (col) => col.primaryKey().autoIncrement())
    .addColumn('token_hash', 'text', (col) => col.notNull().unique())
    .addColumn('user_id', 'text', (col) => col.notNull())
    .addColumn('device_id', 'text', (col) => col.notNull())
    .addColumn('created_ts', 'bigint', (col) => col.notNull())
    .addColumn('expires_ts', 'bigint')
    // The token that replaced this one; this one stays usable until its successor is used.
    .addColumn('next_token_id', 'integer')
    .execute();

  await db.schema
    .createTable('access_tokens')
    .addColumn('id', 'integer', (col) => col.primaryKey().autoIncrement())
    .addColumn('token_hash', 'text', (col) => col.notNull().unique())
    .addColumn('user_id', 'text', (col) => col.notNull())
    .addColumn('device_id', 'text', (col) => col.notNull())
    .addColumn('created_ts', 'bigint', (col) => col.notNull())
    .addColumn('expires_ts', 'bigint')
    .addColumn('refresh_token_id', 'integer')
    .addColumn('used', 'integer', (col) => col.notNull().defaultTo(0))
    .execute();
  await db.schema.createIndex('access_tokens_user').on('access_tokens').columns(['user_id', 'device_id']).execute();
  await db.schema.createIndex('refresh_tokens_user').on('refresh_tokens').columns(['user_id', 'device_id']).execute();
  // Refresh rotation looks tokens up by their successor and by the refresh token they came with.
  await db.schema.createIndex('refresh_tokens_next').on('refresh_tokens').column('next_token_id').execute();
  await db.schema.createIndex('access_tokens_refresh').on('access_tokens').column('refresh_token_id').execute();
  // Expired tokens are pruned periodically.
  await db.schema.createIndex('access_tokens_expiry').on('access_tokens').column('expires_ts').execute();
  await db.schema.createIndex('refresh_tokens_expiry').on('refresh_tokens').column('expires_ts').execute();

  await db.schema
    .createTable('ratelimit_overrides')
    .addColumn('user_id', 'text', (col) => col.primaryKey())
    .addColumn('messages_per_second', 'real', (col) => col.notNull())
    .addColumn('burst_count', 'integer', (col) => col.notNull())
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  for (const table of ['ratelimit_overrides', 'access_tokens', 'refresh_tokens', 'devices', 'users']) {
    await db.schema.dropTable(table).execute();
  }
}
