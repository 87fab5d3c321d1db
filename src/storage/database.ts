/**
 * Opens the database and applies migrations. SQLite (better-sqlite3) is the embedded default;
 * everything above this folder speaks Kysely, so another dialect is one more `open*` function here.
 */
import { mkdirSync } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import SqliteDatabase from 'better-sqlite3';
import {
  Kysely,
  Migrator,
  SqliteDialect,
  type CompiledQuery,
  type Compilable,
  type DatabaseConnection,
  type Driver,
  type KyselyPlugin,
  type MigrationResult,
  type QueryResult,
  type TransactionSettings,
} from 'kysely';
import { migrations } from '../../migrations/index.js';
import type { Database } from './schema.js';

export type Db = Kysely<Database>;

export interface DatabaseOptions {
  /** SQLite file path, or `:memory:`. */
  path: string;
  /**
   * `full` (default): a commit is on disk before it is acknowledged, surviving power loss.
   * `normal`: survives a crash of this process but may lose the last commits on power loss.
   */
  synchronous: 'full' | 'normal';
}

export function openDatabase(options: DatabaseOptions): Db {
  const inMemory = options.path === ':memory:';
  if (!inMemory) mkdirSync(dirname(resolve(options.path)), { recursive: true });
  const sqlite = new SqliteDatabase(options.path);
  if (!inMemory) sqlite.pragma('journal_mode = WAL');
  // `full` is kept without making every commit fsync on the event loop: SQLite commits without
  // syncing (NORMAL), and the WAL is fdatasync'ed from libuv's thread pool before the write is
  // acknowledged (see WalSync). NORMAL still syncs around checkpoints itself.
  const walSync = !inMemory && options.synchronous === 'full' ? new WalSync(`${resolve(options.path)}-wal`) : undefined;
  sqlite.pragma('synchronous = NORMAL');
  sqlite.pragma('foreign_keys = ON');
  // Another process (the CLI beside a running server) may hold the write lock briefly.
  sqlite.pragma('busy_timeout = 5000');
  const database = withStatementCache(sqlite);
  const syncing = walSync ? new WalSyncingSqliteDialect(database, sqlite, walSync) : undefined;
  const db = syncing
    ? new Kysely<Database>({ dialect: syncing, plugins: [syncing.plugin()] })
    : new Kysely<Database>({ dialect: new SqliteDialect({ database }) });
  const dataVersion = sqlite.prepare('PRAGMA data_version').pluck();
  dataVersions.set(db, () => dataVersion.get() as number);
  if (walSync) walSyncs.set(db, walSync);
  return db;
}

const walSyncs = new WeakMap<Db, WalSync>();

/** The WAL syncer of a database opened with `synchronous: full` (for tests and measurements). */
export function walSyncOf(db: Db): WalSync | undefined {
  return walSyncs.get(db);
}

/**
 * Makes committed writes durable without blocking the event loop: one fdatasync of the WAL file,
 * run on the thread pool, shared by every commit made before it started. A commit made while a
 * sync is running waits for the next one (the running one may have started before its frames
 * were written).
 */
export class WalSync {
  private handle: FileHandle | undefined;
  private running: Promise<void> | undefined;
  private next: Promise<void> | undefined;
  /** Completed syncs, for tests. */
  count = 0;

  constructor(private readonly walPath: string) {}

  sync(): Promise<void> {
    if (!this.running) {
      this.running = this.run().finally(() => {
        this.running = undefined;
      });
      return this.running;
    }
    this.next ??= this.running
      .catch(() => undefined)
      .then(() => {
        this.next = undefined;
        return this.sync();
      });
    return this.next;
  }

  async close(): Promise<void> {
    await this.running?.catch(() => undefined);
    await this.handle?.close();
    this.handle = undefined;
  }

  private async run(): Promise<void> {
    this.handle ??= await open(this.walPath, 'r');
    await this.handle.datasync();
    this.count++;
  }
}

/**
 * SQLite whose writes outside a transaction wait for the WAL sync before their caller hears of
 * them, without holding the one connection while they wait (that would make every other query
 * queue behind the fsync). The driver marks such results; a plugin, which Kysely runs after the
 * connection is released, waits. Transactions wait in `Storage.transaction`, after their COMMIT.
 */
class WalSyncingSqliteDialect extends SqliteDialect {
  private readonly committedWrites = new WeakSet<object>();

  constructor(
    database: ReturnType<typeof withStatementCache>,
    private readonly sqlite: SqliteDatabase.Database,
    private readonly walSync: WalSync,
  ) {
    super({ database });
  }

  override createDriver(): Driver {
    return new WalMarkingDriver(super.createDriver(), this.sqlite, this.committedWrites);
  }

  /** The plugin that waits for the sync of results the driver marked. */
  plugin(): KyselyPlugin {
    const { committedWrites, walSync } = this;
    return {
      transformQuery: (args) => args.node,
      async transformResult(args) {
        if (committedWrites.has(args.result)) await walSync.sync();
        return args.result;
      },
    };
  }
}

class WalMarkingDriver implements Driver {
  private wrapped: DatabaseConnection | undefined;

  constructor(
    private readonly inner: Driver,
    private readonly sqlite: SqliteDatabase.Database,
    private readonly committedWrites: WeakSet<object>,
  ) {}

  init(): Promise<void> {
    return this.inner.init();
  }

  async acquireConnection(): Promise<DatabaseConnection> {
    const connection = await this.inner.acquireConnection();
    if (!this.wrapped) {
      const { sqlite, committedWrites } = this;
      this.wrapped = {
        async executeQuery<R>(query: CompiledQuery): Promise<QueryResult<R>> {
          const result = await connection.executeQuery<R>(query);
          // Reads report no affected rows; a write inside a transaction waits for its COMMIT.
          if (result.numAffectedRows !== undefined && !sqlite.inTransaction) committedWrites.add(result);
          return result;
        },
        streamQuery: <R>(query: CompiledQuery, chunkSize?: number) => connection.streamQuery<R>(query, chunkSize),
      };
    }
    return this.wrapped;
  }

  beginTransaction(connection: DatabaseConnection, settings: TransactionSettings): Promise<void> {
    return this.inner.beginTransaction(connection, settings);
  }

  commitTransaction(connection: DatabaseConnection): Promise<void> {
    return this.inner.commitTransaction(connection);
  }

  rollbackTransaction(connection: DatabaseConnection): Promise<void> {
    return this.inner.rollbackTransaction(connection);
  }

  releaseConnection(connection: DatabaseConnection): Promise<void> {
    return this.inner.releaseConnection(connection);
  }

  destroy(): Promise<void> {
    return this.inner.destroy();
  }
}

/** More distinct statements than the server has; `IN (...)` lists of varying length add a few. */
const STATEMENT_CACHE_SIZE = 2000;

/**
 * better-sqlite3 as Kysely sees it, with prepared statements reused by their SQL text. Kysely
 * prepares every query anew, and preparing costs more than running most of ours (profiled: a
 * sixth of a send-and-sync round went to `prepare`).
 */
function withStatementCache(sqlite: SqliteDatabase.Database): { close(): void; prepare(sql: string): SqliteDatabase.Statement } {
  const statements = new Map<string, SqliteDatabase.Statement>();
  return {
    close: () => sqlite.close(),
    prepare(sql) {
      let statement = statements.get(sql);
      if (statement) return statement;
      statement = sqlite.prepare(sql);
      if (statements.size >= STATEMENT_CACHE_SIZE) statements.delete(statements.keys().next().value!);
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
  private compiled: { query: CompiledQuery<Row>; slots: Array<number | { value: unknown }> } | undefined;

  constructor(private readonly build: (db: Kysely<Database>, ...args: Args) => Compilable<Row>) {}

  async all(db: Kysely<Database>, ...args: Args): Promise<Row[]> {
    const compiled = this.compiled ?? this.compile(db, args.length);
    const parameters = compiled.slots.map((slot) => (typeof slot === 'number' ? args[slot] : slot.value));
    return (await db.executeQuery<Row>({ ...compiled.query, parameters })).rows;
  }

  async first(db: Kysely<Database>, ...args: Args): Promise<Row | undefined> {
    return (await this.all(db, ...args))[0];
  }

  private compile(db: Kysely<Database>, arity: number): NonNullable<QueryTemplate<Args, Row>['compiled']> {
    const sentinels = Array.from({ length: arity }, (_, index) => `\u0000query-template-argument-${index}\u0000`);
    const query = this.build(db, ...(sentinels as unknown as Args)).compile();
    const slots = query.parameters.map((parameter) => {
      const index = typeof parameter === 'string' ? sentinels.indexOf(parameter) : -1;
      return index >= 0 ? index : { value: parameter };
    });
    for (let index = 0; index < arity; index++) {
      if (!slots.includes(index)) throw new Error(`QueryTemplate: argument ${index} is not a parameter of ${query.sql}`);
    }
    this.compiled = { query, slots };
    return this.compiled;
  }
}

const dataVersions = new WeakMap<Db, () => number>();

/**
 * A function returning SQLite's `data_version`, which changes when another connection (another
 * process) commits; caches use it to notice changes they did not make. Constant for databases
 * opened elsewhere.
 */
export function dataVersionReader(db: Db): () => number {
  return dataVersions.get(db) ?? (() => 0);
}

export class MigrationError extends Error {
  override name = 'MigrationError';
}

/** Applies every pending migration; returns the names applied now. */
export async function migrateToLatest(db: Db): Promise<string[]> {
  const migrator = new Migrator({
    db,
    provider: { getMigrations: async () => migrations },
  });
  const { error, results } = await migrator.migrateToLatest();
  if (error) {
    const failed = results?.find((r: MigrationResult) => r.status === 'Error');
    throw new MigrationError(
      `migration ${failed?.migrationName ?? '(unknown)'} failed: ${(error as Error).message ?? String(error)}`,
    );
  }
  return (results ?? []).filter((r) => r.status === 'Success').map((r) => r.migrationName);
}
