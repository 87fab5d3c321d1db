/**
 * Opens the database and applies migrations. SQLite (better-sqlite3) is the embedded default;
 * PostgreSQL (`database.url`) is opened by `postgres.ts`. Everything above this folder speaks
 * Kysely, so the stores serve both.
 */
import { mkdirSync, readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { createRequire } from 'node:module';
import type SqliteDatabase from 'better-sqlite3';
import { BackgroundCheckpoints } from './sqlite-checkpoints.js';
import { Kysely, Migrator, SqliteDialect, sql, type CompiledQuery, type Compilable, type LogEvent, type MigrationResult } from 'kysely';
import { migrations } from '../../migrations/index.js';
import { BoundedCache } from '../core/bounded-cache.js';
import type { Database } from './schema.js';
import { ensureSchema, openPostgres } from './postgres.js';
import { ADVISORY_LOCK_CLASS } from './cluster-store.js';

export type Db = Kysely<Database>;

/**
 * better-sqlite3 for the running Node. Releases before 13 wrap their objects in node::ObjectWrap,
 * whose destructor aborts the process on Node 24.19 and later when the garbage collector frees a
 * statement outside a JavaScript context ("Assertion failed: (env) != nullptr"): a crash at some
 * moment after any query. Release 13 fixed it, but crashes on Node 20. So Node 22 and later load
 * better-sqlite3 13; Node 20, out of maintenance, loads release 12, installed as the optional
 * dependency `better-sqlite3-node20`.
 */
const sqliteDriverName = Number(process.versions.node.split('.')[0]) >= 22 ? 'better-sqlite3' : 'better-sqlite3-node20';
export const SqliteDriver: typeof SqliteDatabase = loadSqliteDriver();

function loadSqliteDriver(): typeof SqliteDatabase {
  const require = createRequire(import.meta.url);
  try {
    return require(sqliteDriverName) as typeof SqliteDatabase;
  } catch (err) {
    if (sqliteDriverName === 'better-sqlite3') throw err;
    throw new Error(`Node ${process.versions.node} needs the optional dependency better-sqlite3-node20, which did not install (${(err as Error).message}); use Node 22 or 24`, { cause: err });
  }
}

export interface DatabaseOptions {
  /** SQLite file path, or `:memory:`; unused when `url` names a PostgreSQL database. */
  path: string;
  /** `postgres://...`: PostgreSQL instead of SQLite. */
  url?: string | null | undefined;
  /** PostgreSQL: connections this process may open (default 10). */
  pool_size?: number | undefined;
  /** PostgreSQL: a statement running longer is cancelled (ms; default 60 s). */
  statement_timeout?: number | undefined;
  /** PostgreSQL: repeated statements go as named prepared statements (default true). */
  prepared_statements?: boolean | undefined;
  /** PostgreSQL: the schema the tables live in (default `public`). */
  schema?: string | undefined;
  /** PostgreSQL: TLS, verified against the system's CAs or `ssl_ca_file`. */
  ssl?: boolean | undefined;
  ssl_ca_file?: string | null | undefined;
  /**
   * `full` (default): a commit is on disk before it is acknowledged, surviving power loss.
   * `normal`: survives a crash of this process but may lose the last commits on power loss.
   */
  synchronous: 'full' | 'normal';
  /** Time every query, for `observeQueries` (metrics); off, queries pay nothing for it. */
  measureQueries?: boolean | undefined;
}

/**
 * A migrated, empty in-memory database, taken from the first one a process migrates. Later
 * in-memory databases (a test homeserver per test file, `reset()`) start as a copy of it instead
 * of running every migration again.
 */
let migratedMemoryImage: Buffer | undefined;

export function openDatabase(options: DatabaseOptions): Db {
  if (options.url) {
    const schema = options.schema ?? 'public';
    const db = openPostgres({
      url: options.url,
      poolSize: options.pool_size ?? 10,
      statementTimeoutMs: options.statement_timeout ?? 60_000,
      preparedStatements: options.prepared_statements ?? true,
      schema,
      ssl: options.ssl_ca_file ? { ca: readFileSync(options.ssl_ca_file, 'utf8') } : options.ssl ? true : undefined,
      ...(options.measureQueries ? { log: (event: LogEvent) => queryObservers.get(db)?.(event.queryDurationMillis, event.level === 'error') } : {}),
    });
    postgresSchemas.set(db, schema);
    return db;
  }
  const inMemory = options.path === ':memory:';
  if (!inMemory) mkdirSync(dirname(resolve(options.path)), { recursive: true });
  const sqlite = inMemory && migratedMemoryImage ? new SqliteDriver(migratedMemoryImage) : new SqliteDriver(options.path);
  if (!inMemory) sqlite.pragma('journal_mode = WAL');
  sqlite.pragma(`synchronous = ${options.synchronous === 'normal' ? 'NORMAL' : 'FULL'}`);
  sqlite.pragma('foreign_keys = ON');
  // Another process (the CLI beside a running server) may hold the write lock briefly.
  sqlite.pragma('busy_timeout = 5000');
  const db: Db = new Kysely<Database>({
    dialect: new SqliteDialect({ database: withStatementCache(sqlite) }),
    // Query timings for metrics, only when asked for: Kysely then times every query.
    ...(options.measureQueries ? { log: (event: LogEvent) => queryObservers.get(db)?.(event.queryDurationMillis, event.level === 'error') } : {}),
  });
  const dataVersion = sqlite.prepare('PRAGMA data_version').pluck();
  dataVersions.set(db, () => dataVersion.get() as number);
  connections.set(db, sqlite);
  if (inMemory && migratedMemoryImage) copiesOfMigratedImage.add(db);
  return db;
}

/**
 * Pages the WAL may hold before the checkpoint thread copies them back: SQLite's own threshold.
 * Larger ones (4,000 was tried) made each copy slow enough that under steady writes the thread never
 * caught up, and the WAL grew to the main connection's threshold.
 */
const BACKGROUND_CHECKPOINT_PAGES = 1000;

/**
 * Moves the WAL checkpoints of a SQLite database file to a thread of their own while it is written
 * to fast (sqlite-checkpoints.ts); undefined for PostgreSQL and in-memory databases, which have
 * none. `report` is told when that thread fails. The options are for tests.
 */
export function checkpointInBackground(
  db: Db,
  report: (message: string) => void,
  options: { pages?: number; startNow?: boolean; lookMs?: number; idleStopMs?: number } = {},
): BackgroundCheckpoints | undefined {
  const sqlite = connections.get(db);
  if (!sqlite || sqlite.memory || sqlite.pragma('journal_mode', { simple: true }) !== 'wal') return undefined;
  const driver = createRequire(import.meta.url).resolve(sqliteDriverName);
  return new BackgroundCheckpoints(sqlite, { driver, report, ...options, pages: options.pages ?? BACKGROUND_CHECKPOINT_PAGES });
}

/**
 * Copies the database to `target` with SQLite's online backup: consistent, and safe while this or
 * another process (the running server) writes to it.
 */
export async function backupDatabase(db: Db, target: string): Promise<void> {
  if (postgresSchemas.has(db)) throw new Error('the database is PostgreSQL: back it up with pg_dump (docs/scaling.md)');
  const sqlite = connections.get(db);
  if (!sqlite) throw new Error('backupDatabase: not a database opened by openDatabase');
  await sqlite.backup(target);
}

const queryObservers = new WeakMap<Db, (ms: number, failed: boolean) => void>();

/** Calls `observer` with the duration of every query run on `db` (metrics). */
export function observeQueries(db: Db, observer: (ms: number, failed: boolean) => void): void {
  queryObservers.set(db, observer);
}

/**
 * What a health check needs to know of the database: that it answers, and that its migrations are
 * the ones this build knows (a newer version may have migrated it further).
 */
export async function databaseHealth(db: Db): Promise<{ reachable: boolean; missing: string[]; unknown: string[] }> {
  let applied: string[];
  try {
    applied = (await db.selectFrom('kysely_migration' as never).select('name' as never).execute()).map((row) => (row as { name: string }).name);
  } catch {
    return { reachable: false, missing: [], unknown: [] };
  }
  const known = Object.keys(migrations);
  return { reachable: true, missing: known.filter((name) => !applied.includes(name)), unknown: applied.filter((name) => !known.includes(name)) };
}

/** More distinct statements than the server has; `IN (...)` lists of varying length add a few. */
const STATEMENT_CACHE_SIZE = 2000;

/**
 * better-sqlite3 as Kysely sees it, with prepared statements reused by their SQL text. Kysely
 * prepares every query anew, and preparing costs more than running most of ours (profiled: a
 * sixth of a send-and-sync round went to `prepare`).
 */
function withStatementCache(sqlite: SqliteDatabase.Database): { close(): void; prepare(sql: string): SqliteDatabase.Statement } {
  const statements = new BoundedCache<string, SqliteDatabase.Statement>(STATEMENT_CACHE_SIZE);
  return {
    close: () => sqlite.close(),
    prepare(sql) {
      let statement = statements.get(sql);
      if (statement) return statement;
      statement = sqlite.prepare(sql);
      statements.set(sql, statement);
      return statement;
    },
  };
}

/**
 * A query whose shape never changes, built and compiled by Kysely once; later runs only swap in
 * their parameters. Building and compiling a Kysely query costs more than SQLite takes to run our
 * hot ones (profiled: about a fifth of a send's CPU), and the SQL text it yields is the same each
 * time anyway. Arguments must be plain values that Kysely passes through as parameters; the first
 * compile checks that each one arrived there.
 */
export class QueryTemplate<Args extends unknown[], Row> {
  /** Compiled once per dialect (placeholders differ: `?` for SQLite, `$1` for PostgreSQL). */
  private readonly compiled = new Map<unknown, { query: CompiledQuery<Row>; slots: Array<number | { value: unknown }> }>();

  constructor(private readonly build: (db: Kysely<Database>, ...args: Args) => Compilable<Row>) {}

  async all(db: Kysely<Database>, ...args: Args): Promise<Row[]> {
    const compiled = this.compiled.get(db.getExecutor().adapter.constructor) ?? this.compile(db, args.length);
    const parameters = compiled.slots.map((slot) => (typeof slot === 'number' ? args[slot] : slot.value));
    return (await db.executeQuery<Row>({ ...compiled.query, parameters })).rows;
  }

  async first(db: Kysely<Database>, ...args: Args): Promise<Row | undefined> {
    return (await this.all(db, ...args))[0];
  }

  private compile(db: Kysely<Database>, arity: number): { query: CompiledQuery<Row>; slots: Array<number | { value: unknown }> } {
    const sentinels = Array.from({ length: arity }, (_, index) => `\u0000query-template-argument-${index}\u0000`);
    const query = this.build(db, ...(sentinels as unknown as Args)).compile();
    const slots = query.parameters.map((parameter) => {
      const index = typeof parameter === 'string' ? sentinels.indexOf(parameter) : -1;
      return index >= 0 ? index : { value: parameter };
    });
    for (let index = 0; index < arity; index++) {
      if (!slots.includes(index)) throw new Error(`QueryTemplate: argument ${index} is not a parameter of ${query.sql}`);
    }
    const compiled = { query, slots };
    this.compiled.set(db.getExecutor().adapter.constructor, compiled);
    return compiled;
  }
}

const dataVersions = new WeakMap<Db, () => number>();
/** PostgreSQL databases opened here, with the schema their tables live in. */
const postgresSchemas = new WeakMap<Db, string>();

/** The PostgreSQL schema a database's tables live in; undefined for SQLite. */
export function postgresSchemaOf(db: Db): string | undefined {
  return postgresSchemas.get(db);
}
const connections = new WeakMap<Db, SqliteDatabase.Database>();
/** Databases opened as a copy of `migratedMemoryImage`: migrated already. */
const copiesOfMigratedImage = new WeakSet<Db>();

/**
 * A function returning SQLite's `data_version`, which changes when another connection (another
 * process) commits; caches use it to notice changes they did not make. Constant for databases
 * opened elsewhere.
 */
export function dataVersionReader(db: Db): () => number {
  return dataVersions.get(db) ?? (() => 0);
}

/**
 * Runs `work` with SQLite at `synchronous=NORMAL`, then makes everything it wrote durable with one
 * fsync before going back to `FULL`. The migrator commits a few dozen times (a lock, each
 * migration, its record); at FULL each commit waits for an fsync, which made migrating a new
 * database most of a first start (80 ms against 16 ms here). NORMAL keeps a WAL database
 * consistent, and a migration lost to a power cut before the final fsync is simply applied again.
 */
async function withoutFsyncPerCommit<T>(db: Db, work: () => Promise<T>): Promise<T> {
  const sqlite = connections.get(db);
  const full = sqlite !== undefined && !sqlite.memory && sqlite.pragma('synchronous', { simple: true }) === 2;
  if (!full) return work();
  sqlite.pragma('synchronous = NORMAL');
  try {
    return await work();
  } finally {
    sqlite.pragma('synchronous = FULL');
    // A commit at FULL fsyncs the whole WAL, and with it every commit made at NORMAL before it.
    // Writing user_version (unused by us, rewritten unchanged) is the smallest such commit.
    const version = sqlite.pragma('user_version', { simple: true }) as number;
    sqlite.pragma(`user_version = ${version}`);
  }
}

/** Another server process holds this PostgreSQL database (schema). */
export class DatabaseInUseError extends Error {
  override name = 'DatabaseInUseError';
}


/**
 * Makes sure no server process uses a PostgreSQL database (schema) until `release`
 * (`migrate-to-postgres` fills it): a session advisory lock, held on a connection of its own,
 * which PostgreSQL frees when the process dies however it dies. Servers hold the same lock shared
 * (`cluster/`), so neither starts while the other holds it. For SQLite it does nothing.
 */
export async function holdExclusiveUse(db: Db): Promise<() => Promise<void>> {
  if (!postgresSchemas.has(db)) return async () => undefined;
  let release: () => void = () => undefined;
  const released = new Promise<void>((resolve) => (release = resolve));
  let answer: (locked: boolean) => void = () => undefined;
  const locked = new Promise<boolean>((resolve) => (answer = resolve));
  const held = db.connection().execute(async (connection) => {
    const { rows } = await sql<{ locked: boolean }>`SELECT pg_try_advisory_lock(${ADVISORY_LOCK_CLASS}, hashtext(current_schema())) AS locked`.execute(connection);
    answer(rows[0]?.locked === true);
    if (rows[0]?.locked !== true) return;
    await released;
    await sql`SELECT pg_advisory_unlock(${ADVISORY_LOCK_CLASS}, hashtext(current_schema()))`.execute(connection);
  });
  const outcome = await Promise.race([locked, held.then(() => false)]);
  if (!outcome) {
    await held;
    throw new DatabaseInUseError(
      `bot-homeserver server processes are using this PostgreSQL database (schema "${postgresSchemas.get(db)}"): ` +
        'stop them first, or copy into another database.schema',
    );
  }
  return async () => {
    release();
    await held;
  };
}

export class MigrationError extends Error {
  override name = 'MigrationError';
}

/** The database was made for another `server_name` than the configuration gives. */
export class ServerNameMismatchError extends Error {
  override name = 'ServerNameMismatchError';
  constructor(
    readonly recorded: string,
    readonly configured: string,
  ) {
    super(
      `this database belongs to server_name "${recorded}", but the configuration says "${configured}". ` +
        'A Matrix server cannot be renamed (every user id, room id and signature carries its name): ' +
        `use the configuration this database was made with, or a new database for "${configured}".`,
    );
  }
}

/** The server name a database was made for, if it says (an empty or very old one may not). */
export async function recordedServerName(db: Db): Promise<string | undefined> {
  const row = await db.selectFrom('server_meta').select('value').where('key', '=', 'server_name').executeTakeFirst();
  return row?.value;
}

/**
 * Records `serverName` in a new database, and refuses a database made for another name. A database
 * from before the name was recorded is judged by its users' ids.
 */
export async function bindServerName(db: Db, serverName: string): Promise<void> {
  const row = await db.selectFrom('server_meta').select('value').where('key', '=', 'server_name').executeTakeFirst();
  let recorded = row?.value;
  if (recorded === undefined) {
    const someUser = await db.selectFrom('users').select('user_id').limit(1).executeTakeFirst();
    recorded = someUser ? someUser.user_id.slice(someUser.user_id.indexOf(':') + 1) : serverName;
    if (recorded === serverName) {
      await db.insertInto('server_meta').values({ key: 'server_name', value: serverName }).onConflict((c) => c.doNothing()).execute();
    }
  }
  if (recorded !== serverName) throw new ServerNameMismatchError(recorded, serverName);
}

/** Applies every pending migration; returns the names applied now. */
export async function migrateToLatest(db: Db): Promise<string[]> {
  // Kysely's migrator introspects every table before it finds nothing to do.
  if (copiesOfMigratedImage.has(db)) return [];
  const schema = postgresSchemas.get(db);
  if (schema !== undefined) await ensureSchema(db, schema);
  const sqlite = connections.get(db);
  // The first in-memory database that held nothing before migrating is the image for the next ones.
  const imageCandidate = sqlite?.memory === true && !migratedMemoryImage && sqlite.prepare('SELECT count(*) FROM sqlite_master').pluck().get() === 0 ? sqlite : undefined;
  const migrator = new Migrator({
    db,
    provider: { getMigrations: async () => migrations },
    // Named, or Kysely would take another schema's migration table (of another server on the
    // same PostgreSQL database) for this one's.
    ...(schema !== undefined ? { migrationTableSchema: schema } : {}),
  });
  const health = await databaseHealth(db);
  // Nothing to apply: spare the migrator its look at every table (of every schema, on PostgreSQL).
  if (health.reachable && health.missing.length === 0 && health.unknown.length === 0) return [];
  if (health.unknown.length > 0) {
    const known = Object.keys(migrations);
    throw new MigrationError(
      `this database was migrated by a newer version of bot-homeserver (${health.unknown.join(', ')}); ` +
        `this version knows migrations up to ${known[known.length - 1]}. Run the newer version, or restore the backup taken before the upgrade.`,
    );
  }
  const { error, results } = await withoutFsyncPerCommit(db, () => migrator.migrateToLatest());
  if (error) {
    const failed = results?.find((r: MigrationResult) => r.status === 'Error');
    throw new MigrationError(
      `migration ${failed?.migrationName ?? '(unknown)'} failed: ${(error as Error).message ?? String(error)}`,
    );
  }
  const applied = (results ?? []).filter((r) => r.status === 'Success').map((r) => r.migrationName);
  if (imageCandidate && !migratedMemoryImage && applied.length === Object.keys(migrations).length) {
    migratedMemoryImage = imageCandidate.serialize();
  }
  return applied;
}
