/**
 * Access tokens by hash, kept in memory so authenticating a request costs no query. Any change to
 * the token tables made through this process empties it; changes made by another process (the
 * CLI rotating a bot's secret) are noticed through SQLite's `data_version`, which moves when
 * another connection commits. A lookup that raced with a change is not cached (the generation check).
 * Reading `data_version` costs a few microseconds on a WAL database (it looks at the shared WAL
 * index), so it is read at most once per millisecond: far less than any other process takes
 * between committing and a client hearing of it.
 */
import type { AccessTokensTable } from './schema.js';
import type { Selectable } from 'kysely';

type AccessTokenRow = Selectable<AccessTokensTable>;

const DATA_VERSION_RECHECK_MS = 1;

export class AccessTokenCache {
  private readonly entries = new Map<string, AccessTokenRow>();
  private currentGeneration = 0;
  private seenDataVersion: number;
  private dataVersionReadAt = performance.now();

  constructor(
    private readonly dataVersion: () => number,
    private readonly maxEntries = 50_000,
  ) {
    this.seenDataVersion = dataVersion();
  }

  get generation(): number {
    return this.currentGeneration;
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
    if (generation !== this.currentGeneration) return;
    if (this.entries.size >= this.maxEntries) {
      const oldest = this.entries.keys().next();
      if (!oldest.done) this.entries.delete(oldest.value);
    }
    this.entries.set(tokenHash, row);
  }

  invalidate(): void {
    this.currentGeneration++;
    this.entries.clear();
  }
}
