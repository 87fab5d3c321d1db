/**
 * `migrate-to-postgres` on a database filled through the API: every table compared row by row
 * with its copy, and a server started on the copy carries on where the old one stopped (logins,
 * history, search, new events after the old ones, the same signing key).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { migrateToPostgres } from '../../src/ops/migrate-to-postgres.js';
import { SqliteDriver } from '../../src/storage/database.js';
import { client } from '../support/client.js';
import { DeviceIdentity } from '../support/device-identity.js';
import { createUser, login, startTestHomeserver } from '../support/homeserver.js';
import { TEST_SCHEMA_PREFIX } from '../support/postgres-setup.js';

const POSTGRES = process.env.BHS_TEST_POSTGRES ?? 'postgres://postgres@127.0.0.1:5432/test';
const schema = `${TEST_SCHEMA_PREFIX}${process.pid}_migrated`;
const dir = mkdtempSync(join(tmpdir(), 'bhs-migrate-'));

afterAll(async () => {
  const admin = new pg.Client({ connectionString: POSTGRES });
  await admin.connect();
  await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await admin.end();
  rmSync(dir, { recursive: true, force: true });
});

/** Rows in a form both sides agree on (PostgreSQL gives 64-bit integers as strings), in one order. */
function normalized(rows: Array<Record<string, unknown>>, like: Array<Record<string, unknown>>): string[] {
  const numeric = new Set(like.flatMap((row) => Object.entries(row).filter(([, value]) => typeof value === 'number').map(([column]) => column)));
  return rows.map((row) => JSON.stringify(Object.fromEntries(Object.entries(row).map(([column, value]) => [column, numeric.has(column) && value !== null ? Number(value) : value])))).sort();
}

describe('migrate-to-postgres', () => {
  it('copies every row, and a server on the copy carries on', { timeout: 60_000 }, async () => {
    const file = join(dir, 'homeserver.db');
    const signingKey = join(dir, 'signing.key');
    const old = await startTestHomeserver({ database: { path: file }, signing_key_path: signingKey, media_store_path: join(dir, 'media') });
    const alice = client(old, await createUser(old, 'alice'));
    const bob = client(old, await createUser(old, 'bob'));
    const roomId = await alice.createRoom({ preset: 'public_chat', name: 'Migration room' });
    await bob.join(roomId);
    const first = await alice.send(roomId, { msgtype: 'm.text', body: 'the quarterly report is ready' }, 'm.room.message', 'migrate-1');
    await bob.send(roomId, { 'm.relates_to': { rel_type: 'm.annotation', event_id: first, key: '👍' } }, 'm.reaction');
    await alice.ok('PUT', `/user/${encodeURIComponent(alice.userId)}/account_data/org.example.settings`, { theme: 'dark' });
    await bob.ok('POST', `/rooms/${encodeURIComponent(roomId)}/receipt/m.read/${encodeURIComponent(first)}`, {});
    const device = new DeviceIdentity(alice.userId, alice.user.deviceId);
    await alice.ok('POST', '/keys/upload', { device_keys: device.deviceKeys(), one_time_keys: device.oneTimeKeys(['AAA', 'AAB']) });
    await old.close();
    // As an older version stored transaction scopes: parts joined by U+0000.
    const older = new SqliteDriver(file);
    expect(older.prepare("UPDATE events SET txn_scope = replace(txn_scope, char(31), char(0)) WHERE txn_scope IS NOT NULL").run().changes).toBeGreaterThan(0);
    older.close();

    const said: string[] = [];
    expect(await migrateToPostgres({ from: file, to: POSTGRES, schema }, (line) => said.push(line), { server_name: 'localhost', signing_key_path: signingKey, media_store_path: join(dir, 'media') })).toBe(true);
    expect(said).toContain(`done: ${said.filter((line) => line.includes(' → ')).length} tables, every count matches.`);
    // Then what to change: the files that stay files, where they are.
    expect(said).toContain(`  signing_key_path: ${signingKey}`);
    expect(said.some((line) => line.startsWith(`  media_store_path: ${join(dir, 'media')}`))).toBe(true);

    const sqlite = new SqliteDriver(file, { readonly: true });
    const copy = new pg.Client({ connectionString: POSTGRES, options: `-c search_path=${schema}` });
    await copy.connect();
    try {
      const tables = (sqlite.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite%' AND name NOT LIKE 'kysely%' AND name NOT LIKE 'event_search%'").pluck().all() as string[]);
      expect(tables).toContain('events');
      for (const table of tables) {
        // The copy joins old transaction scopes with U+001F (PostgreSQL's text cannot hold U+0000).
        const before = (sqlite.prepare(`SELECT * FROM "${table}"`).all() as Array<Record<string, unknown>>).map((row) =>
          typeof row.txn_scope === 'string' ? { ...row, txn_scope: row.txn_scope.replaceAll('\u0000', '\u001f') } : row,
        );
        const after = (await copy.query(`SELECT * FROM "${table}"`)).rows as Array<Record<string, unknown>>;
        expect(normalized(after, before), table).toEqual(normalized(before, before));
      }
      const searched = sqlite.prepare('SELECT rowid AS stream_ordering, value, event_id, room_id, type FROM event_search').all() as Array<Record<string, unknown>>;
      expect(searched.length).toBeGreaterThan(0);
      expect(normalized((await copy.query('SELECT stream_ordering, value, event_id, room_id, type FROM event_search')).rows, searched)).toEqual(normalized(searched, searched));
    } finally {
      sqlite.close();
      await copy.end();
    }

    const hs = await startTestHomeserver({ database: { path: ':memory:', url: POSTGRES, schema }, signing_key_path: signingKey });
    try {
      const aliceAgain = client(hs, { ...alice.user, accessToken: await login(hs, 'alice', 'pw-alice') });
      const history = await aliceAgain.ok('GET', `/rooms/${encodeURIComponent(roomId)}/messages`, undefined, { dir: 'b', limit: 50 });
      expect((history.chunk as Array<{ event_id: string }>).map((event) => event.event_id)).toContain(first);
      const search = await aliceAgain.ok('POST', '/search', { search_categories: { room_events: { search_term: 'quarterly' } } });
      expect(search.search_categories.room_events.results.map((r: { result: { event_id: string } }) => r.result.event_id)).toEqual([first]);
      // The old access token still works, and a retry of a send from before the move is one.
      const retried = await client(hs, alice.user).send(roomId, { msgtype: 'm.text', body: 'the quarterly report is ready' }, 'm.room.message', 'migrate-1');
      expect(retried).toBe(first);
      const next = await aliceAgain.send(roomId, { msgtype: 'm.text', body: 'written on PostgreSQL' });
      const newest = await aliceAgain.ok('GET', `/rooms/${encodeURIComponent(roomId)}/messages`, undefined, { dir: 'b', limit: 1 });
      expect(newest.chunk[0].event_id).toBe(next);
      const keys = await aliceAgain.ok('POST', '/keys/query', { device_keys: { [alice.userId]: [] } });
      expect(Object.keys(keys.device_keys[alice.userId])).toContain(alice.user.deviceId);
      // A later account gets a new id from the copied sequence, not one the copy holds.
      await createUser(hs, 'carol');
    } finally {
      await hs.close();
    }
  });
});
