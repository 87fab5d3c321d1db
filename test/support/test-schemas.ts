/**
 * The databases of test homeservers. `BHS_TEST_POSTGRES=postgres://...` runs the suite
 * on PostgreSQL: each homeserver gets a schema of its own, emptied and reused when it closes, and
 * dropped after the file's last test; files and tests run side by side.
 */
import { createHash } from 'node:crypto';
import { dirname, join } from 'node:path';
import { migrations } from '../../migrations/index.js';
import { dropSchemas, emptySchema, TEST_SCHEMA_PREFIX } from './postgres-setup.js';

const TEST_POSTGRES = process.env.BHS_TEST_POSTGRES;
let schemas = 0;
/** Schemas of closed test homeservers, migrated and emptied: a new one costs a migration run. */
const emptiedSchemas: string[] = [];
const createdSchemas = new Set<string>();
/** The schemas testDatabase hands out (emptied on close); persistentDatabase's are kept. */
const pooledSchemas = new Set<string>();

/**
 * Drops the schemas this test file made (test/support/postgres-each-file.ts, after its last test):
 * Kysely's migrator reads the tables of every schema, so leftovers would slow each migration down.
 */
export async function dropTestSchemas(): Promise<void> {
  if (!TEST_POSTGRES || createdSchemas.size === 0) return;
  await dropSchemas(TEST_POSTGRES, [...createdSchemas]);
  createdSchemas.clear();
  pooledSchemas.clear();
  emptiedSchemas.length = 0;
}

/** The database of a test homeserver: in memory, or a PostgreSQL schema of its own (see above). */
export function testDatabase(): Record<string, unknown> {
  if (!TEST_POSTGRES) return { path: ':memory:' };
  const schema = emptiedSchemas.pop() ?? `${TEST_SCHEMA_PREFIX}${process.pid}_${++schemas}`;
  createdSchemas.add(schema);
  pooledSchemas.add(schema);
  // path stays ':memory:': media and the signing key are kept in memory, as with SQLite.
  return postgresDatabase(TEST_POSTGRES, schema);
}

function postgresDatabase(url: string, schema: string): Record<string, unknown> {
  return { path: ':memory:', url, pool_size: 4, schema };
}

/**
 * Config keys for a database that outlives its server, for restart tests: the SQLite file given,
 * or on PostgreSQL a schema named after it (with the media store and signing key beside the file,
 * where SQLite keeps them by default).
 */
export function persistentDatabase(file: string): Record<string, unknown> {
  if (!TEST_POSTGRES) return { database: { path: file } };
  const schema = `${TEST_SCHEMA_PREFIX}${process.pid}_${createHash('sha256').update(file).digest('hex').slice(0, 12)}`;
  createdSchemas.add(schema);
  return {
    database: postgresDatabase(TEST_POSTGRES, schema),
    media_store_path: join(dirname(file), 'media_store'),
    signing_key_path: join(dirname(file), 'test.signing.key'),
  };
}

/** Empties a closed test homeserver's schema (keeping its migrations) for the next one. */
export async function releaseSchema(database: { url: string | null; schema: string }): Promise<void> {
  const { url, schema } = database;
  if (!url || !pooledSchemas.has(schema)) return;
  // A test that changed the schema's migrations (a health check's "newer version") spoils it.
  if (await emptySchema(url, schema, Object.keys(migrations))) emptiedSchemas.push(schema);
  else await dropSchemas(url, [schema]);
}

