/**
 * Outbound federation: a queue per destination server, persisted (`federation_outbox`, written in
 * the same transaction as the events, so nothing a local user was told succeeded is lost by a
 * restart), sent in order as transactions of at most 50 PDUs and 100 EDUs, one transaction at a
 * time per destination. A destination that fails is retried with a growing delay; any request
 * from it (it is back) ends the wait at once.
 */
import { randomBytes } from 'node:crypto';
import type { FastifyBaseLogger } from 'fastify';
import type { Clock } from '../core/clock.js';
import { domainOf } from '../rooms/auth-rules.js';
import type { EventGraph } from '../rooms/event-graph.js';
import type { StoredEvent } from '../rooms/events.js';
import type { WriteHook, WriteHookProbe } from '../rooms/event-writer.js';
import { pduOf } from '../rooms/pdu.js';
import type { RoomCache } from '../rooms/room-cache.js';
import type { RoomSnapshot } from '../rooms/room-snapshot.js';
import type { OutboxRow, Storage } from '../storage/index.js';
import { FederationError, type FederationClient } from './http-client.js';

export const MAX_PDUS_PER_TXN = 50;
export const MAX_EDUS_PER_TXN = 100;

export interface SenderOptions {
  serverName: string;
  /** The first retry delay after a failure; it doubles up to maxRetryMs. */
  minRetryMs: number;
  maxRetryMs: number;
}

interface DestinationState {
  sending: boolean;
  timer: NodeJS.Timeout | undefined;
  retryAfter: number;
  failures: number;
  /** Typing notices: kept in memory only (a stale one is worthless after a restart). */
  ephemeral: Array<Record<string, unknown>>;
  /** Transactions in a row the destination answered with an error (it is up, but refuses them). */
  refusals: number;
}

/**
 * After this many refused transactions in a row, the head of the queue is sent one item at a
 * time: one event the destination cannot take (Synapse answers 500 to an event nested deeper
 * than its JSON encoder recurses) must not hold back everything after it.
 */
const REFUSALS_BEFORE_ISOLATING = 3;

export class FederationSender {
  private readonly destinations = new Map<string, DestinationState>();
  private txnCounter = 0;
  /** Transaction ids stay unique when another process (which took the sending over) counts from 0 too. */
  private readonly txnPrefix = randomBytes(4).toString('hex');
  private stopped = true;
  /**
   * Where queued work goes while this process does not send (another process holds the sending):
   * the sender there is told of the outbox rows, and handed the in-memory EDUs.
   */
  elsewhere: { queued(): void; ephemeral(destinations: string[], edu: Record<string, unknown>): void } | undefined;

  constructor(
    private readonly storage: Storage,
    private readonly client: FederationClient,
    private readonly graph: EventGraph,
    private readonly cache: RoomCache,
    private readonly clock: Clock,
    private readonly options: SenderOptions,
    /** Set by the app once its logger exists. */
    public log?: FastifyBaseLogger | undefined,
  ) {}

  /** The writer calls this inside each commit: the room's other servers get the new events. */
  readonly enqueueHook: WriteHook = async (stores, events, room, { fanOut }) => {
    if (!fanOut || room.legacy) return;
    const rows: Array<{ destination: string; kind: 'pdu'; payload: string }> = [];
    for (const event of events) {
      if (event.outlier || event.rejected !== undefined) continue;
      for (const destination of this.destinationsFor(room, event)) rows.push({ destination, kind: 'pdu', payload: event.eventId });
    }
    if (rows.length > 0) await stores.federation.enqueue(rows, this.clock.now());
  };

  /** Whether `enqueueHook` writes anything for these events (a room with other servers in it). */
  readonly enqueueProbe: WriteHookProbe = (events, room, { fanOut }) => {
    if (!fanOut || room.legacy) return false;
    return events.some((event) => !event.outlier && event.rejected === undefined && this.destinationsFor(room, event).size > 0);
  };

  /** After each commit: wake the queues that just got something. */
  readonly commitListener = (events: readonly StoredEvent[], room: RoomSnapshot): void => {
    if (room.legacy) return;
    const woken = new Set<string>();
    for (const event of events) for (const destination of this.destinationsFor(room, event)) woken.add(destination);
    for (const destination of woken) this.kick(destination);
  };

  /**
   * Where an event must go: every server with a joined member, and for a membership change of a
   * remote user, that user's server; never back to its own server or to us. An invite is the
   * exception: the invitee's server had it through `/invite`, and a copy pushed again arrives
   * before its prev events there, which Synapse rejects (with a warning) once the invitee joins.
   */
  private destinationsFor(room: RoomSnapshot, event: StoredEvent): Set<string> {
    const destinations = new Set(room.joinedServers());
    if (event.type === 'm.room.member' && event.stateKey !== undefined && event.content.membership !== 'invite') destinations.add(domainOf(event.stateKey));
    destinations.delete(this.options.serverName);
    if (domainOf(event.sender) !== this.options.serverName) destinations.delete(domainOf(event.sender));
    return destinations;
  }

  /** Persisted EDUs (receipts) for the destinations, sent with the next transactions. */
  async queueEdu(destinations: Iterable<string>, edu: Record<string, unknown>): Promise<void> {
    const rows = [...destinations].filter((d) => d !== this.options.serverName).map((destination) => ({ destination, kind: 'edu' as const, payload: JSON.stringify(edu) }));
    if (rows.length === 0) return;
    await this.storage.federation.enqueue(rows, this.clock.now());
    if (this.stopped) this.elsewhere?.queued();
    for (const row of rows) this.kick(row.destination);
  }

  /** Typing notices: memory only, sent with the next transaction. */
  sendEphemeral(destinations: Iterable<string>, edu: Record<string, unknown>): void {
    if (this.stopped && this.elsewhere) {
      this.elsewhere.ephemeral([...destinations].filter((destination) => destination !== this.options.serverName), edu);
      return;
    }
    for (const destination of destinations) {
      if (destination === this.options.serverName) continue;
      const state = this.state(destination);
      if (state.ephemeral.length < MAX_EDUS_PER_TXN) state.ephemeral.push(edu);
      this.kick(destination);
    }
  }

  /** Starts sending what is queued (after a restart, honouring each destination's backoff). */
  async start(): Promise<void> {
    this.stopped = false;
    await this.lookAgain();
  }

  /**
   * Looks for queued work this process was not told of (another process's writes queued it), and
   * sends it, honouring each destination's recorded backoff.
   */
  async lookAgain(): Promise<void> {
    if (this.stopped) return;
    for (const destination of await this.storage.federation.queuedDestinations()) {
      if (!this.destinations.has(destination)) {
        const row = await this.storage.federation.destination(destination);
        const state = this.state(destination);
        state.failures = row?.failures ?? 0;
        state.retryAfter = Number(row?.retry_after_ts ?? 0);
      }
      this.kick(destination);
    }
  }

  get running(): boolean {
    return !this.stopped;
  }

  stop(): void {
    this.stopped = true;
    for (const state of this.destinations.values()) clearTimeout(state.timer);
  }

  /** A request came from `destination`: it is up, so its queue goes now, whatever the backoff. */
  destinationIsUp(destination: string): void {
    const state = this.destinations.get(destination);
    if (!state || state.retryAfter === 0) return;
    state.retryAfter = 0;
    clearTimeout(state.timer);
    this.kick(destination);
  }

  /** What the queue of a destination holds and when it is next tried (troubleshooting, tests). */
  async status(destination: string): Promise<{ queued: number; failures: number; retryAfterTs: number }> {
    const state = this.destinations.get(destination);
    return { queued: await this.storage.federation.queueLength(destination), failures: state?.failures ?? 0, retryAfterTs: state?.retryAfter ?? 0 };
  }

  /**
   * A destination as Synapse's admin API shows it (retry_last_ts, retry_interval, failure_ts),
   * with what is queued for it and the last error.
   */
  async describe(destination: string): Promise<Record<string, unknown>> {
    const row = await this.storage.federation.destination(destination);
    const state = this.destinations.get(destination);
    const failures = state?.failures ?? row?.failures ?? 0;
    const retryAfter = state?.retryAfter ?? Number(row?.retry_after_ts ?? 0);
    const interval = failures > 0 ? Math.min(this.options.minRetryMs * 2 ** (failures - 1), this.options.maxRetryMs) : 0;
    return {
      destination,
      retry_last_ts: failures > 0 ? retryAfter - interval : 0,
      retry_interval: interval,
      failure_ts: failures > 0 ? retryAfter - interval : null,
      last_successful_stream_ordering: null,
      queued: await this.storage.federation.queueLength(destination),
      failures,
      next_retry_ts: failures > 0 ? retryAfter : null,
      last_success_ts: row?.last_success_ts === null || row?.last_success_ts === undefined ? null : Number(row.last_success_ts),
      last_error: row?.last_error ?? null,
    };
  }

  /** Every destination that failed once or has something queued, described. */
  async describeAll(): Promise<Array<Record<string, unknown>>> {
    const names = await this.storage.federation.destinations();
    return Promise.all(names.map((name) => this.describe(name)));
  }

  /** Forgets a destination's backoff and sends its queue now (Synapse's reset_connection). */
  async resetConnection(destination: string): Promise<void> {
    const state = this.state(destination);
    state.failures = 0;
    state.retryAfter = 0;
    clearTimeout(state.timer);
    state.timer = undefined;
    await this.storage.federation.setDestination({ destination, failures: 0, retry_after_ts: 0, last_success_ts: null, last_error: null });
    this.kick(destination);
  }

  private state(destination: string): DestinationState {
    let state = this.destinations.get(destination);
    if (!state) {
      state = { sending: false, timer: undefined, retryAfter: 0, failures: 0, ephemeral: [], refusals: 0 };
      this.destinations.set(destination, state);
    }
    return state;
  }

  private kick(destination: string): void {
    if (this.stopped) return;
    const state = this.state(destination);
    if (state.sending) return;
    const wait = state.retryAfter - this.clock.now();
    if (wait > 0) {
      if (!state.timer) {
        state.timer = setTimeout(() => {
          state.timer = undefined;
          this.kick(destination);
        }, Math.min(wait, 2_147_000_000));
        state.timer.unref();
      }
      return;
    }
    state.sending = true;
    void this.drain(destination, state)
      .catch((err: unknown) => this.log?.error({ err, destination }, 'federation: the queue of a destination failed'))
      .finally(() => {
        state.sending = false;
        // After a failure this arms the retry timer.
        if (state.retryAfter > this.clock.now()) this.kick(destination);
      });
  }

  /** Sends transactions until the queue is empty or a send fails. */
  private async drain(destination: string, state: DestinationState): Promise<void> {
    for (;;) {
      if (this.stopped) return;
      const rows = await this.storage.federation.nextBatch(destination, MAX_PDUS_PER_TXN, MAX_EDUS_PER_TXN);
      const ephemeral = state.ephemeral.splice(0);
      if (rows.length === 0 && ephemeral.length === 0) return;
      if (state.refusals >= REFUSALS_BEFORE_ISOLATING && rows.length > 0) {
        if (!(await this.isolate(destination, state, rows))) return;
        continue;
      }
      // A transaction sent before without an answer goes again as it was, under its id: the
      // in-memory EDUs wait for the next one.
      const again = rows[0]?.txn_id ?? undefined;
      if (again !== undefined) state.ephemeral.unshift(...ephemeral.splice(0));
      try {
        await this.sendTransaction(destination, rows, ephemeral, again);
      } catch (err) {
        // Refused is answered: the next transaction is made afresh (and may isolate the item).
        if (err instanceof FederationError && err.status !== undefined) {
          await this.storage.federation.assignTxn(rows.map((row) => row.id), null).catch(() => undefined);
        }
        // Typing notices are dropped rather than replayed late; the rest waits in the outbox.
        await this.failed(destination, state, err);
        return;
      }
      await this.storage.federation.dequeue(rows.map((row) => row.id));
      await this.succeeded(destination, state);
    }
  }

  /**
   * Sends the items of a refused batch one per transaction. Those the destination still refuses
   * are dropped (it can fetch events it misses with get_missing_events), but only when others
   * went through: a destination refusing everything is broken, not picky, and keeps its queue.
   */
  private async isolate(destination: string, state: DestinationState, rows: OutboxRow[]): Promise<boolean> {
    const refused: Array<{ row: OutboxRow; err: unknown }> = [];
    let delivered = 0;
    for (const row of rows) {
      try {
        // Alone, each in a transaction of its own (whatever the refused batch was sent as).
        await this.sendTransaction(destination, [row], [], undefined);
        await this.storage.federation.dequeue([row.id]);
        delivered += 1;
      } catch (err) {
        if (!(err instanceof FederationError) || err.status === undefined) {
          await this.failed(destination, state, err);
          return false;
        }
        refused.push({ row, err });
      }
    }
    if (delivered === 0 && refused.length > 0) {
      await this.failed(destination, state, refused[0]!.err);
      return false;
    }
    for (const { row, err } of refused) {
      this.log?.warn({ destination, kind: row.kind, item: row.kind === 'pdu' ? row.payload : undefined, err: (err as Error).message }, 'federation: the destination refuses this item on its own; dropped');
    }
    await this.storage.federation.dequeue(refused.map(({ row }) => row.id));
    await this.succeeded(destination, state);
    return true;
  }

  /**
   * Sends one transaction: under `txnId` when it is one sent before without an answer; else under
   * a new id, recorded on its rows first, so that if this process dies before the answer, whoever
   * sends next sends the same transaction again and the destination takes it once.
   */
  private async sendTransaction(destination: string, rows: readonly OutboxRow[], ephemeral: ReadonlyArray<Record<string, unknown>>, txnId: string | undefined): Promise<void> {
    const pduIds = rows.filter((row) => row.kind === 'pdu').map((row) => row.payload);
    const stored = await this.graph.events(pduIds);
    const pdus: unknown[] = [];
    for (const id of pduIds) {
      const event = stored.get(id);
      const room = event ? await this.cache.room(event.roomId) : undefined;
      const pdu = event && room ? pduOf(event, room.version) : undefined;
      if (pdu) pdus.push(pdu);
    }
    const edus = [...rows.filter((row) => row.kind === 'edu').map((row) => JSON.parse(row.payload) as unknown), ...ephemeral];
    if (txnId === undefined) {
      txnId = `${this.clock.now()}-${this.txnPrefix}${++this.txnCounter}`;
      if (rows.length > 0) await this.storage.federation.assignTxn(rows.map((row) => row.id), txnId);
    }
    await this.client.request(destination, {
      method: 'PUT',
      path: `/_matrix/federation/v1/send/${encodeURIComponent(txnId)}`,
      body: { origin: this.options.serverName, origin_server_ts: this.clock.now(), pdus, edus },
    });
  }

  private async failed(destination: string, state: DestinationState, err: unknown): Promise<void> {
    state.failures += 1;
    if (err instanceof FederationError && err.status !== undefined) state.refusals += 1;
    const delay = Math.min(this.options.minRetryMs * 2 ** (state.failures - 1), this.options.maxRetryMs);
    state.retryAfter = this.clock.now() + delay;
    this.log?.warn({ destination, err: (err as Error).message, retryInMs: delay }, 'federation: sending a transaction failed');
    await this.storage.federation
      .setDestination({ destination, failures: state.failures, retry_after_ts: state.retryAfter, last_success_ts: null, last_error: (err as Error).message.slice(0, 500) })
      .catch(() => undefined);
  }

  private async succeeded(destination: string, state: DestinationState): Promise<void> {
    state.refusals = 0;
    if (state.failures === 0) return;
    state.failures = 0;
    state.retryAfter = 0;
    await this.storage.federation
      .setDestination({ destination, failures: 0, retry_after_ts: 0, last_success_ts: this.clock.now(), last_error: null })
      .catch(() => undefined);
  }
}
