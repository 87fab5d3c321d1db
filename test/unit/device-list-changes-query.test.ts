/**
 * What a sync reads of the device-list changes (issue 34's fix of the 10,000 parked syncs): the
 * changes of the user and their roommates, by index, a bounded number of queries, or every change
 * in the window once the roommates are so many that one scan costs less. Both answer the same.
 */
import { describe, expect, it } from 'vitest';
import { KeysService } from '../../src/e2e/keys-service.js';
import type { RoomCache } from '../../src/rooms/room-cache.js';
import { migrateToLatest, observeQueries, openDatabase, Storage } from '../../src/storage/index.js';

const USERS = 3_000;
const user = (i: number): string => `@u${i}:test.local`;
const ME = user(0);

async function storageWithChanges(): Promise<{ storage: Storage; queries: () => number }> {
  const db = openDatabase({ path: ':memory:', synchronous: 'full', measureQueries: true });
  await migrateToLatest(db);
  const storage = new Storage(db);
  // Every user's device list changed once, in order; a few changes were told to ME alone (users
  // who share no room with ME: their master keys ME signed), and some to somebody else alone.
  for (let i = 0; i < USERS; i++) await storage.e2e.recordDeviceListChange(user(i), i + 1);
  await storage.e2e.recordDeviceListChange(user(2_900), USERS + 1, ME);
  await storage.e2e.recordDeviceListChange(user(2_901), USERS + 2, user(5));
  let count = 0;
  observeQueries(db, () => (count += 1));
  return { storage, queries: () => count };
}

/** A KeysService whose room cache says ME shares rooms with users 1 to `roommates`. */
function keysWith(storage: Storage, roommates: number): KeysService {
  const shared = new Set(Array.from({ length: roommates }, (_, i) => user(i + 1)));
  const cache = { roommates: async () => shared } as unknown as RoomCache;
  return new KeysService(storage, undefined as never, undefined as never, cache, 'test.local');
}

/** What ME must be shown for changes in (after, upTo] with users 1 to `roommates` as roommates. */
function expected(roommates: number, after: number, upTo: number): string[] {
  const shown = new Set<string>();
  for (let i = 0; i <= roommates && i < USERS; i++) if (i + 1 > after && i + 1 <= upTo) shown.add(user(i));
  if (USERS + 1 > after && USERS + 1 <= upTo) shown.add(user(2_900));
  return [...shown].sort();
}

describe('the device-list changes a sync reads', () => {
  // 2,000 users (the user and 1,999 roommates) in lists of 500, and the changes told to the user
  // alone: five queries. From 2,000 roommates, the window in one.
  it.each([
    { roommates: 1_999, queries: 5, how: 'by user, in five queries' },
    { roommates: 2_000, queries: 1, how: 'by window, in one query' },
  ])('reads the changes for a user with $roommates roommates $how, and shows the same', async ({ roommates, queries: expectedQueries }) => {
    const { storage, queries } = await storageWithChanges();
    const keys = keysWith(storage, roommates);
    // The first call also reads the newest change's position once.
    await keys.changedFor(ME, 0, 1);
    for (const [after, upTo] of [[0, USERS + 2], [1_500, 2_100], [1_998, 2_002], [USERS, USERS + 2]] as const) {
      const before = queries();
      expect(await keys.changedFor(ME, after, upTo)).toEqual(expected(roommates, after, upTo));
      expect(queries() - before).toBe(expectedQueries);
    }
    await storage.close();
  });

  it('reads nothing when nothing changed since the token', async () => {
    const { storage, queries } = await storageWithChanges();
    const keys = keysWith(storage, 10);
    await keys.changedFor(ME, 0, 1);
    const before = queries();
    expect(await keys.changedFor(ME, USERS + 2, USERS + 5)).toEqual([]);
    expect(queries() - before).toBe(0);
    await storage.close();
  });
});
