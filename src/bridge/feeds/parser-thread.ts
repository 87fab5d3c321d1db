/**
 * Feeds are parsed in a worker thread, never on the thread that answers requests. Reading a 5 MiB
 * document (decoding, checking it is well-formed XML, building its tree, cleaning up items) takes
 * about half a second on a small machine; on the main thread, every request would wait that long.
 *
 * One worker, started on first use and stopped after a minute idle; documents are parsed one at a
 * time. Each has a deadline and the worker a heap cap: a document that takes longer, or needs
 * more, ends the worker (the next parse starts a fresh one) and fails with a FeedError, so no
 * document can hold the server or its memory however it is built.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { FeedError } from './error.js';
import type { ParsedFeed } from './parse.js';
import type { ParseReply, ParseRequest } from './parse-worker.js';

export interface FeedSource {
  url: string;
  contentType?: string | undefined;
}

/** Parses feed bytes; rejects with a FeedError. */
export type FeedParse = (body: Buffer, source: FeedSource) => Promise<ParsedFeed>;

export interface ParserThreadOptions {
  /** Longest one document may take to parse. */
  deadlineMs: number;
  /** Heap of the worker; a document that needs more fails. */
  maxHeapMb?: number;
  /** The worker stops after this long without work. */
  idleMs?: number;
}

interface Job {
  request: ParseRequest;
  resolve(feed: ParsedFeed): void;
  reject(error: FeedError): void;
}

const DEFAULT_MAX_HEAP_MB = 512;
const DEFAULT_IDLE_MS = 60_000;

export class FeedParserThread {
  private worker: Worker | undefined;
  private readonly queue: Job[] = [];
  private current: { job: Job; deadline: NodeJS.Timeout } | undefined;
  private idleTimer: NodeJS.Timeout | undefined;
  private nextId = 1;
  private closed = false;

  constructor(private readonly options: ParserThreadOptions) {}

  /** Bound to the instance, so it can be handed around as a FeedParse. */
  readonly parse: FeedParse = (body, source) => {
    if (this.closed) return Promise.reject(new FeedError('the server is shutting down'));
    // A copy the worker can own: the fetched Buffer may be a view into a larger shared pool.
    const bytes = new Uint8Array(body);
    return new Promise<ParsedFeed>((resolve, reject) => {
      this.queue.push({ request: { id: this.nextId++, body: bytes, url: source.url, contentType: source.contentType }, resolve, reject });
      this.dispatch();
    });
  };

  /** True while a document is being parsed (or waits for its turn). */
  get busy(): boolean {
    return this.current !== undefined || this.queue.length > 0;
  }

  /** Stops the worker; parses not yet done fail. */
  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.idleTimer);
    const refused = new FeedError('the server is shutting down');
    for (const job of this.queue.splice(0)) job.reject(refused);
    if (this.current) this.finish(this.current.job.request.id, refused);
    await this.stopWorker();
  }

  private dispatch(): void {
    if (this.current || this.closed) return;
    const job = this.queue.shift();
    if (!job) {
      this.armIdleTimer();
      return;
    }
    clearTimeout(this.idleTimer);
    let worker: Worker;
    try {
      worker = this.ensureWorker();
    } catch (error) {
      job.reject(error instanceof FeedError ? error : new FeedError(`the feed parser could not start (${String(error)})`));
      setImmediate(() => this.dispatch());
      return;
    }
    const seconds = this.options.deadlineMs / 1000;
    const deadline = setTimeout(() => {
      this.finish(job.request.id, new FeedError(`reading the feed took longer than ${seconds} s`));
      void this.stopWorker();
    }, this.options.deadlineMs);
    deadline.unref();
    this.current = { job, deadline };
    worker.postMessage(job.request, [job.request.body.buffer as ArrayBuffer]);
  }

  /** Settles the current job if it is `id`, then moves on to the next. */
  private finish(id: number, outcome: ParsedFeed | FeedError): void {
    const current = this.current;
    if (!current || current.job.request.id !== id) return;
    clearTimeout(current.deadline);
    this.current = undefined;
    if (outcome instanceof FeedError) current.job.reject(outcome);
    else current.job.resolve(outcome);
    setImmediate(() => this.dispatch());
  }

  private ensureWorker(): Worker {
    if (this.worker) return this.worker;
    const worker = startWorker(this.options.maxHeapMb ?? DEFAULT_MAX_HEAP_MB);
    worker.unref();
    worker.on('message', (reply: ParseReply) => {
      this.finish(reply.id, 'feed' in reply ? reply.feed : new FeedError(reply.error));
    });
    const lost = (why: string) => {
      if (this.worker !== worker) return;
      this.worker = undefined;
      if (this.current) this.finish(this.current.job.request.id, new FeedError(why));
    };
    worker.on('error', (error: NodeJS.ErrnoException) => {
      lost(error.code === 'ERR_WORKER_OUT_OF_MEMORY' ? 'the feed needs too much memory to read' : `the feed could not be read (${error.message})`);
    });
    worker.on('exit', () => lost('the feed could not be read (the parser stopped)'));
    this.worker = worker;
    return worker;
  }

  private armIdleTimer(): void {
    clearTimeout(this.idleTimer);
    if (!this.worker) return;
    this.idleTimer = setTimeout(() => void this.stopWorker(), this.options.idleMs ?? DEFAULT_IDLE_MS);
    this.idleTimer.unref();
  }

  private async stopWorker(): Promise<void> {
    const worker = this.worker;
    this.worker = undefined;
    if (worker) await worker.terminate();
  }
}

/**
 * The worker's code sits beside this module, in one of three forms: compiled (`dist/src`, the
 * library), bundled (`dist/bundle`, the CLI; the bundle script writes it next to main.mjs), or
 * TypeScript sources (the test suite), which Node runs through tsx.
 */
function startWorker(maxHeapMb: number): Worker {
  const options = { resourceLimits: { maxOldGenerationSizeMb: maxHeapMb } };
  const here = import.meta.url;
  for (const candidate of ['./parse-worker.js', './feed-parse-worker.mjs', '../feed-parse-worker.mjs']) {
    const url = new URL(candidate, here);
    if (existsSync(fileURLToPath(url))) return new Worker(url, options);
  }
  const source = new URL('./parse-worker.ts', here);
  if (!existsSync(fileURLToPath(source))) throw new FeedError('the feed parser is missing from this installation');
  const bootstrap = `import(${JSON.stringify(tsxEsmApi(here))}).then(({ tsImport }) => tsImport(${JSON.stringify(source.href)}, ${JSON.stringify(here)}))`;
  return new Worker(bootstrap, { ...options, eval: true });
}

/** The ES module entry of tsx's API (a dev dependency), from its package's exports map. */
function tsxEsmApi(from: string): string {
  const require = createRequire(from);
  const manifestPath = require.resolve('tsx/package.json');
  const manifest = require(manifestPath) as { exports: Record<string, { import: { default: string } }> };
  return new URL(manifest.exports['./esm/api']!.import.default, pathToFileURL(manifestPath)).href;
}
