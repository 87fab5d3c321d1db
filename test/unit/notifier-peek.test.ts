/**
 * The notifier's peekers (`GET /events?room_id=` of a world-readable room one is not in): a user
 * counts as peeking only while one of their requests is parked there, and nothing stays after.
 */
import { describe, expect, it } from 'vitest';
import { Notifier } from '../../src/sync/notifier.js';

describe('Notifier peekers', () => {
  it('holds a peeker while any of their requests is parked, and forgets the room after the last', () => {
    const notifier = new Notifier();
    expect([...notifier.peekersOf('!r:hs')]).toEqual([]);
    const first = notifier.peek('!r:hs', '@a:hs');
    const second = notifier.peek('!r:hs', '@a:hs');
    const other = notifier.peek('!r:hs', '@b:hs');
    expect([...notifier.peekersOf('!r:hs')].sort()).toEqual(['@a:hs', '@b:hs']);
    first();
    first(); // ending twice ends once
    expect([...notifier.peekersOf('!r:hs')].sort()).toEqual(['@a:hs', '@b:hs']);
    second();
    expect([...notifier.peekersOf('!r:hs')]).toEqual(['@b:hs']);
    other();
    expect([...notifier.peekersOf('!r:hs')]).toEqual([]);
    expect((notifier as unknown as { peeking: Map<string, unknown> }).peeking.size).toBe(0);
  });

  it('a parked peeker wakes when the room’s peekers are notified', async () => {
    const notifier = new Notifier();
    const stop = notifier.peek('!r:hs', '@a:hs');
    const serial = notifier.serialOf('@a:hs');
    const waiting = notifier.waitForChange('@a:hs', serial, 10_000);
    notifier.notify(['@member:hs', ...notifier.peekersOf('!r:hs')]);
    await waiting;
    expect(notifier.serialOf('@a:hs')).not.toBe(serial);
    stop();
  });
});
