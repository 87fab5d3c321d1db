/** The server's rate limiters, built from the Synapse-named `rc_*` settings. */
import type { Clock } from '../core/clock.js';
import type { Config, RateLimitConfig } from '../config/index.js';
import type { RatelimitOverrideRow, Storage } from '../storage/index.js';
import { RateLimiter } from './rate-limiter.js';

/** Synapse's `override_ratelimit` fields. */
export interface MessageOverride {
  messages_per_second: number;
  burst_count: number;
}

export class Limiters {
  /** Every login attempt, per client address. */
  readonly loginAddress: RateLimiter;
  /** Successful logins, per account. */
  readonly loginAccount: RateLimiter;
  /** Failed logins, per account: what password guessing looks like. */
  readonly loginFailed: RateLimiter;
  /** Registration attempts, per client address. */
  readonly registration: RateLimiter;
  /** Messages sent, per user (subject to per-user overrides). */
  readonly message: RateLimiter;
  private readonly messageLimit: RateLimitConfig;

  constructor(
    config: Config,
    clock: Clock,
    private readonly storage: Storage,
    /** Users no message limit applies to (those of appservices registered with `rate_limited: false`). */
    private readonly exempt: (userId: string) => boolean = () => false,
  ) {
    const on = config.ratelimiting_enabled;
    this.loginAddress = new RateLimiter(config.rc_login.address, clock, on);
    this.loginAccount = new RateLimiter(config.rc_login.account, clock, on);
    this.loginFailed = new RateLimiter(config.rc_login.failed_attempts, clock, on);
    this.registration = new RateLimiter(config.rc_registration, clock, on);
    this.message = new RateLimiter(config.rc_message, clock, on);
    this.messageLimit = config.rc_message;
  }

  /** Per-user overrides, read once from storage; only the admin API changes them (see below). */
  private readonly overrides = new Map<string, RatelimitOverrideRow | null>();

  /**
   * Checks and records `count` messages by `userId` (a room creation counts the events it writes
   * beyond the room's own), honouring the admin API's per-user override: an override of 0
   * messages per second exempts the user, as in Synapse. A count above the whole burst is taken
   * as the burst, so such an action is possible, once the user has been quiet long enough.
   */
  async checkMessage(userId: string, count = 1): Promise<void> {
    if (this.exempt(userId)) return;
    let override = this.overrides.get(userId);
    if (override === undefined) {
      override = (await this.storage.ratelimits.get(userId)) ?? null;
      this.overrides.set(userId, override);
    }
    if (override && override.messages_per_second === 0) return;
    const limit: RateLimitConfig | undefined = override
      ? { per_second: override.messages_per_second, burst_count: override.burst_count }
      : undefined;
    const burst = (limit ?? this.messageLimit).burst_count;
    this.message.enforce(userId, { override: limit, count: Math.max(1, Math.min(count, burst)) });
  }

  /** The admin API's per-user override of rc_message, if any. */
  async messageOverride(userId: string): Promise<MessageOverride | undefined> {
    const row = await this.storage.ratelimits.get(userId);
    return row ? { messages_per_second: row.messages_per_second, burst_count: row.burst_count } : undefined;
  }

  /** Sets (or, with null, removes) a user's override; 0 messages per second exempts the user. */
  /** Every override is read again (another process's changes were not all heard of). */
  forgetOverrides(): void {
    this.overrides.clear();
  }

  /** Another process may have changed the user's override: it is read again when next needed. */
  forgetOverride(userId: string): void {
    this.overrides.delete(userId);
  }

  async setMessageOverride(userId: string, override: MessageOverride | null): Promise<void> {
    if (override) await this.storage.ratelimits.set({ user_id: userId, ...override });
    else await this.storage.ratelimits.delete(userId);
    this.overrides.set(userId, override ? { user_id: userId, ...override } : null);
    this.onOverrideChanged?.(userId);
  }

  /** Told when an override changes (other processes forget what they read of it). */
  onOverrideChanged: ((userId: string) => void) | undefined;
}
