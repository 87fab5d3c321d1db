/** The bound on remote media fetches at once: in all, per server, the queue and its wait. */
import { describe, expect, it } from 'vitest';
import { FetchLimiter } from '../../src/media/fetch-limiter.js';

function gate(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

describe('FetchLimiter', () => {
  it('runs at most the bounds at once, and lets another server past a full one', async () => {
    const limiter = new FetchLimiter({ maxConcurrent: 3, maxConcurrentPerServer: 2, maxQueued: 10, maxWaitMs: 60_000 });
    const held = gate();
    const started: string[] = [];
    const work = (name: string) => async () => {
      started.push(name);
      await held.promise;
    };
    const runs = [limiter.run('b', work('b1')), limiter.run('b', work('b2')), limiter.run('b', work('b3')), limiter.run('c', work('c1')), limiter.run('c', work('c2'))];
    await new Promise((resolve) => setImmediate(resolve));
    // b3 waits for b's turn; c1 is not held up behind it.
    expect(started).toEqual(['b1', 'b2', 'c1']);
    expect(limiter.active.total).toBe(3);
    held.open();
    await Promise.all(runs);
    expect(started.sort()).toEqual(['b1', 'b2', 'b3', 'c1', 'c2']);
    expect(limiter.active.total).toBe(0);
    expect(limiter.active.perServer.size).toBe(0);
  });

  it('refuses with 429 when the queue is full, when one server would take more than half of it, and after the wait', async () => {
    const limiter = new FetchLimiter({ maxConcurrent: 1, maxConcurrentPerServer: 1, maxQueued: 4, maxWaitMs: 30 });
    const held = gate();
    const first = limiter.run('b', () => held.promise);
    const waiting = [limiter.run('b', async () => 'b2'), limiter.run('b', async () => 'b3')];
    // b has half the queue: a third waiter of b is refused at once, c still gets in.
    await expect(limiter.run('b', async () => 'b4')).rejects.toMatchObject({ errcode: 'M_LIMIT_EXCEEDED', status: 429 });
    const c = limiter.run('c', async () => 'c1');
    // Nothing frees a slot within maxWaitMs: the waiters are refused and leave the queue.
    for (const run of [...waiting, c]) await expect(run).rejects.toMatchObject({ errcode: 'M_LIMIT_EXCEEDED' });
    held.open();
    await first;
    expect(await limiter.run('b', async () => 'later')).toBe('later');
  });

  it('frees the slot of work that fails', async () => {
    const limiter = new FetchLimiter({ maxConcurrent: 1, maxConcurrentPerServer: 1, maxQueued: 0, maxWaitMs: 10 });
    await expect(limiter.run('b', async () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    expect(await limiter.run('b', async () => 1)).toBe(1);
  });
});
