import { afterEach, describe, expect, it, vi } from 'vitest';
import { AccessTokenCache } from '../../src/storage/token-cache.js';

const row = { token_hash: 'h', user_id: '@a:test.local', device_id: 'D' } as never;

describe('AccessTokenCache', () => {
  afterEach(() => vi.useRealTimers());

  it('forgets everything once another process commits, noticed within a millisecond', () => {
    vi.useFakeTimers();
    let version = 1;
    const reads = vi.fn(() => version);
    const cache = new AccessTokenCache(reads);
    cache.put('h', row, cache.generation);
    expect(cache.get('h')).toBe(row);
    version = 2; // another connection committed
    // Within the same millisecond the version is not read again...
    const readsSoFar = reads.mock.calls.length;
    expect(cache.get('h')).toBe(row);
    expect(reads.mock.calls.length).toBe(readsSoFar);
    // ...after it, it is, and the cache is emptied.
    vi.advanceTimersByTime(2);
    expect(cache.get('h')).toBeUndefined();
  });

  it('does not keep a row read before a change made through this process', () => {
    const cache = new AccessTokenCache(() => 1);
    const generation = cache.generation;
    cache.invalidate();
    cache.put('h', row, generation);
    expect(cache.get('h')).toBeUndefined();
  });
});
