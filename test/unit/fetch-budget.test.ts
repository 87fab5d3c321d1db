import { describe, expect, it } from 'vitest';
import { FetchBudget } from '../../src/federation/fetch-budget.js';
import { RateLimiter } from '../../src/ratelimit/rate-limiter.js';
import { FetchRefused } from '../../src/rooms/event-source.js';
import { FakeClock } from '../support/homeserver.js';

const limits = { maxRequests: 3, maxEvents: 100, maxBytes: 1000, deadlineMs: 5000 };

describe('FetchBudget: what one inbound request may make us fetch', () => {
  it('hands out requests until one of its limits is reached, then refuses', async () => {
    const clock = new FakeClock(0);
    const budget = new FetchBudget(limits, clock, 'evil.test', undefined, 60_000, 10_000);
    const first = await budget.take('state');
    // A slot never reads more than the bytes left, nor waits past the deadline.
    expect(first).toEqual({ timeoutMs: 5000, maxResponseBytes: 1000, maxEvents: 100 });
    budget.settle(first, 600, 10);
    const second = await budget.take('state');
    expect(second).toEqual({ timeoutMs: 5000, maxResponseBytes: 400, maxEvents: 90 });
    budget.settle(second, 100, 95);
    // The events allowed were spent (an answer counts for what it may use: 90, not 95).
    expect(budget.usage).toEqual({ requests: 2, events: 100, bytes: 700 });
    expect(budget.exhausted()).toBe(true);
    await expect(budget.take('event')).rejects.toThrow(FetchRefused);
  });

  it('reserves what requests in flight may read, so together they never read past it', async () => {
    const clock = new FakeClock(0);
    const budget = new FetchBudget({ ...limits, maxRequests: 10, maxBytes: 64 * 1024 * 1024 }, clock, 'evil.test', undefined, 60_000, 64 * 1024 * 1024);
    // get_missing_events answers may need 20 events each: five at once take all 100.
    const slots = await Promise.all([1, 2, 3, 4, 5].map(() => budget.take('missing')));
    expect(slots.map((slot) => slot.maxEvents)).toEqual([20, 20, 20, 20, 20]);
    // A sixth waits for one to end, and gets what that one did not use.
    let sixth: { maxEvents: number } | undefined;
    const waiting = budget.take('missing').then((slot) => (sixth = slot));
    await new Promise((resolve) => setImmediate(resolve));
    expect(sixth).toBeUndefined();
    budget.settle(slots[0]!, 10, 5);
    await waiting;
    expect(sixth!.maxEvents).toBe(15);
    // Bytes the same way: a whole state may read all that is left, so others wait for it.
    const bytes = new FetchBudget(limits, clock, 'evil.test', undefined, 60_000, 10_000);
    const state = await bytes.take('state');
    expect(state.maxResponseBytes).toBe(1000);
    let next: { maxResponseBytes: number } | undefined;
    const after = bytes.take('event').then((slot) => (next = slot));
    await new Promise((resolve) => setImmediate(resolve));
    expect(next).toBeUndefined();
    bytes.settle(state, 300, 1);
    await after;
    expect(next!.maxResponseBytes).toBe(700);
  });

  it('refuses past its deadline, and past its request count', async () => {
    const clock = new FakeClock(0);
    const late = new FetchBudget(limits, clock, 'slow.test', undefined, 60_000, 10_000);
    clock.advance(4000);
    const slot = await late.take('event');
    expect(slot.timeoutMs).toBe(1000);
    late.settle(slot, 0, 0);
    clock.advance(1000);
    await expect(late.take('event')).rejects.toThrow(/deadline/);
    const busy = new FetchBudget(limits, clock, 'busy.test', undefined, 60_000, 10_000);
    for (let i = 0; i < 3; i++) busy.settle(await busy.take('event'), 0, 0);
    await expect(busy.take('event')).rejects.toThrow(/3 requests/);
  });

  it('shares a bucket per origin across requests, so repeating a transaction soon buys nothing', async () => {
    const clock = new FakeClock(0);
    const perOrigin = new RateLimiter({ per_second: 1, burst_count: 4 }, clock);
    const one = new FetchBudget(limits, clock, 'evil.test', perOrigin, 60_000, 10_000);
    for (let i = 0; i < 3; i++) one.settle(await one.take('event'), 0, 0);
    const two = new FetchBudget(limits, clock, 'evil.test', perOrigin, 60_000, 10_000);
    two.settle(await two.take('event'), 0, 0);
    await expect(two.take('event')).rejects.toThrow(/evil.test made us fetch too much lately/);
    // Another origin has a bucket of its own; the first fills again with time.
    expect((await new FetchBudget(limits, clock, 'good.test', perOrigin, 60_000, 10_000).take('event')).maxEvents).toBe(1);
    clock.advance(2000);
    expect((await new FetchBudget(limits, clock, 'evil.test', perOrigin, 60_000, 10_000).take('event')).maxEvents).toBe(1);
  });
});
