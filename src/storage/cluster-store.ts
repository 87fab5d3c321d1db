/**
 * What several server processes on one PostgreSQL database share, in SQL: the stream head that
 * orders their positions, the notification channel they tell each other on, state group ids, and
 * a connection of each process's own for LISTEN and its advisory locks (leases). Nothing here is
 * used on SQLite, where one process owns the file.
 */
import { createHash } from 'node:crypto';
import { sql, type Kysely, type RawBuilder } from 'kysely';
import type pg from 'pg';
import type { Database } from './schema.js';
import { dedicatedConnection, sqlLiteral, WITH_COMMIT } from './postgres.js';

/** A move of the stream head, conditional on where it is (`headMoveParts`). */
export interface HeadMove {
  expected: number;
  position: number;
  channel: string;
  payload: string;
}

/**
 * The part of a one-statement write (`RoomStore.insertEventsMovingHead`) that moves the head
 * from `move.expected` to `move.position` and notifies, as common table expressions: when the
 * head is elsewhere, `guard` inserts a second head row, and the whole statement fails on the
 * key (a unique violation; so may the events' own keys first, which the other process's
 * positions took), and nothing of it is written. The main query reads `moved`, which PostgreSQL
 * runs as it is read, and the sub-statements nothing reads after the main query: the head's row
 * is locked before any other row is written, so a writer holding the lock is waited for. Should
 * that order ever change, a deadlock is retried the locked way too (`insertEventsMovingHead`).
 */
export function headMoveParts(move: HeadMove): { parts: RawBuilder<unknown>[]; notify: RawBuilder<unknown> } {
  return {
    parts: [
      sql`moved AS (UPDATE stream_head SET position = ${move.position}::bigint WHERE id = 1 AND position = ${move.expected}::bigint RETURNING 1)`,
      sql`guard AS (INSERT INTO stream_head (id, position) SELECT 1, ${move.expected}::bigint WHERE NOT EXISTS (SELECT 1 FROM moved))`,
    ],
    notify: sql`SELECT pg_notify(${move.channel}, ${move.payload}) FROM moved`,
  };
}

/** The channel a server's processes notify on: one per schema, as the token trigger names it (migration 0024). */
export function notificationChannel(schema: string): string {
  return `bhs_${createHash('md5').update(schema).digest('hex').slice(0, 16)}`;
}

/** State group ids come from the sequence this many at a time (its INCREMENT BY). */
export const STATE_GROUP_ID_BLOCK = 100;

/** The first key of our advisory locks: ours among whatever else locks in the same database. */
export const ADVISORY_LOCK_CLASS = 0x626f7400;

export class ClusterStore {
  constructor(private readonly db: Kysely<Database>) {}

  /**
   * Inside a transaction, first: waits until no other process's position-taking transaction is
   * open, and holds them off until this one ends. Returns the newest position committed by anyone.
   */
  async lockStreamHead(): Promise<number> {
    const { rows } = await sql<{ position: number }>`SELECT position FROM stream_head WHERE id = 1 FOR UPDATE`.execute(this.db);
    return Number(rows[0]?.position ?? 0);
  }

  /**
   * In the same transaction, last: the head moves to `position`, and `payload` reaches every
   * process when it commits. Sent with the commit, in one round trip (`WITH_COMMIT`), so its
   * values are written into the statement.
   */
  async moveStreamHead(position: number, channel: string, payload: string): Promise<void> {
    if (!Number.isSafeInteger(position)) throw new Error(`a stream position must be an integer, not ${position}`);
    const statement = `WITH moved AS (UPDATE stream_head SET position = ${position} WHERE id = 1 RETURNING 1) SELECT pg_notify(${sqlLiteral(channel)}, ${sqlLiteral(payload)}) FROM moved`;
    await sql.raw(WITH_COMMIT + statement).execute(this.db);
  }

  /** Tells every process, at once (or at the commit, inside a transaction). */
  async notify(channel: string, payload: string): Promise<void> {
    await sql`SELECT pg_notify(${channel}, ${payload})`.execute(this.db);
  }

  /** Ids `first` to `first + STATE_GROUP_ID_BLOCK - 1`, this process's alone. */
  async reserveStateGroupIds(): Promise<number> {
    const { rows } = await sql<{ first: number }>`SELECT nextval('state_group_ids') AS first`.execute(this.db);
    return Number(rows[0]!.first);
  }

  /**
   * At start: the head catches up with the positions the tables hold (a database copied from
   * SQLite, whose head nothing moved). Only ever moves it forward.
   */
  async reconcileStreamHead(position: number): Promise<number> {
    const { rows } = await sql<{ position: number }>`
      INSERT INTO stream_head (id, position) VALUES (1, ${position})
      ON CONFLICT (id) DO UPDATE SET position = GREATEST(stream_head.position, excluded.position)
      RETURNING position`.execute(this.db);
    return Number(rows[0]?.position ?? position);
  }

  /** After a copy: the next block of state group ids starts above every id copied. */
  async reconcileStateGroupIds(): Promise<void> {
    await sql`SELECT setval('state_group_ids', max(id)) FROM state_groups HAVING count(*) > 0`.execute(this.db);
  }
}

/** A claim's advisory lock key: a signed 64-bit integer, as text (beyond a JavaScript number's precision). */
function claimKey(schema: string, parts: readonly string[]): string {
  return createHash('sha256').update([schema, ...parts].join('\u0000')).digest().readBigInt64BE(0).toString();
}

/**
 * One process's own connection: it listens on the channel and holds the process's advisory locks,
 * which PostgreSQL releases when the connection ends, however the process ends (kill -9 too).
 */
export class CoordinatorConnection {
  private constructor(private readonly client: pg.Client) {}

  /** Connects and listens; `onLost` is called once if the connection ends other than by `close`. */
  static async open(db: Kysely<Database>, schema: string, onNotification: (payload: string) => void, onLost: (err: Error) => void): Promise<CoordinatorConnection> {
    const client = dedicatedConnection(db);
    if (!client) throw new Error('a coordinator connection needs PostgreSQL');
    let closed = false;
    let lost = false;
    const loseOnce = (err: Error) => {
      if (closed || lost) return;
      lost = true;
      onLost(err);
    };
    client.on('error', loseOnce);
    client.on('end', () => loseOnce(new Error('the connection ended')));
    client.on('notification', (message) => {
      if (message.payload !== undefined) onNotification(message.payload);
    });
    await client.connect();
    const connection = new CoordinatorConnection(client);
    connection.markClosed = () => (closed = true);
    await client.query(`LISTEN ${notificationChannel(schema)}`);
    return connection;
  }

  private markClosed: () => void = () => undefined;

  /** A shared hold on the database that an exclusive user (migrate-to-postgres) must wait out. */
  async tryHoldShared(): Promise<boolean> {
    const { rows } = await this.client.query<{ held: boolean }>('SELECT pg_try_advisory_lock_shared($1, hashtext(current_schema())) AS held', [ADVISORY_LOCK_CLASS]);
    return rows[0]?.held === true;
  }

  /** Takes each named lock nobody holds; returns those now held by this connection. */
  async tryLocks(names: readonly string[]): Promise<string[]> {
    if (names.length === 0) return [];
    const { rows } = await this.client.query<{ name: string; held: boolean }>(
      `SELECT name, pg_try_advisory_lock($1, hashtext(current_schema() || ':' || name)) AS held FROM unnest($2::text[]) AS name`,
      [ADVISORY_LOCK_CLASS + 1, names],
    );
    return rows.filter((row) => row.held).map((row) => row.name);
  }

  /**
   * A claim on one piece of work (an inbound federation transaction) among the processes: true
   * when this connection holds it now, false when another does. Released by `releaseClaim`, or
   * with the connection. The key is 64 bits of a SHA-256 of the schema and the work's parts (the
   * single-key lock space, apart from the leases' two-key one): what another server names its
   * transactions cannot be made to collide with another's claim.
   */
  async tryClaim(schema: string, parts: readonly string[]): Promise<boolean> {
    const { rows } = await this.client.query<{ held: boolean }>('SELECT pg_try_advisory_lock($1::bigint) AS held', [claimKey(schema, parts)]);
    return rows[0]?.held === true;
  }

  async releaseClaim(schema: string, parts: readonly string[]): Promise<void> {
    await this.client.query('SELECT pg_advisory_unlock($1::bigint)', [claimKey(schema, parts)]);
  }

  async unlock(name: string): Promise<void> {
    await this.client.query(`SELECT pg_advisory_unlock($1, hashtext(current_schema() || ':' || $2))`, [ADVISORY_LOCK_CLASS + 1, name]);
  }

  /** Ends the connection: its locks go with it. */
  async close(): Promise<void> {
    this.markClosed();
    await this.client.end().catch(() => undefined);
  }
}
