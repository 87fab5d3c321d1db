/**
 * `RoomCache.forgetAll` (another process's changes were not all heard of): a load already under
 * way for a room or user the cache does not hold yet may have read the database before those
 * changes, so it must start again rather than land stale.
 */
import { describe, expect, it } from 'vitest';
import { RoomCache } from '../../src/rooms/room-cache.js';
import type { Storage } from '../../src/storage/index.js';

/** A storage whose reads answer what `answers` says now, the first one held until released. */
function storageOf(answers: { name: string; rooms: string[] }) {
  let release!: () => void;
  let hold: Promise<void> | undefined = new Promise<void>((resolve) => (release = resolve));
  let reads = 0;
  const first = async () => {
    reads += 1;
    const waiting = hold;
    hold = undefined;
    // The answer is read before the wait, as a query's snapshot is taken when it runs.
    const seen = { ...answers, rooms: [...answers.rooms] };
    if (waiting) await waiting;
    return seen;
  };
  const storage = {
    rooms: {
      getRoom: async () => {
        const seen = await first();
        return { room_id: '!r:x', room_version: '10', creator: '@a:x', extremities: JSON.stringify([seen.name]), depth: 1, state_group: null, legacy: 0, state_reset_stream: 0 };
      },
      currentStateEvents: async () => [],
      latestStreamOfRoom: async () => 0,
      stateGroupDepth: async () => 0,
      membershipsOfUser: async () => {
        const seen = await first();
        return seen.rooms.map((room_id) => ({ room_id, membership: 'join', stream_ordering: 1, forgotten: 0 }));
      },
    },
    userData: { latestReceiptOfRoom: async () => 0 },
  } as unknown as Storage;
  return { storage, release: () => release(), reads: () => reads };
}

describe('RoomCache.forgetAll', () => {
  it('makes a room load under way start again', async () => {
    const answers = { name: '$before', rooms: [] };
    const { storage, release, reads } = storageOf(answers);
    const cache = new RoomCache(storage);
    const loading = cache.room('!r:x');
    await new Promise((resolve) => setImmediate(resolve));
    answers.name = '$after';
    cache.forgetAll();
    release();
    const room = await loading;
    expect(room?.head.extremities).toEqual(['$after']);
    expect(reads()).toBe(2);
  });

  it('makes a room list load under way start again', async () => {
    const answers = { name: '', rooms: ['!old:x'] };
    const { storage, release } = storageOf(answers);
    const cache = new RoomCache(storage);
    const loading = cache.roomsOf('@u:x');
    await new Promise((resolve) => setImmediate(resolve));
    answers.rooms = ['!new:x'];
    cache.forgetAll();
    release();
    expect([...(await loading).keys()]).toEqual(['!new:x']);
  });
});
