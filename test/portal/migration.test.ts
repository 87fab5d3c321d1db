/**
 * Migration 0030 on a database that already has portal sessions: the people signed in when the
 * server is upgraded are bound to the provider accounts they signed in with, earliest first.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Migrator } from 'kysely';
import { expect, test } from 'vitest';
import { migrations } from '../../migrations/index.js';
import { migrateToLatest, openDatabase } from '../../src/storage/index.js';

test('0030 binds the people signed in at the upgrade to their provider accounts (the first account wins; the other’s session ends)', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'bhs-portal-migration-'));
  const db = openDatabase({ path: join(dir, 'homeserver.db'), synchronous: 'normal' });
  try {
    const migrator = new Migrator({ db, provider: { getMigrations: async () => migrations } });
    const upTo0029 = await migrator.migrateTo('0029-bot-portal');
    expect(upTo0029.error).toBeUndefined();
    const session = (id: string, owner: string, sub: string, created: number) => ({
      id_hash: id, owner_id: owner, display_name: null, idp_id: 'corp', sub, sid: null, id_token: null,
      attributes_grant: 0, created_ts: created, last_seen_ts: created, expires_ts: created + 1000,
    });
    await db.insertInto('portal_sessions').values([
      session('a1', '@alice:example.org', 'sub-alice', 10),
      session('a2', '@alice:example.org', 'sub-alice', 20),
      // A second account as alice, later: already the takeover 0030 stops; the first stays hers.
      session('a3', '@alice:example.org', 'sub-other', 30),
      session('b1', '@bob:example.org', 'sub-bob', 15),
    ]).execute();
    await migrateToLatest(db);
    const rows = await db.selectFrom('portal_identities').selectAll().orderBy('owner_id').execute();
    expect(rows).toEqual([
      { idp_id: 'corp', subject: 'sub-alice', owner_id: '@alice:example.org', created_ts: 10 },
      { idp_id: 'corp', subject: 'sub-bob', owner_id: '@bob:example.org', created_ts: 15 },
    ]);
    const sessions = await db.selectFrom('portal_sessions').select('id_hash').orderBy('id_hash').execute();
    expect(sessions.map((row) => row.id_hash)).toEqual(['a1', 'a2', 'b1']);
  } finally {
    await db.destroy();
    rmSync(dir, { recursive: true, force: true });
  }
});
