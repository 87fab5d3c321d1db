import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'kysely';
import { afterAll, describe, expect, it } from 'vitest';
import { migrateToLatest, openDatabase } from '../../src/storage/index.js';

const dir = mkdtempSync(join(tmpdir(), 'bhs-db-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function pragma(db: ReturnType<typeof openDatabase>, name: string): Promise<unknown> {
  const { rows } = await sql.raw(`PRAGMA ${name}`).execute(db);
  return Object.values(rows[0] as Record<string, unknown>)[0];
}

describe('opening and migrating databases', () => {
  it('migrates a new file database and leaves it at synchronous=FULL', async () => {
    const db = openDatabase({ path: join(dir, 'full.db'), synchronous: 'full' });
    try {
      expect(await migrateToLatest(db)).toContain('0001-accounts');
      expect(await pragma(db, 'synchronous')).toBe(2);
      expect(await pragma(db, 'journal_mode')).toBe('wal');
      expect(await migrateToLatest(db)).toEqual([]);
    } finally {
      await db.destroy();
    }
  });

  it('keeps synchronous=NORMAL when that is what the database was opened with', async () => {
    const db = openDatabase({ path: join(dir, 'normal.db'), synchronous: 'normal' });
    try {
      await migrateToLatest(db);
      expect(await pragma(db, 'synchronous')).toBe(1);
    } finally {
      await db.destroy();
    }
  });

  it('starts each in-memory database migrated and empty, whatever the earlier ones hold', async () => {
    const first = openDatabase({ path: ':memory:', synchronous: 'full' });
    await migrateToLatest(first);
    await first.insertInto('users').values({ user_id: '@first:test.local', localpart: 'first', password_hash: 'x', admin: 0, user_type: null, displayname: null, avatar_url: null, deactivated: 0, created_ts: 0 } as never).execute();
    const second = openDatabase({ path: ':memory:', synchronous: 'full' });
    try {
      await migrateToLatest(second);
      expect(await second.selectFrom('users').selectAll().execute()).toEqual([]);
      expect((await second.selectFrom('kysely_migration' as never).selectAll().execute()).length).toBeGreaterThanOrEqual(5);
      // And it is a database of its own: writing to it leaves the first alone.
      await second.insertInto('users').values({ user_id: '@second:test.local', localpart: 'second', password_hash: 'x', admin: 0, user_type: null, displayname: null, avatar_url: null, deactivated: 0, created_ts: 0 } as never).execute();
      expect((await first.selectFrom('users').select('user_id').execute()).map((r) => r.user_id)).toEqual(['@first:test.local']);
    } finally {
      await first.destroy();
      await second.destroy();
    }
  });
});
