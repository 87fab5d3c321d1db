/**
 * What one inbound request may make this server fetch from other servers. A transaction (or a
 * send_join) whose events lack their prev_events, auth events or state makes us ask the sender;
 * a hostile sender can make every answer name more missing events. The budget caps, per inbound
 * request, the requests we send, the events and the bytes we take in, and the time we spend; and
 * per origin, a leaky bucket caps the requests over time, so repeating the trick with new
 * transaction ids soon buys nothing. Once spent, the source refuses (`FetchRefused`) and the
 * events that needed more are refused, never stored half-checked.
 *
 * Requests run side by side, so what a request may read is reserved when it starts (at most what
 * its kind of answer needs, and what is left unreserved) and the unused part given back when it
 * ends: requests in flight together can never read more than the budget. A request that finds
 * nothing left unreserved waits for one in flight to end.
 */
import type { Clock } from '../core/clock.js';
import { FetchRefused } from '../rooms/event-source.js';
import type { RateLimiter } from '../ratelimit/rate-limiter.js';

export interface FetchLimits {
  /** Requests to other servers for one inbound request. */
  maxRequests: number;
  /** Events taken in (before checking) for one inbound request. */
  maxEvents: number;
  /** Bytes of answers taken in for one inbound request. */
  maxBytes: number;
  /** Time from the inbound request's start after which nothing more is asked. */
  deadlineMs: number;
}

/** The kinds of answers, by what they may carry. */
export type FetchKind = 'event' | 'missing' | 'state_ids' | 'state' | 'auth_chain' | 'backfill' | 'keys';

/** The most one answer of a kind may need: bytes, and events (the rest of an answer is dropped unread). */
const SHARE: Record<FetchKind, { bytes: number; events: number }> = {
  // One PDU (64 KiB at most) in a transaction's wrapping.
  event: { bytes: 256 * 1024, events: 1 },
  // get_missing_events: 20 events at most.
  missing: { bytes: 2 * 1024 * 1024, events: 20 },
  // Ids only; counted as one event per hundred ids (each must be looked up here).
  state_ids: { bytes: 4 * 1024 * 1024, events: 1000 },
  // A whole state, or a whole auth chain: as much as is left.
  state: { bytes: Number.POSITIVE_INFINITY, events: Number.POSITIVE_INFINITY },
  auth_chain: { bytes: Number.POSITIVE_INFINITY, events: Number.POSITIVE_INFINITY },
  // /backfill: 100 events at most.
  backfill: { bytes: 8 * 1024 * 1024, events: 100 },
  // A server's key listing, asked of the server (64 KiB at most) or else of the notaries (256 KiB
  // each): what the signature checks of the events we are handed make us fetch.
  keys: { bytes: 320 * 1024, events: 0 },
};

/** What one request may take: its deadline and the most it may read. */
export interface FetchSlot {
  timeoutMs: number;
  maxResponseBytes: number;
  /** Events of the answer that may be used: the rest are dropped unread. */
  maxEvents: number;
}

export class FetchBudget {
  private requests = 0;
  private events = 0;
  private bytes = 0;
  private reservedBytes = 0;
  private reservedEvents = 0;
  private inFlight = 0;
  private readonly waiting = new Set<() => void>();
  private readonly deadline: number;
  private refused: string | undefined;

  constructor(
    private readonly limits: FetchLimits,
    private readonly clock: Clock,
    /** Who the fetches are on behalf of, for the per-origin bucket. */
    private readonly origin: string,
    private readonly perOrigin: RateLimiter | undefined,
    /** The longest one request may take anyway (federation.request_timeout), and the most it may read. */
    private readonly requestTimeoutMs: number,
    private readonly maxResponseBytes: number,
  ) {
    this.deadline = clock.now() + limits.deadlineMs;
  }

  /**
   * Takes one request from the budget, reserving what its answer may need; throws FetchRefused
   * when the budget is spent. Call `settle` with the slot when the request ends, whatever its end.
   */
  async take(kind: FetchKind): Promise<FetchSlot> {
    for (;;) {
      const left = this.deadline - this.clock.now();
      if (this.refused === undefined) {
        if (left <= 0) this.refused = 'its deadline passed';
        else if (this.requests >= this.limits.maxRequests) this.refused = `it made ${this.requests} requests`;
        else if (this.events >= this.limits.maxEvents) this.refused = `it took in ${this.events} events`;
        else if (this.bytes >= this.limits.maxBytes) this.refused = `it took in ${this.bytes} bytes`;
      }
      if (this.refused !== undefined) throw new FetchRefused(`no more fetches for this request: ${this.refused}`);
      const freeBytes = this.limits.maxBytes - this.bytes - this.reservedBytes;
      const freeEvents = this.limits.maxEvents - this.events - this.reservedEvents;
      if ((freeBytes > 0 && freeEvents > 0) || this.inFlight === 0) {
        if (this.perOrigin && !this.perOrigin.check(this.origin).allowed) {
          this.refused = `${this.origin} made us fetch too much lately`;
          continue;
        }
        const share = SHARE[kind];
        const slot = {
          timeoutMs: Math.max(1, Math.min(this.requestTimeoutMs, left)),
          maxResponseBytes: Math.max(1, Math.min(this.maxResponseBytes, share.bytes, freeBytes)),
          maxEvents: Math.max(0, Math.min(share.events, freeEvents)),
        };
        this.requests++;
        this.inFlight++;
        this.reservedBytes += slot.maxResponseBytes;
        this.reservedEvents += slot.maxEvents;
        return slot;
      }
      // Everything left is reserved by requests in flight: wait for one to end (or the deadline).
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, left);
        function done() {
          clearTimeout(timer);
          resolve();
        }
        this.waiting.add(() => done());
      });
    }
  }

  /** A request ended: what its answer cost (its events as used, at most the slot's), the rest given back. */
  settle(slot: FetchSlot, bytes: number, events: number): void {
    this.inFlight--;
    this.reservedBytes -= slot.maxResponseBytes;
    this.reservedEvents -= slot.maxEvents;
    this.bytes += Math.min(bytes, slot.maxResponseBytes);
    this.events += Math.min(events, slot.maxEvents);
    const waiting = [...this.waiting];
    this.waiting.clear();
    for (const wake of waiting) wake();
  }

  /** Whether nothing more will be fetched. */
  exhausted(): boolean {
    if (this.refused !== undefined) return true;
    return this.requests >= this.limits.maxRequests || this.events >= this.limits.maxEvents || this.bytes >= this.limits.maxBytes || this.clock.now() >= this.deadline;
  }

  /** What was spent, for logs and tests. */
  get usage(): { requests: number; events: number; bytes: number } {
    return { requests: this.requests, events: this.events, bytes: this.bytes };
  }
}

/** `work`, or a rejection once `ms` have passed (the work itself goes on, bounded by its own timeout). */
export function withDeadline<T>(work: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
  });
  return Promise.race([work, late]).finally(() => clearTimeout(timer));
}
