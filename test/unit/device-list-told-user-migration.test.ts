/** Migration 0040 (device-list changes told to one user) carries 0037's own_only both ways. */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Migrator, sql } from 'kysely';
import { expect, test } from 'vitest';
import { migrations } from '../../migrations/index.js';
import { migrateToLatest, openDatabase } from '../../src/storage/index.js';
import { E2eStore } from '../../src/storage/e2e-store.js';

test('0040 turns own_only into told_user_id and back; a change told to another user goes on the way down', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'bhs-told-user-migration-'));
  const db = openDatabase({ path: join(dir, 'homeserver.db'), synchronous: 'normal' });
  try {
    const migrator = new Migrator({ db, provider: { getMigrations: async () => migrations } });
    expect((await migrator.migrateTo('0038-erased-users')).error).toBeUndefined();
    await sql`INSERT INTO device_list_changes (stream_ordering, user_id, own_only) VALUES (1, '@a:example.org', 0), (2, '@a:example.org', 1)`.execute(db);
    await migrateToLatest(db);
    const store = new E2eStore(db);
    expect(await store.deviceListChanges(0, 2)).toEqual(
      expect.arrayContaining([
        { userId: '@a:example.org', toldUserId: undefined },
        { userId: '@a:example.org', toldUserId: '@a:example.org' },
      ]),
    );
    await store.recordDeviceListChange('@b:example.org', 3, '@a:example.org');
    expect(await store.deviceListChanges(2, 3)).toEqual([{ userId: '@b:example.org', toldUserId: '@a:example.org' }]);

    const down = await migrator.migrateTo('0038-erased-users');
    expect(down.error).toBeUndefined();
    const rows = await sql<{ stream_ordering: number; user_id: string; own_only: number }>`SELECT stream_ordering, user_id, own_only FROM device_list_changes ORDER BY stream_ordering`.execute(db);
    expect(rows.rows.map((row) => [Number(row.stream_ordering), row.user_id, Number(row.own_only)])).toEqual([
      [1, '@a:example.org', 0],
      [2, '@a:example.org', 1],
    ]);
    await migrateToLatest(db);
  } finally {
    await db.destroy();
    rmSync(dir, { recursive: true, force: true });
  }
});
