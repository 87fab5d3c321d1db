/** `synchronous: full`: every acknowledged write has been fdatasync'ed, off the event loop. */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { migrateToLatest, openDatabase, Storage, type Db } from '../../src/storage/index.js';
import { WalSync, walSyncOf } from '../../src/storage/database.js';

let dir: string | undefined;
let db: Db | undefined;
afterEach(async () => {
  await db?.destroy();
  db = undefined;
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function open(synchronous: 'full' | 'normal'): Promise<Db> {
  dir = mkdtempSync(join(tmpdir(), 'bhs-durable-'));
  db = openDatabase({ path: join(dir, 'hs.db'), synchronous });
  await migrateToLatest(db);
  return db;
}

describe('durable commits', () => {
  it('syncs the WAL after each autocommit write and each COMMIT, never for reads or inside a transaction', async () => {
    const database = await open('full');
    const wal = walSyncOf(database)!;
    expect(wal).toBeDefined();
    const before = wal.count;
    await database.insertInto('filters').values({ user_id: '@a:x', filter_id: 1, definition: '{}' }).execute();
    expect(wal.count).toBe(before + 1);
    await database.selectFrom('filters').selectAll().execute();
    expect(wal.count).toBe(before + 1);
    const storage = new Storage(database);
    await storage.transaction(async (stores) => {
      await stores.userData.insertFilter('@a:x', '{}');
      await stores.userData.insertFilter('@a:x', '{"x":1}');
      expect(wal.count).toBe(before + 1);
    });
    expect(wal.count).toBe(before + 2);
  });

  it('shares one sync among commits made while another runs, and waits for a sync that started after them', async () => {
    dir = mkdtempSync(join(tmpdir(), 'bhs-durable-'));
    const file = join(dir, 'wal');
    writeFileSync(file, 'frames');
    const wal = new WalSync(file);
    // Ten commits in one turn: the first starts a sync, the other nine share the next one, since
    // the running sync may have started before their frames were written.
    const first = wal.sync();
    const rest = Array.from({ length: 9 }, () => wal.sync());
    await Promise.all([first, ...rest]);
    expect(wal.count).toBe(2);
    await wal.sync();
    expect(wal.count).toBe(3);
    await wal.close();
  });

  it('does not sync in normal mode', async () => {
    const database = await open('normal');
    expect(walSyncOf(database)).toBeUndefined();
  });
});
