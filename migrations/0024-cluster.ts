/**
 * Several server processes on one PostgreSQL database.
 * - `stream_head`: one row, the newest stream position any process committed. A transaction that
 *   takes positions locks it first (so positions commit in the order they are handed out across
 *   every process) and moves it before it commits.
 * - PostgreSQL only: state group ids come from a sequence, in blocks of 100 per process, and
 *   changes to access tokens and webhooks are announced on the server's notification channel, so
 *   every process drops what it cached of them (another process's logout, the CLI's rotation, a
 *   webhook removed through the bridge).
 * - `federation_outbox.txn_id`: the transaction an outbox row was sent in, set before the send and
 *   kept until the destination answers, so a transaction cut short (a crash, a takeover by another
 *   process) goes again with the same id and the destination takes it once.
 * On SQLite `stream_head` exists (one process, nothing reads it) so both engines share one schema.
 * Frozen: later changes get a new migration.
 */
import { sql, type Kysely } from 'kysely';
import { isPostgres } from '../src/storage/dialect.js';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('stream_head')
    .addColumn('id', 'integer', (c) => c.primaryKey())
    .addColumn('position', 'integer', (c) => c.notNull())
    .execute();
  await sql`INSERT INTO stream_head (id, position) VALUES (1, 0)`.execute(db);
  await db.schema.alterTable('federation_outbox').addColumn('txn_id', 'text').execute();
  if (!isPostgres(db)) return;
  await sql`CREATE SEQUENCE state_group_ids INCREMENT BY 100 MINVALUE 1 START WITH 1`.execute(db);
  // A database from before holds state groups: the blocks start above them.
  await sql`SELECT setval('state_group_ids', max(id)) FROM state_groups HAVING count(*) > 0`.execute(db);
  // The channel is named after the schema, as the server computes it (storage/cluster.ts).
  await sql`
    CREATE FUNCTION announce_change() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      PERFORM pg_notify('bhs_' || left(md5(current_schema()), 16), TG_ARGV[0]);
      RETURN NULL;
    END $$`.execute(db);
  for (const [table, payload] of CHANGES_ANNOUNCED) {
    await sql`CREATE TRIGGER ${sql.raw(`${table}_changed`)} AFTER UPDATE OR DELETE ON ${sql.table(table)} FOR EACH STATEMENT EXECUTE FUNCTION announce_change(${sql.lit(payload)})`.execute(db);
  }
}

/** Tables whose changes every process must hear of, and what the notification says. */
const CHANGES_ANNOUNCED: Array<[string, string]> = [
  ['access_tokens', '{"tokens":true}'],
  ['refresh_tokens', '{"tokens":true}'],
  ['bridge_webhooks', '{"webhooks":true}'],
];

export async function down(db: Kysely<unknown>): Promise<void> {
  if (isPostgres(db)) {
    for (const [table] of CHANGES_ANNOUNCED) await sql`DROP TRIGGER ${sql.raw(`${table}_changed`)} ON ${sql.table(table)}`.execute(db);
    await sql`DROP FUNCTION announce_change()`.execute(db);
    await sql`DROP SEQUENCE state_group_ids`.execute(db);
  }
  await db.schema.alterTable('federation_outbox').dropColumn('txn_id').execute();
  await db.schema.dropTable('stream_head').execute();
}
