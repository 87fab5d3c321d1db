/**
 * Full-text search rows that follow the commit, on SQLite. An FTS5 insert dirties several pages;
 * written with each send, its commit writes them for one message, where a batch of a few hundred
 * milliseconds' messages shares them. So a send's commit holds the event only, and this indexer
 * adds the search rows of everything committed since, in one transaction a batch, soon after.
 * The position indexed up to is stored with the rows it covers (`server_meta`), so a crash in
 * between loses nothing: at the next start, what was committed and not indexed is indexed. A
 * search first waits for the indexer to catch up, so it finds what was just sent.
 * PostgreSQL writes search rows in the events' own statement (no extra round trip): nothing to do.
 */
import type { FastifyBaseLogger } from 'fastify';
import type { Storage } from '../storage/index.js';
import type { StreamCounter } from '../sync/stream.js';

/** How long after a commit its search rows follow (the batch's window). */
const BATCH_MS = 100;
/** Events looked at per transaction. */
const BATCH_EVENTS = 1000;

export class SearchIndexer {
  private indexedUpTo: number | undefined;
  private running: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  log: FastifyBaseLogger | undefined;

  constructor(
    private readonly storage: Storage,
    private readonly stream: StreamCounter,
  ) {}

  /** Whether search rows follow the commit here (SQLite with search on). */
  get active(): boolean {
    return this.storage.rooms.searchEnabled && !this.storage.rooms.searchInline;
  }

  /** Indexes what a crash left unindexed, then follows commits. */
  async start(): Promise<void> {
    if (!this.active) return;
    let at = await this.storage.rooms.searchIndexedUpTo();
    if (at === undefined) {
      // A database from before: every event it holds was indexed as it was stored.
      at = this.stream.current;
      await this.storage.rooms.setSearchIndexedUpTo(at);
    }
    this.indexedUpTo = at;
    await this.catchUp();
  }

  /** After a commit: its search rows follow shortly, with those of whatever commits meanwhile. */
  committed(): void {
    if (this.indexedUpTo === undefined || this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.catchUp().catch((err: unknown) => this.log?.error({ err }, 'search: indexing failed; the next commit or search tries again'));
    }, BATCH_MS);
    this.timer.unref();
  }

  /** Indexes everything committed so far. */
  async catchUp(): Promise<void> {
    if (this.indexedUpTo === undefined) return;
    while (this.running) await this.running;
    if (this.indexedUpTo >= this.stream.current) return;
    this.running = this.indexUpTo(this.stream.current).finally(() => (this.running = undefined));
    await this.running;
  }

  /** Indexes what was committed, then stops following. */
  async close(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    await this.catchUp();
    this.indexedUpTo = undefined;
  }

  private async indexUpTo(upTo: number): Promise<void> {
    while (this.indexedUpTo! < upTo) this.indexedUpTo = await indexBatch(this.storage, this.indexedUpTo!, upTo);
  }
}

/** Indexes everything a SQLite database holds and has not indexed yet (before copying it elsewhere). */
export async function indexAllForSearch(storage: Storage, upTo: number): Promise<void> {
  if (storage.rooms.searchInline) return;
  let at = (await storage.rooms.searchIndexedUpTo()) ?? upTo;
  while (at < upTo) at = await indexBatch(storage, at, upTo);
}

/** Indexes one batch of what was committed after `from` (up to `upTo`) with its watermark: where it reached. */
async function indexBatch(storage: Storage, from: number, upTo: number): Promise<number> {
  return storage.transaction(async (stores) => {
    const reached = await stores.rooms.indexSearchAfter(from, upTo, BATCH_EVENTS);
    await stores.rooms.setSearchIndexedUpTo(reached);
    return reached;
  });
}
