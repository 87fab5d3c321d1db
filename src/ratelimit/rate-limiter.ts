/**
 * A leaky bucket per key, as Synapse's `Ratelimiter`: each action adds one to the bucket, the bucket
 * drains at `per_second`, and an action is refused when it would take the bucket past `burst_count`.
 * Buckets live in memory: a restart forgives everyone, which is what Synapse does too. With
 * several server processes, a limiter that must hold across them tells the others of each change
 * (`onChange`), and they apply it to their own buckets (`applyShared`).
 */
import type { Clock } from '../core/clock.js';
import type { RateLimitConfig } from '../config/index.js';
import { rateLimitedError } from '../core/errors.js';

export interface RateDecision {
  allowed: boolean;
  /** When refused: how long until the action would be allowed. */
  retryAfterMs: number;
}

interface Bucket {
  level: number;
  updatedMs: number;
  /** The drain rate this bucket was filled under (a per-user override may differ from the default). */
  rate: number;
}

/** Every this many recorded actions, buckets that have drained empty are dropped. */
const PRUNE_EVERY = 1024;
/**
 * Keys are chosen by clients (addresses, user names), so the number of buckets is capped; past
 * it, the buckets touched longest ago are forgotten (that forgives, it never punishes).
 */
const MAX_BUCKETS = 100_000;

export class RateLimiter {
  private readonly buckets = new Map<string, Bucket>();
  private recordsSincePrune = 0;

  constructor(
    private readonly limit: RateLimitConfig,
    private readonly clock: Clock,
    private readonly enabled = true,
    private readonly maxBuckets = MAX_BUCKETS,
  ) {}

  /**
   * Checks (and, when `record` is true and it is allowed, records) `count` actions for `key`.
   * `override` replaces the configured limit for this call (per-user overrides).
   */
  check(key: string, options: { record?: boolean; count?: number; override?: RateLimitConfig } = {}): RateDecision {
    if (!this.enabled) return { allowed: true, retryAfterMs: 0 };
    const { per_second: rate, burst_count: burst } = options.override ?? this.limit;
    const count = options.count ?? 1;
    const now = this.clock.now();
    const bucket = this.buckets.get(key);
    const level = bucket ? Math.max(0, bucket.level - ((now - bucket.updatedMs) / 1000) * rate) : 0;
    const allowed = level + count <= burst;
    if (allowed && options.record !== false) {
      this.store(key, { level: level + count, updatedMs: now, rate });
      this.onChange?.({ key, count });
    }
    const retryAfterMs = allowed ? 0 : rate > 0 ? Math.ceil(((level + count - burst) / rate) * 1000) : Infinity;
    return { allowed, retryAfterMs };
  }

  /** Like `check`, but refuses with 429 `M_LIMIT_EXCEEDED` (and `Retry-After`) when not allowed. */
  enforce(key: string, options: { record?: boolean; count?: number; override?: RateLimitConfig } = {}): void {
    const decision = this.check(key, options);
    if (!decision.allowed) throw rateLimitedError(decision.retryAfterMs);
  }

  /** Records `count` actions whether or not they fit (e.g. a failed login that already happened). */
  record(key: string, count = 1): void {
    if (!this.enabled) return;
    const { per_second: rate } = this.limit;
    const now = this.clock.now();
    const bucket = this.buckets.get(key);
    const level = bucket ? Math.max(0, bucket.level - ((now - bucket.updatedMs) / 1000) * rate) : 0;
    this.store(key, { level: level + count, updatedMs: now, rate });
    this.onChange?.({ key, count });
  }

  /** Forgets a key (failed-login counts after a successful login). */
  reset(key: string): void {
    this.buckets.delete(key);
    this.onChange?.({ key, count: 0 });
  }

  /** Told of every recorded action and reset (`count: 0`), for the other processes. */
  onChange: ((change: { key: string; count: number }) => void) | undefined;

  /** Another process recorded `count` actions for `key` (0: forgot it). */
  applyShared(change: { key: string; count: number }): void {
    if (!this.enabled) return;
    if (change.count === 0) {
      this.buckets.delete(change.key);
      return;
    }
    const rate = this.limit.per_second;
    const now = this.clock.now();
    const bucket = this.buckets.get(change.key);
    const level = bucket ? Math.max(0, bucket.level - ((now - bucket.updatedMs) / 1000) * bucket.rate) : 0;
    this.store(change.key, { level: level + change.count, updatedMs: now, rate: bucket?.rate ?? rate });
  }

  /** Number of buckets held (for tests and metrics). */
  get size(): number {
    return this.buckets.size;
  }

  /** Re-inserts, so the Map's order is least recently touched first. */
  private store(key: string, bucket: Bucket): void {
    this.buckets.delete(key);
    this.buckets.set(key, bucket);
    if (this.buckets.size > this.maxBuckets) this.buckets.delete(this.buckets.keys().next().value!);
    if (++this.recordsSincePrune >= PRUNE_EVERY) this.pruneDrained(bucket.updatedMs);
  }

  private pruneDrained(now: number): void {
    this.recordsSincePrune = 0;
    for (const [key, bucket] of this.buckets) {
      if (bucket.rate > 0 && bucket.level - ((now - bucket.updatedMs) / 1000) * bucket.rate <= 0) this.buckets.delete(key);
    }
  }
}
