/**
 * A SQLite database's WAL checkpoints, in a thread of their own.
 *
 * In WAL mode a commit appends pages to the `-wal` file; a checkpoint copies them back into the
 * database file (and, at `synchronous=NORMAL` or `FULL`, fsyncs both). By default SQLite runs one
 * inside whichever commit takes the WAL past 1,000 pages: on our single connection, on the event
 * loop. Under load that was one commit in forty taking 5-10 ms instead of 0.2-1 ms (about a sixth
 * of the event loop's time with ten senders: docs/benchmarks.md), with every request waiting.
 *
 * Here a worker thread holds a second connection and checkpoints when the WAL holds enough pages
 * (`PASSIVE`: it never waits for, nor blocks, the writer or readers). It looks at the WAL index
 * (`-shm`, https://www.sqlite.org/walformat.html) to know how many pages wait, so an idle server
 * costs it one small read a second, and a busy one a read every few milliseconds.
 *
 * The main connection keeps checkpointing itself, later (`FALLBACK_FACTOR`): should the worker
 * fall behind or stop, the WAL still stays bounded; if the worker stops, SQLite's default comes back.
 */
import { Worker } from 'node:worker_threads';
import type SqliteDatabase from 'better-sqlite3';

/** SQLite's own default threshold (`wal_autocheckpoint`), in pages. */
const SQLITE_DEFAULT_AUTOCHECKPOINT = 1000;
/** While the worker runs, the main connection checkpoints only past this many times its threshold. */
const FALLBACK_FACTOR = 4;

export interface BackgroundCheckpointOptions {
  /** The module the main connection was opened with (resolved path), loaded by the worker too. */
  driver: string;
  /** The worker checkpoints once the WAL holds this many pages not yet copied back. */
  pages: number;
  /** Told when the worker fails or stops on its own (a sentence). */
  report: (message: string) => void;
}

/** What the worker tells: a checkpoint done, or a failure. */
type WorkerMessage = 'ready' | { checkpoint: { walPages: number; copied: number; busy: boolean } } | { error: string };

export class BackgroundCheckpoints {
  /** Checkpoints the worker has made. */
  checkpoints = 0;
  /** Resolves once the worker has its connection and looks at the WAL (or has stopped). */
  readonly ready: Promise<void>;
  private stopping = false;
  private readonly exited: Promise<void>;

  constructor(
    private readonly sqlite: SqliteDatabase.Database,
    private readonly options: BackgroundCheckpointOptions,
  ) {
    const synchronous = sqlite.pragma('synchronous', { simple: true }) === 2 ? 'FULL' : 'NORMAL';
    this.worker = new Worker(WORKER_SOURCE, {
      eval: true,
      workerData: { path: sqlite.name, driver: options.driver, synchronous, pages: options.pages },
      // A connection, a prepared statement and a timer: it needs next to nothing.
      resourceLimits: { maxOldGenerationSizeMb: 16, maxYoungGenerationSizeMb: 4 },
    });
    this.worker.unref();
    sqlite.pragma(`wal_autocheckpoint = ${options.pages * FALLBACK_FACTOR}`);
    let ready = (): void => undefined;
    this.ready = new Promise((resolve) => (ready = resolve));
    this.worker.on('message', (message: WorkerMessage) => {
      if (message === 'ready') {
        ready();
        return;
      }
      if ('error' in message) {
        options.report(`database: a background WAL checkpoint failed (${message.error}); retrying`);
        return;
      }
      this.checkpoints += 1;
    });
    this.worker.on('error', (error) => options.report(`database: the WAL checkpoint thread failed (${error.message}); checkpoints are made by commits again`));
    this.exited = new Promise((resolve) => {
      this.worker.on('exit', () => {
        ready();
        if (!this.stopping && sqlite.open) sqlite.pragma(`wal_autocheckpoint = ${SQLITE_DEFAULT_AUTOCHECKPOINT}`);
        resolve();
      });
    });
  }

  private readonly worker: Worker;

  /** Whether the worker still runs. */
  get running(): boolean {
    return this.worker.threadId !== -1;
  }

  /** Stops the worker (its connection closed first); the main connection checkpoints itself again. */
  async stop(): Promise<void> {
    if (!this.stopping) {
      this.stopping = true;
      if (this.sqlite.open) this.sqlite.pragma(`wal_autocheckpoint = ${SQLITE_DEFAULT_AUTOCHECKPOINT}`);
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
