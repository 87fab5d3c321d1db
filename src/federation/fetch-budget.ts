/**
 * What one inbound request may make this server fetch from other servers. A transaction (or a
 * send_join) whose events lack their prev_events, auth events or state makes us ask the sender;
 * a hostile sender can make every answer name more missing events. The budget caps, per inbound
 * request, the requests we send, the events and the bytes we take in, and the time we spend; and
 * per origin, a leaky bucket caps the requests over time, so repeating the trick with new
 * transaction ids soon buys nothing. Once spent, the source refuses (`FetchRefused`) and the
 * events that needed more are refused, never stored half-checked.
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

  /** Takes one request from the budget, or throws FetchRefused when it is spent. */
  take(): FetchSlot {
    const left = this.deadline - this.clock.now();
    if (this.refused === undefined) {
      if (left <= 0) this.refused = 'its deadline passed';
      else if (this.requests >= this.limits.maxRequests) this.refused = `it made ${this.requests} requests`;
      else if (this.events >= this.limits.maxEvents) this.refused = `it took in ${this.events} events`;
      else if (this.bytes >= this.limits.maxBytes) this.refused = `it took in ${this.bytes} bytes`;
      else if (this.perOrigin && !this.perOrigin.check(this.origin).allowed) this.refused = `${this.origin} made us fetch too much lately`;
    }
    if (this.refused !== undefined) throw new FetchRefused(`no more fetches for this request: ${this.refused}`);
    this.requests++;
    return {
      timeoutMs: Math.max(1, Math.min(this.requestTimeoutMs, left)),
      maxResponseBytes: Math.max(1, Math.min(this.maxResponseBytes, this.limits.maxBytes - this.bytes)),
      maxEvents: Math.max(0, this.limits.maxEvents - this.events),
    };
  }

  /** What an answer cost (its events as used: at most the slot's `maxEvents`). */
  spent(bytes: number, events: number): void {
    this.bytes += bytes;
    this.events += Math.min(events, Math.max(0, this.limits.maxEvents - this.events));
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
