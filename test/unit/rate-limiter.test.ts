import { describe, expect, it } from 'vitest';
import { RateLimiter } from '../../src/ratelimit/rate-limiter.js';
import { MatrixError } from '../../src/core/errors.js';
import { FakeClock } from '../support/homeserver.js';

describe('RateLimiter (leaky bucket, as Synapse)', () => {
  it('allows a burst, then refuses until the bucket drains', () => {
    const clock = new FakeClock(0);
    const limiter = new RateLimiter({ per_second: 1, burst_count: 3 }, clock);
    expect([1, 2, 3].map(() => limiter.check('k').allowed)).toEqual([true, true, true]);
    const refused = limiter.check('k');
    expect(refused).toEqual({ allowed: false, retryAfterMs: 1000 });
    clock.advance(999);
    expect(limiter.check('k').allowed).toBe(false);
    clock.advance(1);
    expect(limiter.check('k').allowed).toBe(true);
  });

  it('keeps keys apart, and a refused action is not counted', () => {
    const clock = new FakeClock(0);
    const limiter = new RateLimiter({ per_second: 0.5, burst_count: 1 }, clock);
    expect(limiter.check('a').allowed).toBe(true);
    expect(limiter.check('b').allowed).toBe(true);
    for (let i = 0; i < 5; i++) expect(limiter.check('a').allowed).toBe(false);
    clock.advance(2000);
    expect(limiter.check('a').allowed).toBe(true);
  });

  it('can check without recording, record regardless, and forget', () => {
    const clock = new FakeClock(0);
    const limiter = new RateLimiter({ per_second: 0.1, burst_count: 2 }, clock);
    expect(limiter.check('k', { record: false }).allowed).toBe(true);
    limiter.record('k');
    limiter.record('k');
    expect(limiter.check('k', { record: false })).toEqual({ allowed: false, retryAfterMs: 10_000 });
    limiter.reset('k');
    expect(limiter.check('k').allowed).toBe(true);
  });

  it('enforce() throws 429 M_LIMIT_EXCEEDED with retry_after_ms and Retry-After', () => {
    const limiter = new RateLimiter({ per_second: 0.25, burst_count: 1 }, new FakeClock(0));
    limiter.enforce('k');
    try {
      limiter.enforce('k');
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(MatrixError);
      const error = err as MatrixError;
      expect(error.status).toBe(429);
      expect(error.toJSON()).toEqual({ errcode: 'M_LIMIT_EXCEEDED', error: 'Too Many Requests', retry_after_ms: 4000 });
      expect(error.headers['Retry-After']).toBe('4');
    }
  });

  it('uses a per-call override, and does nothing when disabled', () => {
    const clock = new FakeClock(0);
    const limiter = new RateLimiter({ per_second: 1, burst_count: 1 }, clock);
    expect(limiter.check('k', { override: { per_second: 1, burst_count: 3 } }).allowed).toBe(true);
    expect(limiter.check('k', { override: { per_second: 1, burst_count: 3 } }).allowed).toBe(true);
    const off = new RateLimiter({ per_second: 0, burst_count: 0 }, clock, false);
    expect(off.check('k').allowed).toBe(true);
  });
});
