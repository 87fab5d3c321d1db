/** Migration 0037 (device lists' stream ids) goes up, down and up again, keeping one row per user. */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Migrator } from 'kysely';
import { expect, test } from 'vitest';
import { migrations } from '../../migrations/index.js';
import { migrateToLatest, openDatabase } from '../../src/storage/index.js';
import { E2eStore } from '../../src/storage/e2e-store.js';

test('0037 goes down and up again; a user has one stream id, replaced and forgotten', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'bhs-devlists-migration-'));
  const db = openDatabase({ path: join(dir, 'homeserver.db'), synchronous: 'normal' });
  try {
    await migrateToLatest(db);
    const store = new E2eStore(db);
    await store.setDeviceListStreamId('@a:example.org', 5);
    await store.setDeviceListStreamId('@a:example.org', 2 ** 40);
    expect(await store.deviceListStreamId('@a:example.org')).toBe(2 ** 40);
    await store.forgetDeviceListStreamId('@a:example.org');
    expect(await store.deviceListStreamId('@a:example.org')).toBeUndefined();
    const migrator = new Migrator({ db, provider: { getMigrations: async () => migrations } });
    // Down to just before 0037 (later migrations go down first).
    const down = await migrator.migrateTo('0036-pusher-delivery');
    expect(down.error).toBeUndefined();
    expect(down.results?.map((r) => r.migrationName)).toContain('0037-device-list-stream-ids');
    await migrateToLatest(db);
    await store.setDeviceListStreamId('@a:example.org', 7);
    expect(await store.deviceListStreamId('@a:example.org')).toBe(7);
  } finally {
    await db.destroy();
    rmSync(dir, { recursive: true, force: true });
  }
});
