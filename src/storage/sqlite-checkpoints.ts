/**
 * A SQLite database's WAL checkpoints, in a thread of their own while it is written to fast.
 *
 * In WAL mode a commit appends pages to the `-wal` file; a checkpoint copies them back into the
 * database file (and, at `synchronous=NORMAL` or `FULL`, fsyncs both). By default SQLite runs one
 * inside whichever commit takes the WAL past 1,000 pages: on our single connection, on the event
 * loop. Under load that was one commit in forty taking 5-10 ms instead of 0.2-1 ms (about a sixth
 * of the event loop's time with ten senders: docs/benchmarks.md), with every request waiting.
 *
 * While pages come fast (`START_PAGES_PER_SECOND`), a worker thread holds a second connection and
 * checkpoints when the WAL holds enough pages (`PASSIVE`: it never waits for, nor blocks, the
 * writer or readers). Both look at the WAL index (`-shm`, https://www.sqlite.org/walformat.html)
 * to know how many pages were written and wait: this thread once a second, the worker every few
 * milliseconds while commits come. A worker costs about 16 MB, so a quiet server has none: it
 * stops after `IDLE_STOP_MS` without a commit, and SQLite's own checkpoints, rare at that pace,
 * take over again.
 *
 * While the worker runs the main connection still checkpoints, later (`FALLBACK_FACTOR`): should
 * the worker fall behind or fail, the WAL stays bounded.
 */
import { closeSync, openSync, readSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import type SqliteDatabase from 'better-sqlite3';

/** SQLite's own default threshold (`wal_autocheckpoint`), in pages. */
const SQLITE_DEFAULT_AUTOCHECKPOINT = 1000;
/** While the worker runs, the main connection checkpoints only past this many times its threshold. */
const FALLBACK_FACTOR = 4;
/** Pages written in a second that start the worker: the WAL would reach 1,000 in ten seconds. */
const START_PAGES_PER_SECOND = 100;
/** How often this thread looks at the WAL index. */
const LOOK_MS = 1000;
/** The worker stops after this long without a commit. */
const IDLE_STOP_MS = 60_000;

export interface BackgroundCheckpointOptions {
  /** The module the main connection was opened with (resolved path), loaded by the worker too. */
  driver: string;
  /** The worker checkpoints once the WAL holds this many pages not yet copied back. */
  pages: number;
  /** Told when the worker fails or stops on its own (a sentence). */
  report: (message: string) => void;
  /** Tests: start the worker at once / how often to look / how long idle before it stops. */
  startNow?: boolean;
  lookMs?: number;
  idleStopMs?: number;
}

/** What the worker tells: ready, a checkpoint done, or a failure. */
type WorkerMessage = 'ready' | { checkpoint: { walPages: number; copied: number; busy: boolean } } | { error: string };

/**
 * Reads the WAL index header: the commit counter (iChange), the WAL's last valid page (mxFrame)
 * and how many pages are copied back (nBackfill). The worker reads the same fields its own way.
 */
export class WalIndexHeader {
  private readonly fd: number;
  private readonly words = new Uint32Array(34);

  constructor(databasePath: string) {
    this.fd = openSync(`${databasePath}-shm`, 'r');
  }

  read(): { change: number; lastPage: number; waiting: number } {
    readSync(this.fd, new Uint8Array(this.words.buffer), 0, 136, 0);
    return { change: this.words[2]!, lastPage: this.words[4]!, waiting: Math.max(0, this.words[4]! - this.words[24]!) };
  }

  close(): void {
    closeSync(this.fd);
  }
}

export class BackgroundCheckpoints {
  /** Checkpoints made by worker threads so far. */
  checkpoints = 0;
  /** Worker threads started so far. */
  starts = 0;
  private thread: CheckpointThread | undefined;
  private readonly header: WalIndexHeader;
  private readonly timer: NodeJS.Timeout;
  private last: { change: number; lastPage: number; waiting: number };
  private lastCommitAt = Date.now();
  private lastLookAt = Date.now();
  private closed = false;
  /** A worker failed: the environment cannot run one (the next would fail alike), so none is started again. */
  private gaveUp = false;

  constructor(
    private readonly sqlite: SqliteDatabase.Database,
    private readonly options: BackgroundCheckpointOptions,
  ) {
    this.header = new WalIndexHeader(sqlite.name);
    this.last = this.header.read();
    this.timer = setInterval(() => this.look(), options.lookMs ?? LOOK_MS);
    this.timer.unref();
    if (options.startNow) this.start();
  }

  /** Whether a worker runs now. */
  get running(): boolean {
    return this.thread !== undefined;
  }

  /** Resolves once the current worker (if any) looks at the WAL. */
  get ready(): Promise<void> {
    return this.thread?.ready ?? Promise.resolve();
  }

  /** Stops the worker, if one runs, and the looking; the main connection checkpoints itself again. */
  async stop(): Promise<void> {
    this.closed = true;
    clearInterval(this.timer);
    await this.stopThread();
    this.header.close();
  }

  private look(): void {
    let now: { change: number; lastPage: number; waiting: number };
    try {
      now = this.header.read();
    } catch {
      return;
    }
    const committed = now.change !== this.last.change;
    // The WAL starts over from its first page once everything is copied back.
    const written = now.lastPage >= this.last.lastPage ? now.lastPage - this.last.lastPage : now.lastPage;
    const at = Date.now();
    // Timers run late on a busy machine: the pace is over the time that really passed.
    const seconds = Math.max(at - this.lastLookAt, 1) / 1000;
    this.last = now;
    this.lastLookAt = at;
    if (committed) this.lastCommitAt = at;
    if (!this.thread && written / seconds >= START_PAGES_PER_SECOND) this.start();
    else if (this.thread && at - this.lastCommitAt >= (this.options.idleStopMs ?? IDLE_STOP_MS)) void this.stopThread();
  }

  private start(): void {
    if (this.closed || this.thread || this.gaveUp) return;
    this.starts += 1;
    const thread = new CheckpointThread(this.sqlite, this.options.driver, this.options.pages, {
      checkpointed: () => (this.checkpoints += 1),
      failed: (message) => this.options.report(`database: a background WAL checkpoint failed (${message}); retrying`),
      lost: (message) => {
        if (this.thread !== thread) return;
        this.thread = undefined;
        this.gaveUp = true;
        if (this.sqlite.open) this.sqlite.pragma(`wal_autocheckpoint = ${SQLITE_DEFAULT_AUTOCHECKPOINT}`);
        this.options.report(`database: the WAL checkpoint thread failed (${message}); checkpoints are made by commits again`);
      },
    });
    this.thread = thread;
    this.sqlite.pragma(`wal_autocheckpoint = ${this.options.pages * FALLBACK_FACTOR}`);
  }

  private async stopThread(): Promise<void> {
    const thread = this.thread;
    if (!thread) return;
    this.thread = undefined;
    if (this.sqlite.open) this.sqlite.pragma(`wal_autocheckpoint = ${SQLITE_DEFAULT_AUTOCHECKPOINT}`);
    await thread.stop();
  }
}

/** One worker thread's life: started with its connection, stopped (or lost) once. */
class CheckpointThread {
  readonly ready: Promise<void>;
  private readonly worker: Worker;
  private readonly exited: Promise<void>;
  private stopping = false;

  constructor(
    sqlite: SqliteDatabase.Database,
    driver: string,
    pages: number,
    events: { checkpointed(): void; failed(message: string): void; lost(message: string): void },
  ) {
    const synchronous = sqlite.pragma('synchronous', { simple: true }) === 2 ? 'FULL' : 'NORMAL';
    this.worker = new Worker(WORKER_SOURCE, {
      eval: true,
      workerData: { path: sqlite.name, driver, synchronous, pages },
      // A connection, a prepared statement and a timer: it needs next to nothing.
      resourceLimits: { maxOldGenerationSizeMb: 16, maxYoungGenerationSizeMb: 4 },
    });
    this.worker.unref();
    let ready = (): void => undefined;
    this.ready = new Promise((resolve) => (ready = resolve));
    let failure: string | undefined;
    this.worker.on('message', (message: WorkerMessage) => {
      if (message === 'ready') ready();
      else if ('error' in message) events.failed(message.error);
      else events.checkpointed();
    });
    this.worker.on('error', (error) => (failure = error.message));
    this.exited = new Promise((resolve) => {
      this.worker.on('exit', () => {
        ready();
        if (!this.stopping) events.lost(failure ?? 'it stopped');
        resolve();
      });
    });
  }

  /** Stops the worker, its connection closed first. */
  async stop(): Promise<void> {
    if (!this.stopping) {
      this.stopping = true;
      // Kept alive until it has closed its connection, even when nothing else keeps the process running.
      this.worker.ref();
      this.worker.postMessage('stop');
      // Between two looks at the WAL the worker answers at once; a checkpoint under way finishes first.
      const deadline = setTimeout(() => void this.worker.terminate(), 5_000);
      deadline.unref();
      await this.exited;
      clearTimeout(deadline);
    }
    await this.exited;
  }
}

/**
 * The worker's code, a CommonJS script of its own (`eval`; kept as text so that no bundler rewrites
 * its `require`s). It polls the WAL index every 5 ms while commits come, backing off to 1 s while
 * none do, and checkpoints when enough pages wait, or when the database has been quiet for a
 * while with some pages waiting (a quiet server's WAL is then all copied back).
 *
 * The WAL index header is in native byte order: iChange, a counter each commit moves, at byte 8;
 * mxFrame, the WAL's last valid page, at byte 16; nBackfill, how many are copied back, at byte 96.
 */
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const fs = require('node:fs');
const { path, driver, synchronous, pages } = workerData;
const MIN_DELAY_MS = 5;
const MAX_DELAY_MS = 1000;
const CHASE_TRIES = 8;
const Database = require(driver);
const db = new Database(path, { fileMustExist: true });
db.pragma('synchronous = ' + synchronous);
// This connection only checkpoints; it never writes, so its own threshold never applies.
db.pragma('wal_autocheckpoint = 0');
const checkpoint = db.prepare('PRAGMA wal_checkpoint(PASSIVE)');
const shm = fs.openSync(path + '-shm', 'r');
const header = new Uint32Array(34);
const headerBytes = new Uint8Array(header.buffer);
function readHeader() {
  fs.readSync(shm, headerBytes, 0, headerBytes.length, 0);
  return { change: header[2], waiting: Math.max(0, header[4] - header[24]) };
}
let lastChange = readHeader().change;
parentPort.postMessage('ready');
let delay = MIN_DELAY_MS;
let chase = 0;
let timer;
function look() {
  let again = false;
  try {
    const { change, waiting } = readHeader();
    const quiet = change === lastChange;
    lastChange = change;
    if (waiting >= pages || (chase > 0 && waiting > 0) || (quiet && waiting > 0 && delay >= MAX_DELAY_MS)) {
      const row = checkpoint.get();
      parentPort.postMessage({ checkpoint: { walPages: row.log, copied: row.checkpointed, busy: row.busy !== 0 } });
      // Commits made while it copied are still to copy. Until none are, the WAL cannot start over
      // from its beginning (the next commit does that once everything is copied back), and under
      // steady writes it would only grow: copy the rest at once, a few times at most.
      const rest = readHeader().waiting;
      chase = rest === 0 ? 0 : chase > 0 ? chase - 1 : CHASE_TRIES;
      again = chase > 0;
    }
    delay = quiet ? Math.min(delay * 2, MAX_DELAY_MS) : MIN_DELAY_MS;
  } catch (error) {
    parentPort.postMessage({ error: error instanceof Error ? error.message : String(error) });
    delay = MAX_DELAY_MS;
    chase = 0;
  }
  timer = again ? setImmediate(look) : setTimeout(look, delay);
}
timer = setTimeout(look, delay);
parentPort.on('message', (message) => {
  if (message !== 'stop') return;
  clearTimeout(timer);
  clearImmediate(timer);
  fs.closeSync(shm);
  db.close();
  parentPort.close();
});
`;
