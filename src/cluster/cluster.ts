/**
 * Several server processes on one PostgreSQL database, each serving every endpoint. What one
 * process does that the others must know travels through PostgreSQL itself:
 *
 * - **Stream order.** A transaction that takes stream positions first locks the one-row
 *   `stream_head` (`enter`), so such transactions run one at a time across all processes and
 *   positions commit in the order they are handed out: a reader never skips a late commit. It
 *   moves the head and sends what it changed (`StreamEffects`) with `pg_notify` in the same
 *   transaction (`leave`), so the notification exists exactly when the commit does, and PostgreSQL
 *   delivers notifications in commit order. A batch of messages skips the lock
 *   (`StreamCounter.unlocked`): it is built against the head this process has applied, and its
 *   one statement moves the head only from there, failing whole if another process moved it
 *   first (then it is built again and written the locked way).
 * - **Caught up before acting.** A process applies the others' changes (drops the room snapshots
 *   and user caches they name, wakes syncs) as the notifications arrive, and moves its readable
 *   position only then. A writer that finds the head past what it applied waits for those
 *   notifications before it checks anything against its caches (bounded: after
 *   CATCH_UP_TIMEOUT_MS it drops every cache instead).
 * - **Messages** that are not stream positions (typing, ephemeral EDUs for the federation sender,
 *   outbox nudges, token changes from the database's trigger) are plain notifications.
 * - **Leases.** Jobs that must run once (the federation and appservice senders, the bridge, the
 *   maintenance timers) each run where this process holds an advisory lock, on its coordinator
 *   connection. PostgreSQL frees the lock when that connection ends, kill -9 included, and another
 *   process takes the job over at its next try (LEASE_RETRY_MS).
 */
import { randomBytes } from 'node:crypto';
import type { FastifyBaseLogger } from 'fastify';
import { CoordinatorConnection, DatabaseInUseError, notificationChannel, type Storage, type Stores } from '../storage/index.js';
import type { RoomHead } from '../rooms/room-snapshot.js';
import type { SharedStream, StreamCounter, StreamEffects } from '../sync/stream.js';

/** How often a process tries for the leases it does not hold, and to reconnect. */
export const LEASE_RETRY_MS = 1_000;
/** How long a writer waits for the notifications of commits before its own before dropping every cache. */
const CATCH_UP_TIMEOUT_MS = 2_000;
/** How long a claim may take on the coordinator connection before the work goes ahead unclaimed. */
const CLAIM_TIMEOUT_MS = 5_000;
/** PostgreSQL refuses notification payloads of 8000 bytes or more. */
const MAX_PAYLOAD_BYTES = 7_900;

/** Another process's commit, as this one applies it. `everything`: the details did not fit, or were lost. */
export interface RemoteCommit {
  position: number;
  rooms: readonly string[];
  movedRooms: ReadonlyArray<{ roomId: string; head: RoomHead; latest: number }>;
  users: readonly string[];
  inboxes: readonly string[];
  roommatesOf: readonly string[];
  receipts: ReadonlyArray<readonly [string, string]>;
  redacted: readonly string[];
  everything: boolean;
}

/** What processes tell each other outside the stream. */
export type ClusterMessage =
  | { kind: 'typing'; roomId: string; userId: string; typing: boolean; timeoutMs: number }
  | { kind: 'edu'; destinations: string[]; edu: Record<string, unknown> }
  | { kind: 'appservice-ephemeral'; roomId: string; event: Record<string, unknown> }
  | { kind: 'outbox'; queue: 'federation' | 'appservices' }
  | { kind: 'users'; users: string[] }
  | { kind: 'pushers'; userId: string }
  | { kind: 'ratelimit'; limiter: SharedLimiterName; key: string; count: number };

/** The rate limits that hold across processes: logins and registrations (guessing is spread over them). */
export type SharedLimiterName = 'loginAddress' | 'loginAccount' | 'loginFailed' | 'registration';
export const SHARED_LIMITERS: readonly SharedLimiterName[] = ['loginAddress', 'loginAccount', 'loginFailed', 'registration'];

/** A job that runs in one process at a time. `stop` is called when the lease is lost or the process stops. */
export interface LeasedJob {
  start(): Promise<void> | void;
  stop(): Promise<void> | void;
}

interface Lease {
  job: LeasedJob;
  held: boolean;
  /** start/stop run one after another. */
  transition: Promise<void>;
  /** The job's first start here, which `lease` waits for (and whose failure it passes on). */
  firstStart?: Promise<void>;
}

interface Waiter {
  position: number;
  resolve(): void;
}

export class Cluster implements SharedStream {
  /** Names this process in its notifications, to tell its own from the others'. */
  readonly processId = randomBytes(6).toString('base64url');
  private readonly channel: string;
  private connection: CoordinatorConnection | undefined;
  /** Every position up to this one is applied here (its effects, if another process's). */
  private applied = 0;
  /** The head this process last moved, after its commit: nobody else wrote while it still is. */
  private ownHead = -1;
  private waiters: Waiter[] = [];
  private readonly commitListeners: Array<(commit: RemoteCommit) => void> = [];
  private readonly messageListeners: Array<(message: ClusterMessage) => void> = [];
  private readonly leases = new Map<string, Lease>();
  private retryTimer: NodeJS.Timeout | undefined;
  private closed = false;
  log: FastifyBaseLogger | undefined;

  constructor(
    private readonly storage: Storage,
    private readonly schema: string,
    private readonly stream: StreamCounter,
  ) {
    this.channel = notificationChannel(schema);
  }

  /** Joins the others: listens, holds the database against `migrate-to-postgres`, catches the head up. */
  async start(): Promise<void> {
    await this.connect();
    const head = await this.storage.cluster.reconcileStreamHead(this.stream.current);
    this.applied = head;
    this.stream.commit(head);
    this.stream.shared = this;
    this.retryTimer = setInterval(() => void this.retry(), LEASE_RETRY_MS);
    this.retryTimer.unref();
  }

  private async connect(): Promise<void> {
    const connection = await CoordinatorConnection.open(
      this.storage.db,
      this.schema,
      (payload) => this.receive(payload),
      (err) => this.lost(err),
    );
    if (!(await connection.tryHoldShared())) {
      await connection.close();
      throw new DatabaseInUseError(`bot-homeserver migrate-to-postgres is copying into this PostgreSQL database (schema "${this.schema}"): start the server when it has finished`);
    }
    this.connection = connection;
  }

  /** Called with every other process's commit, in commit order, before its position becomes readable here. */
  onRemoteCommit(listener: (commit: RemoteCommit) => void): void {
    this.commitListeners.push(listener);
  }

  private readonly webhookListeners: Array<() => void> = [];

  /** Called when the webhook table changed (any process, the CLI). */
  onWebhooksChanged(listener: () => void): void {
    this.webhookListeners.push(listener);
  }

  /** Called with every other process's message. */
  onMessage(listener: (message: ClusterMessage) => void): void {
    this.messageListeners.push(listener);
  }

  /** Tells the other processes; best effort (a lost message is one they recover from: typing, a nudge). */
  publish(message: ClusterMessage): void {
    const payload = JSON.stringify({ o: this.processId, m: message });
    if (Buffer.byteLength(payload) > MAX_PAYLOAD_BYTES) {
      if (message.kind === 'users') this.publish({ kind: 'users', users: [] });
      return;
    }
    this.storage.cluster.notify(this.channel, payload).catch((err: unknown) => this.log?.warn({ err }, 'telling the other processes failed'));
  }

  // ---- claims ----

  /**
   * Claims a piece of work that must not run in two processes at once (an inbound federation
   * transaction retried to another process while the first still works on it), named by its
   * parts. Returns its release, or undefined when another process holds it. Without a working
   * connection to the others (lost, being made again, or not answering within CLAIM_TIMEOUT_MS)
   * nothing can be claimed: the work goes ahead here, and so it may in another process too.
   */
  async claim(parts: readonly string[]): Promise<(() => void) | undefined> {
    const connection = this.connection;
    const goAhead = () => undefined;
    if (!connection) return goAhead;
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<'timeout'>((resolve) => {
      timer = setTimeout(() => resolve('timeout'), CLAIM_TIMEOUT_MS);
    });
    try {
      const held = await Promise.race([connection.tryClaim(this.schema, parts), timedOut]);
      if (held === 'timeout') {
        this.log?.warn('claiming work among the processes took too long: it goes ahead here');
        return goAhead;
      }
      if (!held) return undefined;
    } catch (err) {
      this.log?.warn({ err }, 'claiming work among the processes failed: it goes ahead here');
      return goAhead;
    } finally {
      clearTimeout(timer);
    }
    // Released on the connection that took it (if that one is gone, so is the claim), without
    // holding up the answer.
    return () => void connection.releaseClaim(this.schema, parts).catch(() => undefined);
  }

  // ---- the shared stream ----

  async enter(stores: Stores): Promise<number> {
    const head = await stores.cluster.lockStreamHead();
    if (head === this.ownHead) {
      if (head > this.applied) this.applied = head;
    } else if (head > this.applied) {
      await this.caughtUp(head);
    }
    return head;
  }

  async leave(stores: Stores, position: number, effects: StreamEffects): Promise<void> {
    const { channel, payload } = this.notification(position, effects);
    await stores.cluster.moveStreamHead(position, channel, payload);
  }

  afterCommit(position: number): void {
    this.ownHead = position;
    if (position > this.applied) this.applied = position;
  }

  get appliedHead(): number {
    return this.applied;
  }

  notification(position: number, effects: StreamEffects): { channel: string; payload: string } {
    return { channel: this.channel, payload: this.encode(position, effects) };
  }

  private encode(position: number, effects: StreamEffects): string {
    const full = JSON.stringify({
      o: this.processId,
      p: position,
      r: [...effects.rooms],
      mr: [...effects.movedRooms].map(([roomId, moved]) => [roomId, moved.head, moved.latest]),
      u: [...effects.users],
      ib: [...effects.inboxes],
      rm: [...effects.roommatesOf],
      rc: effects.receipts,
      rd: [...effects.redacted],
    });
    return Buffer.byteLength(full) <= MAX_PAYLOAD_BYTES ? full : JSON.stringify({ o: this.processId, p: position, all: true });
  }

  private caughtUp(position: number): Promise<void> {
    // Not listening (the connection is lost, or the process is closing): nothing will come.
    if (!this.connection) {
      this.dropEverything(position);
      return Promise.resolve();
    }
    return new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((waiter) => waiter !== entry);
        this.log?.warn({ position, applied: this.applied }, 'the notifications of other processes are late: every cache is dropped');
        this.dropEverything(position);
        resolve();
      }, CATCH_UP_TIMEOUT_MS);
      const entry: Waiter = {
        position,
        resolve: () => {
          clearTimeout(timer);
          resolve();
        },
      };
      this.waiters.push(entry);
    });
  }

  private receive(payload: string): void {
    let message: Record<string, unknown>;
    try {
      message = JSON.parse(payload) as Record<string, unknown>;
    } catch {
      return;
    }
    // From the database's triggers (migration 0024), whoever changed the table.
    if (message.tokens === true) {
      this.storage.forgetCachedTokens();
      return;
    }
    if (message.webhooks === true) {
      for (const listener of this.webhookListeners) listener();
      return;
    }
    if (message.o === this.processId) {
      if (typeof message.p === 'number') this.advance(message.p);
      return;
    }
    if (typeof message.p === 'number') {
      const list = (value: unknown): string[] => (Array.isArray(value) ? value.filter((item): item is string => typeof item === 'string') : []);
      const receipts = Array.isArray(message.rc) ? message.rc.filter((pair): pair is [string, string] => Array.isArray(pair) && typeof pair[0] === 'string' && typeof pair[1] === 'string') : [];
      this.applyCommit({ position: message.p, rooms: list(message.r), movedRooms: movedRoomsOf(message.mr), users: list(message.u), inboxes: list(message.ib), roommatesOf: list(message.rm), receipts, redacted: list(message.rd), everything: message.all === true });
      return;
    }
    if (typeof message.m === 'object' && message.m !== null) {
      for (const listener of this.messageListeners) listener(message.m as ClusterMessage);
    }
  }

  foreignCommits = 0;

  /** Whatever other processes did up to `position` is not known in detail: every cache goes. */
  private dropEverything(position: number): void {
    this.applyCommit({ position, rooms: [], movedRooms: [], users: [], inboxes: [], roommatesOf: [], receipts: [], redacted: [], everything: true });
  }

  private applyCommit(commit: RemoteCommit): void {
    this.foreignCommits++;
    for (const listener of this.commitListeners) {
      try {
        listener(commit);
      } catch (err) {
        this.log?.error({ err }, 'applying another process\'s commit failed');
      }
    }
    this.advance(commit.position);
  }

  private advance(position: number): void {
    if (position > this.applied) this.applied = position;
    this.stream.commit(position);
    if (this.waiters.length === 0) return;
    const ready = this.waiters.filter((waiter) => waiter.position <= this.applied);
    this.waiters = this.waiters.filter((waiter) => waiter.position > this.applied);
    for (const waiter of ready) waiter.resolve();
  }

  // ---- leases ----

  /**
   * Runs `job` while this process holds the lease `name`; tried at once and every LEASE_RETRY_MS.
   * Resolves after the first try, once the job has started if this process took the lease (and
   * rejects if that start failed, as a start without leases would).
   */
  async lease(name: string, job: LeasedJob): Promise<void> {
    this.leases.set(name, { job, held: false, transition: Promise.resolve() });
    await this.retry();
    await this.leases.get(name)?.firstStart;
  }

  /** Whether this process runs the job now. */
  holds(name: string): boolean {
    return this.leases.get(name)?.held === true;
  }

  private retrying: Promise<void> | undefined;
  private retryAgain = false;

  /** Tries for the leases not held; a call while a try runs makes it try once more, and waits for that. */
  private retry(): Promise<void> {
    if (this.closed) return Promise.resolve();
    if (this.retrying) {
      this.retryAgain = true;
      return this.retrying;
    }
    this.retrying = (async () => {
      try {
        do {
          this.retryAgain = false;
          await this.tryOnce();
        } while (this.retryAgain && !this.closed);
      } finally {
        this.retrying = undefined;
      }
    })();
    return this.retrying;
  }

  private async tryOnce(): Promise<void> {
    try {
      if (!this.connection) {
        await this.connect();
        this.log?.info('reconnected to the other processes');
        // What was said while this process was away is lost: start from the database again.
        this.dropEverything(await this.storage.cluster.reconcileStreamHead(0));
      }
      const wanted = [...this.leases].filter(([, lease]) => !lease.held).map(([name]) => name);
      for (const name of await this.connection!.tryLocks(wanted)) {
        const lease = this.leases.get(name)!;
        lease.held = true;
        this.log?.info({ lease: name, process: this.processId }, 'took the lease');
        const started = lease.transition.then(() => lease.job.start());
        lease.firstStart ??= started;
        lease.transition = started.catch((err: unknown) => this.log?.error({ err, lease: name }, 'starting a leased job failed'));
      }
    } catch (err) {
      this.log?.warn({ err }, 'reaching the other processes failed; trying again');
    }
  }

  private lost(err: Error): void {
    if (this.closed) return;
    this.log?.error({ err }, 'the connection to the other processes was lost: leased jobs stop until it is back');
    this.connection = undefined;
    this.releaseLeases();
  }

  private releaseLeases(): Promise<void> {
    const stopping: Array<Promise<void>> = [];
    for (const [name, lease] of this.leases) {
      if (!lease.held) continue;
      lease.held = false;
      lease.transition = lease.transition.then(() => lease.job.stop()).catch((err: unknown) => this.log?.error({ err, lease: name }, 'stopping a leased job failed'));
      stopping.push(lease.transition);
    }
    return Promise.all(stopping).then(() => undefined);
  }

  /**
   * Stops the leased jobs, then lets the others take them (the connection ends with its locks).
   * Writes of requests still being answered keep taking the stream lock; with nothing heard from
   * the others any more, they drop every cache before they check anything.
   */
  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.retryTimer);
    await this.releaseLeases();
    const connection = this.connection;
    this.connection = undefined;
    for (const waiter of this.waiters.splice(0)) {
      this.dropEverything(waiter.position);
      waiter.resolve();
    }
    await connection?.close();
  }
}

/** Rooms another process only added messages to, as its notification lists them. */
function movedRoomsOf(value: unknown): RemoteCommit['movedRooms'] {
  if (!Array.isArray(value)) return [];
  const moved: Array<{ roomId: string; head: RoomHead; latest: number }> = [];
  for (const entry of value as unknown[]) {
    if (!Array.isArray(entry) || typeof entry[0] !== 'string' || typeof entry[2] !== 'number') continue;
    const head = entry[1] as Partial<RoomHead> | null;
    if (!head || !Array.isArray(head.extremities) || typeof head.depth !== 'number' || typeof head.stateGroupDepth !== 'number') continue;
    moved.push({ roomId: entry[0], head: { extremities: head.extremities, depth: head.depth, stateGroup: head.stateGroup ?? undefined, stateGroupDepth: head.stateGroupDepth }, latest: entry[2] });
  }
  return moved;
}
