/**
 * Webhook signing secrets: sealed with a key derived from the webhook's id (see
 * src/bridge/webhook-secrets.ts), so this column alone reveals nothing. Null: no signature needed.
 * Frozen: later changes get a new migration.
 */
import type { Kysely } from 'kysely';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('bridge_webhooks').addColumn('secret_sealed', 'text').execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('bridge_webhooks').dropColumn('secret_sealed').execute();
}
