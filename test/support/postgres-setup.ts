/**
 * Vitest global setup for a run on PostgreSQL (`BHS_TEST_POSTGRES`): fails at once when
 * the server cannot be reached (never a silent fall-back to SQLite), and drops the schemas test
 * homeservers made, before the run (left by an interrupted one) and after it.
 */
import pg from 'pg';

/** Schemas of test homeservers start with this (see `testDatabase` in homeserver.ts). */
export const TEST_SCHEMA_PREFIX = 'bhs_test_';

async function dropTestSchemas(url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ nspname: string }>('SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)', [TEST_SCHEMA_PREFIX]);
    if (rows.length > 0) await client.query(dropStatements(rows.map((row) => row.nspname)));
  } finally {
    await client.end();
  }
}

function dropStatements(schemas: readonly string[]): string {
  return schemas.map((schema) => `DROP SCHEMA IF EXISTS "${schema}" CASCADE`).join('; ');
}

export async function dropSchemas(url: string, schemas: readonly string[]): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(dropStatements(schemas));
  } finally {
    await client.end();
  }
}

/**
 * Deletes every row of a schema's tables but the migrator's, far cheaper than migrating a new one;
 * false (and nothing deleted) when its migrations are not exactly `migrations`.
 */
export async function emptySchema(url: string, schema: string, migrations: readonly string[]): Promise<boolean> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const applied = await client.query<{ name: string }>(`SELECT name FROM "${schema}".kysely_migration ORDER BY name`).catch(() => ({ rows: [] }));
    if (applied.rows.map((row) => row.name).join() !== [...migrations].sort().join()) return false;
    const { rows } = await client.query<{ table_name: string }>(
      "SELECT table_name FROM information_schema.tables WHERE table_schema = $1 AND table_type = 'BASE TABLE' AND NOT starts_with(table_name, 'kysely_')",
      [schema],
    );
    // Users last: devices name them.
    const tables = rows.map((row) => row.table_name).sort((a, b) => Number(a === 'users') - Number(b === 'users'));
    // The stream head stays (its one row is the migration's), back at the start.
    await client.query([...tables.filter((table) => table !== 'stream_head').map((table) => `DELETE FROM "${schema}"."${table}"`), `UPDATE "${schema}".stream_head SET position = 0`].join('; '));
    return true;
  } finally {
    await client.end();
  }
}

export async function setup(): Promise<(() => Promise<void>) | void> {
  const url = process.env.BHS_TEST_POSTGRES;
  if (!url) return;
  try {
    await dropTestSchemas(url);
  } catch (err) {
    throw new Error(`BHS_TEST_POSTGRES=${url}: cannot reach PostgreSQL (${(err as Error).message})`, { cause: err });
  }
  return () => dropTestSchemas(url);
}
