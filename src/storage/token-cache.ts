/**
 * Access tokens by hash, kept in memory so authenticating a request costs no query. Any change to
 * the token tables made through this process empties it; changes made by another process (the
 * CLI rotating a bot's secret) are noticed through SQLite's `data_version`, which moves when
 * another connection commits. A lookup that raced with a change is not cached (the generation check).
 * Reading `data_version` costs a few microseconds on a WAL database (it looks at the shared WAL
 * index), so it is read at most once per millisecond: far less than any other process takes
 * between committing and a client hearing of it.
 */
import type { Selectable } from 'kysely';
import { BoundedCache } from '../core/bounded-cache.js';
import type { AccessTokensTable } from './schema.js';

/** A token with its user's guest flag (see SessionStore.findAccessToken). */
export type AccessTokenRow = Selectable<AccessTokensTable> & { is_guest: number };

const DATA_VERSION_RECHECK_MS = 1;

export class AccessTokenCache {
  private readonly entries: BoundedCache<string, AccessTokenRow>;
  private seenDataVersion: number;
  private dataVersionReadAt = performance.now();

  constructor(
    private readonly dataVersion: () => number,
    maxEntries = 50_000,
  ) {
    this.entries = new BoundedCache(maxEntries);
    this.seenDataVersion = dataVersion();
  }

  get generation(): number {
    return this.entries.generation;
  }

  get(tokenHash: string): AccessTokenRow | undefined {
    const now = performance.now();
    if (now - this.dataVersionReadAt >= DATA_VERSION_RECHECK_MS) {
      this.dataVersionReadAt = now;
      const version = this.dataVersion();
      if (version !== this.seenDataVersion) {
        this.seenDataVersion = version;
        this.invalidate();
      }
    }
    return this.entries.get(tokenHash);
  }

  /** Caches a row read at `generation`, unless the tables changed since. */
  put(tokenHash: string, row: AccessTokenRow, generation: number): void {
    this.entries.setIfUnchanged(tokenHash, row, generation);
  }

  invalidate(): void {
    this.entries.invalidate();
  }
}
