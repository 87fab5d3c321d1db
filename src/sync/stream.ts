/**
 * The one stream ordering. Every event, account-data change and receipt gets the next position;
 * a sync token names a position, and "what changed since" is "what has a larger position".
 *
 * Transactions that take positions run one after another (`write`), so positions commit in the
 * order they were handed out; `current` moves only after a commit, so a reader that reads up to
 * `current` never skips a position that commits later. (SQLite's single connection ordered them
 * by itself; PostgreSQL's pool runs transactions side by side, and one holding a lower position
 * could commit after one holding a higher: a sync moving to the higher skipped the lower for good.)
 * With several processes on one database the order is kept across them too: see `SharedStream`.
 */
import type { RoomHead } from '../rooms/room-snapshot.js';
import type { Storage, Stores } from '../storage/index.js';

/**
 * What a position-taking transaction changed, for the other processes on the same database: the
 * rooms whose snapshots they must drop or move, the users whose cached data (room lists, account
 * data, push rules, remote keys) they must drop, and whose inboxes and receipts moved. Filled by
 * the work; the other processes wake whom it concerns.
 */
export class StreamEffects {
  /** Rooms whose state (or what is kept of their events) changed: their snapshots are dropped. */
  readonly rooms = new Set<string>();
  /** Rooms that only got events changing no state (messages): their new head and newest position. */
  readonly movedRooms = new Map<string, { head: RoomHead; latest: number }>();
  readonly users = new Set<string>();
  /** Users whose device inboxes got messages. */
  readonly inboxes = new Set<string>();
  /** Users whose presence or devices changed: their roommates are woken. */
  readonly roommatesOf = new Set<string>();
  /** Events redacted: what is kept of them in memory (to serve other servers) goes. */
  readonly redacted = new Set<string>();
  /** Rooms where a user's receipt moved (the room's state did not change): `[roomId, userId]`. */
  readonly receipts: Array<[string, string]> = [];
}

/**
 * The stream shared by several processes (`cluster/`). `enter` runs first in every
 * position-taking transaction: it waits for the other processes' such transactions (a lock held
 * to the commit, so positions commit in order across all of them) and returns the newest
 * position committed, once this process has applied everything up to it (so its caches are
 * current before it checks anything). `leave` runs last: the head moves and the effects reach the
 * other processes with the commit.
 */
export interface SharedStream {
  enter(stores: Stores): Promise<number>;
  leave(stores: Stores, position: number, effects: StreamEffects): Promise<void>;
  /** The transaction that moved the head to `position` committed. */
  afterCommit(position: number): void;
  /** The newest position this process has applied every commit up to (its caches are current to it). */
  readonly appliedHead: number;
  /** What moving the head to `position` tells the other processes (`leave` sends the same). */
  notification(position: number, effects: StreamEffects): { channel: string; payload: string };
  /** How many commits of other processes this one has applied: moves whenever one has. */
  readonly foreignCommits: number;
}

export class StreamCounter {
  private allocated: number;
  private committed: number;
  /** Set when other processes share the stream (PostgreSQL). */
  shared: SharedStream | undefined;

  constructor(start: number) {
    this.allocated = start;
    this.committed = start;
  }

  /** The next position; call only inside the transaction that will write it. */
  next(): number {
    return ++this.allocated;
  }

  /** Everything at or below this position is committed and readable. */
  get current(): number {
    return this.committed;
  }

  /** Marks positions up to `position` committed. */
  commit(position: number): void {
    if (this.holdAt !== undefined && position > this.holdAt) {
      // An unlocked write is in flight: its events are in the room snapshots already, above the
      // head it expects; another process's commit must not make them readable (they may never
      // commit). Released when the write has settled (`unlocked`).
      if (position > this.held) this.held = position;
      position = this.holdAt;
    }
    if (position > this.committed) this.committed = position;
  }

  /** While an unlocked write is in flight: readable positions stop at the head it expects. */
  private holdAt: number | undefined;
  /** The newest position committed meanwhile (by another process), readable once the write settled. */
  private held = 0;

  private tail: Promise<unknown> = Promise.resolve();

  /**
   * Runs `work` in a transaction that takes positions, after every earlier such transaction has
   * settled (in this process, and with `shared`, in every process). Never call it from inside
   * such work: it would wait for itself. The caller marks the positions committed afterwards.
   */
  write<T>(storage: Storage, work: (stores: Stores, effects: StreamEffects) => Promise<T>): Promise<T> {
    const run = async (): Promise<T> => {
      const shared = this.shared;
      if (!shared) return storage.transaction((stores) => work(stores, new StreamEffects()));
      let moved = 0;
      const result = await storage.transaction(async (stores) => {
        const head = await shared.enter(stores);
        // Positions others committed are taken; so may be ours of a transaction that failed (a gap).
        if (head > this.allocated) this.allocated = head;
        const before = this.allocated;
        const effects = new StreamEffects();
        const outcome = await work(stores, effects);
        if (this.allocated > before) await shared.leave(stores, (moved = this.allocated), effects);
        return outcome;
      });
      if (moved > 0) shared.afterCommit(moved);
      return result;
    };
    const settled = this.tail.then(run, run);
    this.tail = settled.catch(() => undefined);
    return settled;
  }

  /**
   * On a shared stream: runs `work` in order with this process's other position-taking work, but
   * without taking the stream's lock first. `work` gets the head this process has applied every
   * commit up to, takes its positions above it, and writes them only if the head is still there
   * when it commits, moving it in the same statement or transaction; it returns the position it
   * moved the head to (0 if it wrote nothing), and throws when the head had moved (another
   * process committed meanwhile: its caller writes again, the locked way). With one process the
   * head never moves under it, and a batch of messages is one statement instead of three round
   * trips (the lock, the insert, the head's move with the commit). `work` must drop what it put
   * in memory before it throws: while it runs, other processes' commits are not made readable
   * here (`commit` holds them back), and they are as soon as it has settled.
   */
  unlocked(work: (expectedHead: number) => Promise<number>): Promise<number> {
    const shared = this.shared;
    if (!shared) throw new Error('StreamCounter.unlocked: the stream is not shared; use serialized');
    const run = async (): Promise<number> => {
      const expected = shared.appliedHead;
      if (expected > this.allocated) this.allocated = expected;
      this.holdAt = expected;
      let moved = 0;
      try {
        moved = await work(expected);
      } finally {
        const held = this.held;
        this.holdAt = undefined;
        this.held = 0;
        if (held > 0) this.commit(held);
      }
      if (moved > 0) shared.afterCommit(moved);
      return moved;
    };
    const settled = this.tail.then(run, run);
    this.tail = settled.catch(() => undefined);
    return settled;
  }

  /** The newest position taken (a write moves the head to it). */
  get taken(): number {
    return this.allocated;
  }

  /**
   * Runs `work`, which takes positions and opens its own transaction (or writes one statement,
   * atomic without one), in the same order as `write`'s work. Only for a stream of one process:
   * a shared stream's positions are taken under a lock held in the transaction (`write`).
   */
  serialized<T>(work: () => Promise<T>): Promise<T> {
    if (this.shared) throw new Error('StreamCounter.serialized: the stream is shared; use write');
    const settled = this.tail.then(work, work);
    this.tail = settled.catch(() => undefined);
    return settled;
  }
}

/**
 * A sync token: the stream position and the typing serial (typing lives only in memory, so it has
 * its own counter, which starts again at 0 after a restart).
 */
export interface SyncToken {
  stream: number;
  typing: number;
}

export function formatSyncToken(token: SyncToken): string {
  return `s${token.stream}_${token.typing}`;
}

/**
 * Reads a token; anything unreadable yields undefined, and the caller treats it as no token. Bots
 * keep tokens on disk across our restarts and their own: a token must never make sync fail, since
 * some clients retry a failed sync in a tight loop.
 */
export function parseSyncToken(value: string | undefined): SyncToken | undefined {
  if (value === undefined) return undefined;
  const match = /^s(\d{1,15})(?:_(\d{1,15}))?$/.exec(value);
  if (!match) return undefined;
  return { stream: Number(match[1]), typing: Number(match[2] ?? 0) };
}

/**
 * Runs `work` in a transaction with the next stream position and marks it committed afterwards.
 * For writes other than events (account data, receipts), which the event writer does not batch.
 * `beforeVisible` runs after the commit and before the position becomes readable, in the same
 * turn: in-memory markers a sync consults must move before any sync can read past the position.
 */
export async function writeAtNextPosition(
  storage: Storage,
  stream: StreamCounter,
  work: (stores: Stores, position: number, effects: StreamEffects) => Promise<void>,
  beforeVisible?: (position: number) => void,
): Promise<number> {
  let position = 0;
  await stream.write(storage, async (stores, effects) => {
    position = stream.next();
    await work(stores, position, effects);
  });
  beforeVisible?.(position);
  stream.commit(position);
  return position;
}
