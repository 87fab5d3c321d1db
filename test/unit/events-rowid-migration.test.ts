/**
 * Migration 0033 on a database that already holds events: the table is rebuilt keyed by its rowid
 * (stream_ordering integer primary key), with every row, column and index kept, and the separate
 * index on stream_ordering gone (issue 34: one page fewer in every send's commit).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Migrator, sql } from 'kysely';
import { expect, test } from 'vitest';
import { migrations } from '../../migrations/index.js';
import { migrateToLatest, openDatabase } from '../../src/storage/index.js';

test('0033 rebuilds the events table on its rowid, rows and indexes kept', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'bhs-rowid-migration-'));
  const db = openDatabase({ path: join(dir, 'homeserver.db'), synchronous: 'normal' });
  try {
    const migrator = new Migrator({ db, provider: { getMigrations: async () => migrations } });
    expect((await migrator.migrateTo('0030-portal-identities')).error).toBeUndefined();
    const event = (stream: number, id: string, extra: Record<string, unknown> = {}) => ({
      stream_ordering: stream, event_id: id, room_id: '!r:example.org', type: 'm.room.message', state_key: null,
      sender: '@a:example.org', origin_server_ts: 1_700_000_000_000 + stream, content: JSON.stringify({ body: `m${stream}` }),
      replaces_state: null, prev_content: null, prev_sender: null, redacts: null, redacted_by: null, history_visibility: 'shared',
      txn_device_id: 'D', txn_scope: 'send', txn_id: `t${stream}`, depth: stream, prev_events: '[]', auth_events: '[]', pdu_extra: '{}',
      state_group: null, outlier: 0, rejected: null, soft_failed: 0, gap_before: 0, backfilled_at: null, ...extra,
    });
    // An outlier below zero, and a position past 2^32.
    const rows = [event(-3, '$outlier', { outlier: 1, txn_id: null, txn_device_id: null, txn_scope: null }), event(1, '$one'), event(2, '$two'), event(2 ** 40, '$far')];
    await db.insertInto('events').values(rows as never).execute();
    const indexesBefore = (await sql<{ name: string }>`SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'events' AND sql IS NOT NULL ORDER BY name`.execute(db)).rows;

    await migrateToLatest(db);

    const table = (await sql<{ sql: string }>`SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'events'`.execute(db)).rows[0]!;
    expect(table.sql).toContain('"stream_ordering" integer primary key');
    const stored = await db.selectFrom('events').selectAll().orderBy('stream_ordering').execute();
    expect(stored).toEqual(rows);
    // The rowid is the position now: no index of its own on it.
    const rowids = await sql<{ r: number; s: number }>`SELECT rowid AS r, stream_ordering AS s FROM events ORDER BY rowid`.execute(db);
    expect(rowids.rows.map((row) => row.r)).toEqual(rows.map((row) => row.stream_ordering));
    expect(rowids.rows.every((row) => row.r === row.s)).toBe(true);
    const indexesAfter = (await sql<{ name: string }>`SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'events' AND sql IS NOT NULL ORDER BY name`.execute(db)).rows;
    expect(indexesAfter).toEqual(indexesBefore);
    const autoindexes = (await sql<{ name: string }>`SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'events' AND sql IS NULL`.execute(db)).rows;
    expect(autoindexes).toHaveLength(1); // event_id's unique constraint; stream_ordering's is gone
    // Constraints still hold: a second event with the same id or transaction is refused.
    await expect(db.insertInto('events').values(event(5, '$one', { txn_id: 't5' }) as never).execute()).rejects.toThrow(/UNIQUE/);
    await expect(db.insertInto('events').values(event(6, '$six', { txn_id: 't1' }) as never).execute()).rejects.toThrow(/UNIQUE/);
    await expect(db.insertInto('events').values(event(1, '$dup', { txn_id: 't7' }) as never).execute()).rejects.toThrow(/UNIQUE|PRIMARY/);

    // And back down.
    expect((await migrator.migrateTo('0030-portal-identities')).error).toBeUndefined();
    const downTable = (await sql<{ sql: string }>`SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'events'`.execute(db)).rows[0]!;
    expect(downTable.sql).toContain('"stream_ordering" bigint primary key');
    expect(await db.selectFrom('events').selectAll().orderBy('stream_ordering').execute()).toEqual(rows);
  } finally {
    await db.destroy();
    rmSync(dir, { recursive: true, force: true });
  }
});
