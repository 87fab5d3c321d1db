/** Migration 0035 (guest accounts): the flag defaults to 0 for existing accounts, and `down` removes it. */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Migrator, sql } from 'kysely';
import { expect, test } from 'vitest';
import { migrations } from '../../migrations/index.js';
import { openDatabase } from '../../src/storage/index.js';

test('0035 adds users.is_guest (0 for existing accounts) and takes it away again', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'bhs-guest-migration-'));
  const db = openDatabase({ path: join(dir, 'homeserver.db'), synchronous: 'normal' });
  try {
    const migrator = new Migrator({ db, provider: { getMigrations: async () => migrations } });
    expect((await migrator.migrateTo('0033-events-rowid')).error).toBeUndefined();
    const user = { user_id: '@a:example.org', localpart: 'a', password_hash: null, admin: 0, user_type: null, displayname: null, avatar_url: null, deactivated: 0, created_ts: 1 };
    await db.insertInto('users').values(user as never).execute();
    const columns = async () => (await sql<{ name: string }>`SELECT name FROM pragma_table_info('users')`.execute(db)).rows.map((r) => r.name);
    expect((await migrator.migrateTo('0035-guest-accounts')).error).toBeUndefined();
    expect((await db.selectFrom('users').select('is_guest').executeTakeFirstOrThrow()).is_guest).toBe(0);
    expect((await migrator.migrateDown()).error).toBeUndefined();
    expect(await columns()).not.toContain('is_guest');
    expect((await db.selectFrom('users').select('user_id').execute()).map((r) => r.user_id)).toEqual([user.user_id]);
  } finally {
    await db.destroy();
    rmSync(dir, { recursive: true, force: true });
  }
});
