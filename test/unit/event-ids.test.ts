import { describe, expect, it } from 'vitest';
import { newEventId } from '../../src/rooms/events.js';

describe('newEventId', () => {
  it('gives well-formed, distinct ids across many refills of its entropy pool', () => {
    const ids = new Set<string>();
    // 256 ids per refill: 2,000 ids cross the pool boundary several times.
    for (let i = 0; i < 2000; i++) {
      const id = newEventId();
      expect(id).toMatch(/^\$[A-Za-z0-9_-]{43}$/);
      ids.add(id);
    }
    expect(ids.size).toBe(2000);
  });

  it('sorts ids of later milliseconds after earlier ones, as text compares them', () => {
    const times = [0, 1, 63, 64, 4095, 4096, Date.parse('2026-11-23T00:00:00Z'), Date.parse('2026-11-23T00:00:00.001Z'), Date.parse('2100-01-01T00:00:00Z')];
    const ids = times.map((ms) => newEventId(ms));
    for (let i = 1; i < ids.length; i++) {
      // Byte order, as SQLite's BINARY collation compares them.
      expect(Buffer.compare(Buffer.from(ids[i - 1]!), Buffer.from(ids[i]!))).toBe(-1);
    }
  });

  it('keeps 35 random characters after the time', () => {
    const now = Date.now();
    const a = newEventId(now);
    const b = newEventId(now);
    expect(a.slice(0, 9)).toBe(b.slice(0, 9));
    expect(a.slice(9)).not.toBe(b.slice(9));
    expect(a.slice(9)).toHaveLength(35);
  });

  it('stays well-formed for clocks before 1970, far in the future or not a number', () => {
    for (const ms of [-1, -1e15, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 60, 1.5]) {
      expect(newEventId(ms)).toMatch(/^\$[A-Za-z0-9_-]{43}$/);
    }
    // Clamped, not wrapped: the far future still sorts after now.
    expect(Buffer.compare(Buffer.from(newEventId(Date.now())), Buffer.from(newEventId(2 ** 60)))).toBe(-1);
  });
});
