/**
 * Pushing events to application services (`PUT /_matrix/app/v1/transactions/{txnId}`). The events
 * an appservice is to receive are queued in the same database transaction that stores them
 * (`appservice_outbox`), so a restart loses nothing and a local send never waits for an
 * appservice; each appservice gets its transactions in order, one at a time, at most 100 events
 * each, retried with a growing delay while it is down. A transaction's id and events are fixed in
 * the outbox before it is first sent, and it goes again unchanged until the appservice answers,
 * also after a crash, so an appservice that took it once can tell (it de-duplicates by id); events
 * queued meanwhile go in later transactions.
 * Ephemeral events (typing, receipts) go to appservices with `receive_ephemeral`, in memory only:
 * a stale typing notice is worthless after a restart, so a transaction sent again after one
 * carries only its events.
 */
import type { FastifyBaseLogger } from 'fastify';
import type { Clock } from '../core/clock.js';
import { eventFromRow, toClientEvent } from '../rooms/events.js';
import type { WriteHook, WriteHookProbe } from '../rooms/event-writer.js';
import type { RoomCache } from '../rooms/room-cache.js';
import type { Storage } from '../storage/index.js';
import type { AppServiceClient } from './appservice-client.js';
import type { AppService, AppServiceRegistry } from './registry.js';

export const MAX_EVENTS_PER_TXN = 100;
const MAX_EPHEMERAL_PER_SERVICE = 500;

export interface AppServiceSenderOptions {
  minRetryMs: number;
  maxRetryMs: number;
}

/** A transaction as it was first sent: every retry sends exactly this. */
interface Transaction {
  txnId: string;
  /** Its outbox rows (none for one of typing notices and receipts alone). */
  rowIds: number[];
  eventIds: string[];
  ephemeral: Array<Record<string, unknown>>;
}

/** How soon after a failure a request from the appservice may bring the next try forward. */
const HEARD_FROM_RETRY_GAP_MS = 1_000;

interface ServiceState {
  sending: boolean;
  timer: NodeJS.Timeout | undefined;
  failures: number;
  /** When the last failure was, in monotonic ms (a request from the appservice retries at most once a second). */
  failedAt: number;
  /** When the waiting retry (`timer`) is due, in monotonic ms. */
  retryAt: number;
  /** Ephemeral events waiting for the next new transaction. */
  ephemeral: Array<Record<string, unknown>>;
  /** The transaction this process sent and the appservice has not answered yet. */
  inFlight: Transaction | undefined;
}

export class AppServiceSender {
  private readonly states = new Map<string, ServiceState>();
  /** The appservices with a URL: the others only use the client API. */
  private readonly targets: readonly AppService[];
  /** Appservices the write hook queued events for since the last commit. */
  private readonly due = new Set<AppService>();
  private stopped = true;
  private ephemeralCounter = 0;
  /** Set once the app has a logger. */
  log: FastifyBaseLogger | undefined;

  constructor(
    private readonly registry: AppServiceRegistry,
    private readonly storage: Storage,
    private readonly client: AppServiceClient,
    private readonly cache: RoomCache,
    private readonly clock: Clock,
    private readonly options: AppServiceSenderOptions,
  ) {
    this.targets = registry.all.filter((service) => service.url !== null);
  }

  /** The writer calls this inside each commit: appservices that want the events get them queued. */
  readonly enqueueHook: WriteHook = async (stores, events, room) => {
    const rows: Array<{ asId: string; eventId: string }> = [];
    for (const service of this.targets) {
      for (const event of events) {
        // Backfilled history came late: appservices, like sync, only get what is new (as in Synapse).
        if (event.outlier || event.rejected !== undefined || event.softFailed || event.backfilledAt !== undefined) continue;
        if (!this.registry.isInterestedInEvent(service, event, room)) continue;
        rows.push({ asId: service.id, eventId: event.eventId });
        this.due.add(service);
      }
    }
    if (rows.length > 0) await stores.appservices.enqueue(rows, this.clock.now());
  };

  /** Whether `enqueueHook` writes anything for these events (an appservice is interested). */
  readonly enqueueProbe: WriteHookProbe = (events, room) => {
    for (const service of this.targets) {
      for (const event of events) {
        if (event.outlier || event.rejected !== undefined || event.softFailed || event.backfilledAt !== undefined) continue;
        if (this.registry.isInterestedInEvent(service, event, room)) return true;
      }
    }
    return false;
  };

  /**
   * After each commit: wake the appservices the write hook queued something for. (A write that
   * failed after the hook wakes them for nothing: they find their queue as it was.)
   */
  readonly commitListener = (): void => {
    for (const service of this.due) this.kick(service);
    this.due.clear();
  };

  /** Where ephemeral events go while another process sends to the appservices. */
  elsewhere: ((roomId: string, event: Record<string, unknown>) => void) | undefined;

  /** Whether any appservice asked for typing notices and receipts. */
  get wantsEphemeral(): boolean {
    return this.targets.some((service) => service.receiveEphemeral);
  }

  /** A typing notice or receipt in a room: for appservices with `receive_ephemeral` that are interested in the room. */
  queueEphemeral(roomId: string, event: Record<string, unknown>): void {
    if (this.stopped) {
      this.elsewhere?.(roomId, event);
      return;
    }
    const room = this.cache.peek(roomId);
    if (!room) return;
    for (const service of this.targets) {
      if (!service.receiveEphemeral || !this.registry.isInterestedInRoom(service, room)) continue;
      const state = this.state(service);
      state.ephemeral.push({ ...event, room_id: roomId });
      if (state.ephemeral.length > MAX_EPHEMERAL_PER_SERVICE) state.ephemeral.shift();
      this.kick(service);
    }
  }

  async start(): Promise<void> {
    this.stopped = false;
    this.lookAgain();
  }

  /** Another process queued events: every appservice's queue is looked at (if this process sends). */
  lookAgain(): void {
    for (const service of this.targets) this.kick(service);
  }

  /**
   * The appservice made a request of its own, so it is up again: a transaction waiting out a
   * failure goes now, not when the wait ends (after a restart of the appservice the wait could be
   * a minute or more). Failures still count: one that fails again waits longer.
   */
  heardFrom(serviceId: string): void {
    const state = this.states.get(serviceId);
    if (this.stopped || !state || state.timer === undefined) return;
    const service = this.targets.find((target) => target.id === serviceId);
    if (!service) return;
    // An appservice busy with requests while its endpoint fails is not retried at their rate: at
    // most a second after the failure. Not dropped either: an appservice back that fast (a bridge
    // restarted at once) may make no other request before the whole wait runs out.
    const now = performance.now();
    const soonest = state.failedAt + HEARD_FROM_RETRY_GAP_MS;
    if (now >= soonest) {
      clearTimeout(state.timer);
      state.timer = undefined;
      this.kick(service);
    } else if (state.retryAt > soonest) {
      clearTimeout(state.timer);
      this.waitThenKick(service, state, soonest - now);
    }
  }

  /** Whether this process sends to the appservices now (with several processes, one does). */
  get running(): boolean {
    return !this.stopped;
  }

  /** Whether any appservice has an address to send to. */
  get hasTargets(): boolean {
    return this.targets.length > 0;
  }

  stop(): void {
    this.stopped = true;
    for (const state of this.states.values()) {
      clearTimeout(state.timer);
      // Whoever sends next finds it in the outbox (its ephemeral events are lost, as in a restart).
      state.inFlight = undefined;
    }
  }

  private state(service: AppService): ServiceState {
    let state = this.states.get(service.id);
    if (!state) {
      state = { sending: false, timer: undefined, failures: 0, failedAt: 0, retryAt: 0, ephemeral: [], inFlight: undefined };
      this.states.set(service.id, state);
    }
    return state;
  }

  private kick(service: AppService): void {
    if (this.stopped) return;
    const state = this.state(service);
    if (state.sending || state.timer !== undefined) return;
    state.sending = true;
    void this.drain(service, state)
      .catch((err: unknown) => {
        // A database error (or the server closing under it): try again later, unless stopped.
        if (this.stopped) return;
        this.log?.error({ appservice: service.id, err }, 'sending to an appservice failed');
        this.retryLater(service, state);
      })
      .finally(() => {
        state.sending = false;
      });
  }

  private retryLater(service: AppService, state: ServiceState): void {
    state.failures++;
    state.failedAt = performance.now();
    const delay = Math.min(this.options.maxRetryMs, this.options.minRetryMs * 2 ** Math.min(state.failures - 1, 20));
    this.waitThenKick(service, state, delay);
  }

  private waitThenKick(service: AppService, state: ServiceState, delay: number): void {
    state.retryAt = performance.now() + delay;
    state.timer = setTimeout(() => {
      state.timer = undefined;
      this.kick(service);
    }, delay);
    state.timer.unref();
  }

  /** Sends transactions until nothing is left or the appservice fails; then waits before trying again. */
  private async drain(service: AppService, state: ServiceState): Promise<void> {
    while (!this.stopped) {
      const txn = state.inFlight ?? (await this.nextTransaction(service, state));
      if (!txn) return;
      state.inFlight = txn;
      const body: Record<string, unknown> = { events: await this.eventsOf(txn.eventIds) };
      if (service.receiveEphemeral) {
        body.ephemeral = txn.ephemeral;
        // The name of MSC2409, which bridges built before it was stable still read.
        body['de.sorunome.msc2409.ephemeral'] = txn.ephemeral;
      }
      try {
        await this.client.pushTransaction(service, txn.txnId, body);
      } catch (err) {
        if (this.stopped) {
          state.inFlight = undefined;
          return;
        }
        this.log?.warn({ appservice: service.id, txnId: txn.txnId, failures: state.failures + 1, err: (err as Error).message }, 'appservice transaction failed; will retry');
        this.retryLater(service, state);
        return;
      }
      state.failures = 0;
      if (txn.rowIds.length > 0) await this.storage.appservices.completeTransaction(service.id, txn.rowIds);
      state.inFlight = undefined;
    }
  }

  /**
   * The transaction to send next: one found fixed in the outbox (sent before a restart, or by the
   * process that sent before this one) goes again as it was; else the oldest queued events with
   * the ephemeral events waiting, fixed in the outbox before they are sent.
   */
  private async nextTransaction(service: AppService, state: ServiceState): Promise<Transaction | undefined> {
    const next = await this.storage.appservices.nextTransaction(service.id, MAX_EVENTS_PER_TXN);
    const rowIds = next?.entries.map((entry) => entry.id) ?? [];
    const eventIds = next?.entries.map((entry) => entry.eventId) ?? [];
    // Its ephemeral events were in the memory of the process that sent it: it goes without them.
    if (next?.fixed) return { txnId: next.txnId, rowIds, eventIds, ephemeral: [] };
    if (next) await this.storage.appservices.fixTransaction(service.id, rowIds);
    const ephemeral = state.ephemeral.splice(0, MAX_EPHEMERAL_PER_SERVICE);
    if (!next && ephemeral.length === 0) return undefined;
    return { txnId: next ? next.txnId : `e${this.clock.now()}-${++this.ephemeralCounter}`, rowIds, eventIds, ephemeral };
  }

  private async eventsOf(eventIds: readonly string[]): Promise<Array<Record<string, unknown>>> {
    const rows = new Map((await this.storage.rooms.getEvents(eventIds)).map((row) => [row.event_id, row]));
    const now = this.clock.now();
    // In queue order; an event gone from the database (purged) is skipped.
    return eventIds.flatMap((id) => {
      const row = rows.get(id);
      return row ? [toClientEvent(eventFromRow(row), { now }) as unknown as Record<string, unknown>] : [];
    });
  }
}
