/**
 * The stream's ordering promise: a reader that reads up to `current` never skips a position that
 * commits later. Position-taking transactions run in order, so a slow one holding a lower position
 * cannot be overtaken by a fast one holding a higher (which PostgreSQL's pool would allow).
 */
import { describe, expect, it } from 'vitest';
import type { Storage } from '../../src/storage/index.js';
import { StreamCounter } from '../../src/sync/stream.js';

/** A storage whose transactions run the work at once, side by side (as a pool would). */
const storage = { transaction: (work: (stores: unknown) => Promise<unknown>) => work({}) } as unknown as Storage;

const later = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('StreamCounter', () => {
  it('runs position-taking work in order, so current never passes a position still being written', async () => {
    const stream = new StreamCounter(10);
    const seen: number[] = [];
    const slow = stream.write(storage, async () => {
      const position = stream.next();
      await later(30);
      stream.commit(position);
      seen.push(stream.current);
    });
    const fast = stream.write(storage, async () => {
      const position = stream.next();
      // Had it run beside the slow one, current would be 12 while 11 was still uncommitted.
      seen.push(stream.current);
      stream.commit(position);
      seen.push(stream.current);
    });
    await Promise.all([slow, fast]);
    expect(seen).toEqual([11, 11, 12]);
  });

  it('goes on after work that failed', async () => {
    const stream = new StreamCounter(0);
    const failed = stream.write(storage, async () => {
      stream.next();
      throw new Error('rolled back');
    });
    await expect(failed).rejects.toThrow('rolled back');
    await stream.write(storage, async () => stream.commit(stream.next()));
    expect(stream.current).toBe(2);
  });

  it('holds other processes\' commits back from readers while an unlocked write is in flight, and lets them through after', async () => {
    const stream = new StreamCounter(10);
    const afterCommits: number[] = [];
    let applied = 10;
    stream.shared = {
      get appliedHead() {
        return applied;
      },
      foreignCommits: 0,
      enter: async () => 10,
      leave: async () => undefined,
      afterCommit: (position) => afterCommits.push(position),
      notification: () => ({ channel: 'c', payload: 'p' }),
    };
    const seen: number[] = [];
    // The write takes 11 and 12 (its events are in memory); another process commits 11-13 meanwhile.
    const failed = stream.unlocked(async () => {
      stream.next();
      stream.next();
      applied = 13;
      stream.commit(13);
      seen.push(stream.current);
      await later(5);
      seen.push(stream.current);
      throw new Error('the head moved');
    });
    await expect(failed).rejects.toThrow('the head moved');
    seen.push(stream.current);
    expect(seen).toEqual([10, 10, 13]);
    expect(afterCommits).toEqual([]);
    // A write that succeeds moves the head, and commits outside unlocked work are not held.
    const moved = await stream.unlocked(async () => stream.next());
    expect(moved).toBe(14);
    expect(afterCommits).toEqual([14]);
    stream.commit(20);
    expect(stream.current).toBe(20);
  });
});

