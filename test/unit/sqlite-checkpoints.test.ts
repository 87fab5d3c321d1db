import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'kysely';
import { afterAll, describe, expect, it } from 'vitest';
import { SqliteDriver } from '../../src/storage/database.js';
import { BackgroundCheckpoints, WalIndexHeader } from '../../src/storage/sqlite-checkpoints.js';
import { checkpointInBackground, openDatabase, type Db } from '../../src/storage/index.js';

const dir = mkdtempSync(join(tmpdir(), 'bhs-checkpoints-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Pages in the WAL not yet copied back into the database file, from the WAL index header. */
function pagesWaiting(path: string): number {
  const header = new WalIndexHeader(path);
  try {
    return header.read().waiting;
  } finally {
    header.close();
  }
}

async function pragma(db: Db, name: string): Promise<unknown> {
  const { rows } = await sql.raw(`PRAGMA ${name}`).execute(db);
  return Object.values(rows[0] as Record<string, unknown>)[0];
}

/** Writes about `pages` pages of 4 KiB, one commit per row. */
async function write(db: Db, pages: number): Promise<void> {
  for (let i = 0; i < pages; i++) await sql`INSERT INTO filler (body) VALUES (${'x'.repeat(3500)})`.execute(db);
}

async function until(condition: () => boolean, ms = 5_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

async function openFiller(name: string): Promise<{ db: Db; path: string }> {
  const path = join(dir, name);
  const db = openDatabase({ path, synchronous: 'normal' });
  await sql`CREATE TABLE filler (id INTEGER PRIMARY KEY, body TEXT NOT NULL)`.execute(db);
  return { db, path };
}

describe('WAL checkpoints in a thread of their own', () => {
  it('copies the WAL back once it holds enough pages, while the main connection waits four times longer', async () => {
    const { db, path } = await openFiller('busy.db');
    const reports: string[] = [];
    const checkpoints = checkpointInBackground(db, (message) => reports.push(message), { pages: 50, startNow: true })!;
    try {
      await checkpoints.ready;
      expect(await pragma(db, 'wal_autocheckpoint')).toBe(200);
      await write(db, 150);
      await until(() => checkpoints.checkpoints > 0 && pagesWaiting(path) < 50);
      // Written on, the WAL keeps being copied back by the thread: it never reaches the main
      // connection's threshold of 200 pages, where a commit would checkpoint.
      // (At a steady pace, as a busy server writes: a burst faster than a checkpoint copies would
      // measure this machine's disk instead.)
      let most = 0;
      for (let i = 0; i < 300; i++) {
        await write(db, 1);
        most = Math.max(most, pagesWaiting(path));
        await new Promise((resolve) => setTimeout(resolve, 1));
      }
      expect(most).toBeLessThan(200);
      expect(reports).toEqual([]);
    } finally {
      await checkpoints.stop();
    }
    expect(checkpoints.running).toBe(false);
    // Stopped, the main connection checkpoints itself at SQLite's default again.
    expect(await pragma(db, 'wal_autocheckpoint')).toBe(1000);
    await db.destroy();
    const again = openDatabase({ path, synchronous: 'normal' });
    expect(await again.selectFrom('filler' as never).select(sql<number>`count(*)`.as('n')).executeTakeFirst()).toEqual({ n: 450 });
    await again.destroy();
  });

  it('copies back what waits once the database has been quiet, however few pages', async () => {
    const { db, path } = await openFiller('quiet.db');
    const checkpoints = checkpointInBackground(db, () => undefined, { startNow: true })!;
    try {
      await checkpoints.ready;
      await write(db, 20);
      expect(pagesWaiting(path)).toBeGreaterThanOrEqual(20);
      await until(() => pagesWaiting(path) === 0);
      expect(checkpoints.checkpoints).toBeGreaterThan(0);
    } finally {
      await checkpoints.stop();
      await db.destroy();
    }
  });

  it('gives the checkpoints back to the commits when the thread stops on its own, says so, and starts no other', async () => {
    const sqlite = new SqliteDriver(join(dir, 'lost.db'));
    sqlite.pragma('journal_mode = WAL');
    sqlite.exec('CREATE TABLE filler (id INTEGER PRIMARY KEY, body TEXT NOT NULL)');
    const reports: string[] = [];
    // A thread that cannot load SQLite fails at once.
    const checkpoints = new BackgroundCheckpoints(sqlite, { driver: join(dir, 'no-such-driver.js'), pages: 50, report: (message) => reports.push(message), startNow: true, lookMs: 20 });
    expect(sqlite.pragma('wal_autocheckpoint', { simple: true })).toBe(200);
    await until(() => !checkpoints.running);
    expect(sqlite.pragma('wal_autocheckpoint', { simple: true })).toBe(1000);
    expect(reports).toEqual([expect.stringMatching(/^database: the WAL checkpoint thread failed \(Cannot find module .*no-such-driver.js/)]);
    // Written to fast again, it does not try another.
    const insert = sqlite.prepare('INSERT INTO filler (body) VALUES (?)');
    for (let i = 0; i < 100; i++) insert.run('x'.repeat(3500));
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(checkpoints.starts).toBe(1);
    await checkpoints.stop();
    sqlite.close();
  });

  it('starts a thread only while pages come fast, and stops it once commits stop', async () => {
    const { db } = await openFiller('lazy.db');
    const checkpoints = checkpointInBackground(db, () => undefined, { pages: 50, lookMs: 50, idleStopMs: 300 })!;
    try {
      // A few commits a second: no thread (SQLite checkpoints itself, rarely at that pace).
      for (let i = 0; i < 3; i++) {
        await write(db, 1);
        await new Promise((resolve) => setTimeout(resolve, 60));
      }
      expect(checkpoints.starts).toBe(0);
      expect(await pragma(db, 'wal_autocheckpoint')).toBe(1000);
      // A burst: the thread starts, and the main connection's own threshold goes up.
      await write(db, 100);
      await until(() => checkpoints.running);
      expect(await pragma(db, 'wal_autocheckpoint')).toBe(200);
      // Quiet: it stops, and SQLite's default is back.
      await until(() => !checkpoints.running);
      expect(checkpoints.starts).toBe(1);
      expect(await pragma(db, 'wal_autocheckpoint')).toBe(1000);
    } finally {
      await checkpoints.stop();
      await db.destroy();
    }
  });

  it('does nothing for an in-memory database', () => {
    const db = openDatabase({ path: ':memory:', synchronous: 'full' });
    expect(checkpointInBackground(db, () => undefined)).toBeUndefined();
    void db.destroy();
  });
});
