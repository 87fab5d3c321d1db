/**
 * The one stream ordering. Every event, account-data change and receipt gets the next position;
 * a sync token names a position, and "what changed since" is "what has a larger position".
 *
 * Transactions that take positions run one after another (`inOrder`), so positions commit in the
 * order they were handed out; `current` moves only after a commit, so a reader that reads up to
 * `current` never skips a position that commits later. (SQLite's single connection ordered them
 * by itself; PostgreSQL's pool runs transactions side by side, and one holding a lower position
 * could commit after one holding a higher: a sync moving to the higher skipped the lower for good.)
 */
import type { Storage, Stores } from '../storage/index.js';

export class StreamCounter {
  private allocated: number;
  private committed: number;

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
    if (position > this.committed) this.committed = position;
  }

  private tail: Promise<unknown> = Promise.resolve();

  /**
   * Runs `work` (a transaction that takes positions, and its commit) after every earlier such
   * work has settled. Never call it from inside such work: it would wait for itself.
   */
  inOrder<T>(work: () => Promise<T>): Promise<T> {
    const run = this.tail.then(work, work);
    this.tail = run.catch(() => undefined);
    return run;
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
  work: (stores: Stores, position: number) => Promise<void>,
  beforeVisible?: (position: number) => void,
): Promise<number> {
  let position = 0;
  await stream.inOrder(() =>
    storage.transaction(async (stores) => {
      position = stream.next();
      await work(stores, position);
    }),
  );
  beforeVisible?.(position);
  stream.commit(position);
  return position;
}
