import { describe, expect, it } from 'vitest';
import { FetchBudget } from '../../src/federation/fetch-budget.js';
import { RateLimiter } from '../../src/ratelimit/rate-limiter.js';
import { FetchRefused } from '../../src/rooms/event-source.js';
import { FakeClock } from '../support/homeserver.js';

const limits = { maxRequests: 3, maxEvents: 100, maxBytes: 1000, deadlineMs: 5000 };

describe('FetchBudget: what one inbound request may make us fetch', () => {
  it('hands out requests until one of its limits is reached, then refuses', () => {
    const clock = new FakeClock(0);
    const budget = new FetchBudget(limits, clock, 'evil.test', undefined, 60_000, 10_000);
    const first = budget.take();
    // A slot never reads more than the bytes left, nor waits past the deadline.
    expect(first).toEqual({ timeoutMs: 5000, maxResponseBytes: 1000, maxEvents: 100 });
    budget.spent(600, 10);
    expect(budget.take()).toEqual({ timeoutMs: 5000, maxResponseBytes: 400, maxEvents: 90 });
    budget.spent(100, 95);
    // The events allowed were spent (an answer counts for what it may use: 90, not 95).
    expect(budget.usage).toEqual({ requests: 2, events: 100, bytes: 700 });
    expect(budget.exhausted()).toBe(true);
    expect(() => budget.take()).toThrow(FetchRefused);
  });

  it('refuses past its deadline, and past its request count', () => {
    const clock = new FakeClock(0);
    const late = new FetchBudget(limits, clock, 'slow.test', undefined, 60_000, 10_000);
    clock.advance(4000);
    expect(late.take().timeoutMs).toBe(1000);
    clock.advance(1000);
    expect(() => late.take()).toThrow(/deadline/);
    const busy = new FetchBudget(limits, clock, 'busy.test', undefined, 60_000, 10_000);
    for (let i = 0; i < 3; i++) busy.take();
    expect(() => busy.take()).toThrow(/3 requests/);
  });

  it('shares a bucket per origin across requests, so repeating a transaction soon buys nothing', () => {
    const clock = new FakeClock(0);
    const perOrigin = new RateLimiter({ per_second: 1, burst_count: 4 }, clock);
    const one = new FetchBudget(limits, clock, 'evil.test', perOrigin, 60_000, 10_000);
    for (let i = 0; i < 3; i++) one.take();
    const two = new FetchBudget(limits, clock, 'evil.test', perOrigin, 60_000, 10_000);
    two.take();
    expect(() => two.take()).toThrow(/evil.test made us fetch too much lately/);
    // Another origin has a bucket of its own; the first fills again with time.
    expect(new FetchBudget(limits, clock, 'good.test', perOrigin, 60_000, 10_000).take().maxEvents).toBe(100);
    clock.advance(2000);
    expect(new FetchBudget(limits, clock, 'evil.test', perOrigin, 60_000, 10_000).take().maxEvents).toBe(100);
  });
});
