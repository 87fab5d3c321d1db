import { describe, expect, it } from 'vitest';
import { BoundedCache } from '../../src/core/bounded-cache.js';

describe('BoundedCache', () => {
  it('lets the oldest entry go at the limit, but not for a key it already holds', () => {
    const cache = new BoundedCache<string, number>(2);
    cache.set('a', 1);
    cache.set('b', 2);
    cache.set('b', 3);
    expect([cache.get('a'), cache.get('b'), cache.size]).toEqual([1, 3, 2]);
    cache.set('c', 4);
    expect([cache.get('a'), cache.get('b'), cache.get('c'), cache.size]).toEqual([undefined, 3, 4, 2]);
  });

  it('does not keep a value read before an invalidation', () => {
    const cache = new BoundedCache<string, number>(10);
    const before = cache.generation;
    cache.invalidate();
    cache.setIfUnchanged('a', 1, before);
    expect(cache.get('a')).toBeUndefined();
    cache.setIfUnchanged('a', 2, cache.generation);
    expect(cache.get('a')).toBe(2);
  });
});
