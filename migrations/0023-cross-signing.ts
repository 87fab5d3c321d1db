/**
 * Cross-signing: each user's master, self-signing and user-signing public keys, and the
 * signatures users make of other users' master keys (shown to the signer only, as Synapse does).
 * Frozen: later changes get a new migration.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('e2e_cross_signing_keys')
    .addColumn('user_id', 'text', (c) => c.notNull())
    .addColumn('key_type', 'text', (c) => c.notNull())
    .addColumn('key_json', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('e2e_cross_signing_keys_pk', ['user_id', 'key_type'])
    .execute();
  await db.schema
    .createTable('e2e_cross_signing_signatures')
    .addColumn('signer_user_id', 'text', (c) => c.notNull())
    .addColumn('target_user_id', 'text', (c) => c.notNull())
    .addColumn('target_key_id', 'text', (c) => c.notNull())
    .addColumn('key_id', 'text', (c) => c.notNull())
    .addColumn('signature', 'text', (c) => c.notNull())
    .addPrimaryKeyConstraint('e2e_cross_signing_signatures_pk', ['signer_user_id', 'target_user_id', 'target_key_id', 'key_id'])
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('e2e_cross_signing_signatures').execute();
  await db.schema.dropTable('e2e_cross_signing_keys').execute();
}
