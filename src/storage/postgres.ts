/**
 * PostgreSQL through `pg` and Kysely's PostgresDialect: the same migrations and stores as SQLite.
 * What differs between the two is kept here and in `dialect.ts`: column types in the schema,
 * how numbers come back, the schema (namespace) a server's tables live in, and timeouts.
 */
import pg from 'pg';
import {
  ColumnDefinitionNode,
  DataTypeNode,
  Kysely,
  OperationNodeTransformer,
  PostgresDialect,
  type KyselyPlugin,
  type PostgresPool,
  type PostgresPoolClient,
  type LogEvent,
  type PluginTransformQueryArgs,
  type PluginTransformResultArgs,
  type QueryResult,
  type RootOperationNode,
  type UnknownRow,
} from 'kysely';
import { MatrixError } from '../core/errors.js';
import type { Database } from './schema.js';

export interface PostgresOptions {
  /** `postgres://user:password@host:port/database`; `?sslmode=` as libpq reads it. */
  url: string;
  /** Connections this process may open. */
  poolSize: number;
  /** A statement running longer is cancelled (ms; 0: never). */
  statementTimeoutMs: number;
  /** The PostgreSQL schema the tables live in; made at the first migration. */
  schema: string;
  /** TLS to the server: `true` verifies it against the system's CAs, `{ ca }` against that CA (PEM). */
  ssl?: true | { ca: string } | undefined;
  /** Repeated statements with values go as named prepared statements (see `StatementNames`); default on. */
  preparedStatements?: boolean | undefined;
  log?: ((event: LogEvent) => void) | undefined;
}

/** A name PostgreSQL takes unquoted: the schema goes into a connection parameter as is. */
const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

const INT8 = 20;
const NUMERIC = 1700;

/**
 * 64-bit integers (positions, timestamps, counts) come back as numbers, as SQLite gives them: every
 * value we store is below 2^53. `pg` hands them out as strings by default, to be safe for others.
 */
const numberTypes = {
  getTypeParser(oid: number, format?: 'text' | 'binary') {
    if (oid === INT8 || oid === NUMERIC) return (value: string) => Number(value);
    return format === 'binary' ? pg.types.getTypeParser(oid, 'binary') : pg.types.getTypeParser(oid, 'text');
  },
} as unknown as pg.CustomTypesConfig;

export function openPostgres(options: PostgresOptions): Kysely<Database> {
  if (!SCHEMA_NAME.test(options.schema)) throw new Error(`database.schema "${options.schema}" must be a lower-case SQL name (letters, digits, _)`);
  // `pg` lets a URL's `options` replace ours: ours are added to them instead.
  const url = new URL(options.url);
  const urlOptions = url.searchParams.get('options');
  url.searchParams.delete('options');
  const connection: pg.ClientConfig = {
    connectionString: url.toString(),
    types: numberTypes,
    // Unqualified table names mean this server's schema; public stays reachable for extensions.
    options: `${urlOptions ? `${urlOptions} ` : ''}-c search_path=${options.schema},public -c statement_timeout=${options.statementTimeoutMs}`,
    ...(options.ssl === undefined ? {} : { ssl: options.ssl === true ? { rejectUnauthorized: true } : { ca: options.ssl.ca, rejectUnauthorized: true } }),
  };
  const pool = new pg.Pool({ ...connection, max: options.poolSize });
  // An idle connection that the server drops (a restart, a failover) must not crash the process;
  // the pool replaces it and the next query gets a fresh one.
  pool.on('error', () => undefined);
  const db = new Kysely<Database>({
    dialect: new PostgresDialect({ pool: refusingNul(pool, options.preparedStatements === false ? undefined : new StatementNames()) }),
    plugins: [new PostgresSchemaTypes()],
    ...(options.log ? { log: options.log } : {}),
  });
  dedicatedConnections.set(db, () => new pg.Client(connection));
  return db;
}

const dedicatedConnections = new WeakMap<Kysely<Database>, () => pg.Client>();

/**
 * A connection of its own, outside the pool, with the pool's settings: for what holds a
 * connection for the life of the process (LISTEN, session advisory locks). Undefined for SQLite.
 */
export function dedicatedConnection(db: Kysely<Database>): pg.Client | undefined {
  return dedicatedConnections.get(db)?.();
}

/**
 * PostgreSQL's text cannot hold U+0000 (SQLite's can). JSON keeps it escaped, but a state key, an
 * event type or a transaction id from a path is stored as it came: such a request is refused with
 * 400 rather than failing with a 500 in the driver.
 */
function refusingNul(pool: pg.Pool, names: StatementNames | undefined): PostgresPool {
  const check = (parameters: unknown): void => {
    if (!Array.isArray(parameters)) return;
    for (const value of parameters) {
      if (typeof value === 'string' && value.includes('\u0000')) throw new MatrixError('M_INVALID_PARAM', 'Text may not contain the character U+0000 (NUL)', { status: 400 });
    }
  };
  // The pool hands out the same clients again and again: each is wrapped once.
  const wrapped = new WeakSet<pg.PoolClient>();
  return {
    async connect() {
      const client = await pool.connect();
      if (!wrapped.has(client)) {
        const send = client.query.bind(client) as (...args: unknown[]) => Promise<unknown>;
        const query = names ? preparing(send, names) : send;
        const coalesced = coalescingTransaction(query);
        Object.assign(client, {
          query: (...args: unknown[]) => {
            check(args[1]);
            return coalesced(args);
          },
        });
        wrapped.add(client);
      }
      return client as unknown as PostgresPoolClient;
    },
    end: () => pool.end(),
  };
}

/**
 * PostgreSQL parses and plans a statement sent without a name every time it comes; a named
 * (prepared) one is parsed once per connection and its plan kept (for a send's INSERT of ten
 * events: 540 us of the server's CPU unnamed, 293 us named). `pg` prepares only a query that
 * names itself, and Kysely never names one: names are given here, one per text, for the life of
 * the pool. `pg` remembers which names each connection has parsed, so a new connection (one
 * that replaces a dropped one) parses again on first use.
 *
 * - Only a statement with values, single (no `;`), and at most `MAX_TEXT` long is named. Those
 *   without values are the transaction's own (`begin`, `commit`, the coalesced pairs), the
 *   stream lock, `LISTEN`/`NOTIFY`, DDL and migrations: they go as they are.
 * - A text is named the second time it is seen: the one-off statements of startup and migrations
 *   take no names, what the server does again and again does.
 * - At most `cap` names per pool (a process has one; a name means one text on its connections): a text seen once they are all given
 *   goes unnamed, as before. Nothing is evicted: a connection keeps its prepared statements for
 *   its life, and forgetting one would take a `DEALLOCATE` on every connection.
 * - A schema changed under a prepared statement by another process (an upgrade that adds a
 *   column while this one still runs `SELECT *`) makes PostgreSQL refuse it ("cached plan must
 *   not change result type"): the text loses its name for good, and the query is sent again
 *   unnamed, unless it was inside a transaction, which that error has aborted.
 */
export class StatementNames {
  /** Text to name; null: a name retired (its slot stays taken: a connection may still hold it). */
  private readonly names = new Map<string, string | null>();
  /** Texts seen once, cleared when full (texts with lists of values of any length are many). */
  private readonly seenOnce = new Set<string>();

  constructor(
    private readonly cap = 100,
    private readonly seenCap = 1000,
  ) {}

  /** The name to send `text` with, or undefined: unnamed. */
  nameFor(text: string): string | undefined {
    const name = this.names.get(text);
    if (name !== undefined) return name ?? undefined;
    if (this.names.size >= this.cap) return undefined;
    if (!this.seenOnce.delete(text)) {
      if (this.seenOnce.size >= this.seenCap) this.seenOnce.clear();
      this.seenOnce.add(text);
      return undefined;
    }
    const created = `bhs_${this.names.size + 1}`;
    this.names.set(text, created);
    return created;
  }

  /** `text` goes unnamed from now on. */
  retire(text: string): void {
    if (this.names.has(text)) this.names.set(text, null);
  }
}

/** Longer texts go unnamed: a statement that long is built from a list of values, rarely the same twice. */
const MAX_TEXT = 8 * 1024;


/** PostgreSQL's "cached plan must not change result type" (feature_not_supported). */
const CACHED_PLAN_CHANGED = '0A000';
/** "current transaction is aborted, commands ignored until end of transaction block". */
const IN_FAILED_TRANSACTION = '25P02';

function preparing(query: (...args: unknown[]) => Promise<unknown>, names: StatementNames): (...args: unknown[]) => Promise<unknown> {
  return async (...args) => {
    const [text, values] = args;
    const nameable = args.length === 2 && typeof text === 'string' && Array.isArray(values) && values.length > 0 && text.length <= MAX_TEXT && !text.includes(';');
    const name = nameable ? names.nameFor(text) : undefined;
    if (name === undefined) return query(...args);
    try {
      return await query({ name, text, values });
    } catch (err) {
      const error = err as { code?: string; message?: string };
      if (error.code !== CACHED_PLAN_CHANGED || !error.message?.includes('cached plan')) throw err;
      names.retire(text as string);
      // Outside a transaction nothing was done: sent again unnamed. Inside one, the error has
      // aborted it, and its caller hears of the first error, not of the abort.
      return query(text, values).catch((again: { code?: string }) => {
        throw again.code === IN_FAILED_TRANSACTION ? err : again;
      });
    }
  };
}

/**
 * A transaction's first and last round trips are shared with its neighbours, since on PostgreSQL
 * a round trip is what a write costs:
 *
 * - `begin` is held back and sent with the first statement when that statement has no
 *   parameters (the stream lock that opens every position-taking transaction is such a statement).
 *   Any other first statement gets its `begin` sent just before it; a transaction with no
 *   statement at all sends nothing.
 * - A statement marked `WITH_COMMIT` (parameterless, its result unread: the stream head's move and
 *   its notification; one with values goes at once) is held back and sent with the `commit`. Should another statement come
 *   first, it goes just before that one; a `rollback` drops it.
 *
 * Two statements in one simple query stop at the first failure: a held statement that fails
 * leaves the transaction open and aborted (its `commit` never ran), and the caller's `rollback`
 * (Kysely sends one when the commit fails) ends it. A held statement's error is reported by
 * whichever statement it went with: the commit, or the statement that came first.
 */
function coalescingTransaction(query: (...args: unknown[]) => Promise<unknown>): (args: unknown[]) => Promise<unknown> {
  let beginHeld = false;
  let inTransaction = false;
  let heldForCommit: string | undefined;
  const done = (command: string) => Promise.resolve({ command, rowCount: null, rows: [], fields: [] });
  // Two statements in one simple query: pg answers with both results; the caller wants the last.
  const both = (first: string, second: string) =>
    query(`${first}; ${second}`).then((results) => (Array.isArray(results) ? results[results.length - 1] : results));
  return (args) => {
    const [text, values] = args;
    if (text === 'begin') {
      beginHeld = true;
      inTransaction = true;
      heldForCommit = undefined;
      return done('BEGIN');
    }
    if (text === 'commit' || text === 'rollback') inTransaction = false;
    const noValues = !Array.isArray(values) || values.length === 0;
    if (typeof text === 'string' && text.startsWith(WITH_COMMIT) && noValues && inTransaction && !beginHeld) {
      // Two held at once cannot be: the earlier one goes now.
      const earlier = heldForCommit;
      heldForCommit = text;
      return earlier === undefined ? done('SELECT') : query(earlier);
    }
    if (text === 'rollback') {
      heldForCommit = undefined;
      if (beginHeld) {
        beginHeld = false;
        return done('ROLLBACK');
      }
      return query(...args);
    }
    if (beginHeld) {
      beginHeld = false;
      if (text === 'commit') return done('COMMIT');
      const parameterless = typeof text === 'string' && !text.includes(';') && noValues;
      if (!parameterless) return query('begin').then(() => query(...args));
      return both('BEGIN', text);
    }
    const held = heldForCommit;
    if (held === undefined) return query(...args);
    heldForCommit = undefined;
    if (text === 'commit') return both(held, 'COMMIT');
    return query(held).then(() => query(...args));
  };
}

/**
 * Marks a parameterless statement to be sent with the transaction's commit (see
 * `coalescingTransaction`): its values must be written into it, with `sqlLiteral`.
 */
export const WITH_COMMIT = '/* with commit */ ';

/** A string as a PostgreSQL literal, for the statements that cannot take parameters. */
export function sqlLiteral(value: string): string {
  return pg.escapeLiteral(value);
}

/** The schema a PostgreSQL database's tables live in, made if missing (before the first migration). */
export async function ensureSchema(db: Kysely<Database>, schema: string): Promise<void> {
  try {
    await db.schema.createSchema(schema).ifNotExists().execute();
  } catch (err) {
    // Two processes starting at once on a new database race here: "IF NOT EXISTS" does not
    // cover a schema being made at the same moment. The other one made it; that is all we want.
    if ((err as { code?: string }).code !== UNIQUE_VIOLATION) throw err;
  }
}

/** PostgreSQL's SQLSTATE for a duplicate key. */
export const UNIQUE_VIOLATION = '23505';

/**
 * The migrations name SQLite's types; PostgreSQL gets their 64-bit counterparts. SQLite's
 * `integer` holds 64 bits (timestamps in ms, positions), PostgreSQL's only 32; `real` is a double
 * in SQLite, a float in PostgreSQL; an autoincrementing key is an identity column there.
 */
class PostgresSchemaTypes implements KyselyPlugin {
  private readonly transformer = new (class extends OperationNodeTransformer {
    protected override transformDataType(node: DataTypeNode): DataTypeNode {
      const mapped = POSTGRES_TYPES[node.dataType];
      return mapped ? DataTypeNode.create(mapped) : node;
    }

    protected override transformColumnDefinition(node: ColumnDefinitionNode): ColumnDefinitionNode {
      const transformed = super.transformColumnDefinition(node);
      if (!transformed.autoIncrement) return transformed;
      return { ...transformed, autoIncrement: undefined, dataType: DataTypeNode.create('bigserial') } as ColumnDefinitionNode;
    }
  })();

  transformQuery(args: PluginTransformQueryArgs): RootOperationNode {
    const kind = args.node.kind;
    if (kind !== 'CreateTableNode' && kind !== 'AlterTableNode') return args.node;
    return this.transformer.transformNode(args.node);
  }

  transformResult(args: PluginTransformResultArgs): Promise<QueryResult<UnknownRow>> {
    return Promise.resolve(args.result);
  }
}

const POSTGRES_TYPES: Record<string, 'bigint' | 'double precision' | 'bytea'> = {
  integer: 'bigint',
  real: 'double precision',
  blob: 'bytea',
};
