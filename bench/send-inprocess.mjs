#!/usr/bin/env node
/**
 * The send path without HTTP, in one process: the compiled services (dist/) on a fresh SQLite
 * file, one room of ten members, and `rooms.send()` (what PUT /send calls: transaction-id lookup,
 * rate limit, room check, the event writer's build, hash, sign, auth rules, insert, commit,
 * notify) one after another, or ten at a time. Prints CPU per send (process.cpuUsage, so it
 * counts this process only: no load generator, no HTTP) and the WAL frames a send's commit
 * writes, and how many sends each group commit carried. Useful to compare two builds
 * alternately on a busy machine, where wall-clock figures are noise; CPU per send is steadier
 * (still ±15% between runs on a loaded 2-core VM: alternate, and compare medians).
 *
 *   node bench/send-inprocess.mjs [--sends 3000] [--concurrency 1] [--synchronous full|normal] [--rounds 3] [--dist DIR] [--postgres URL]
 *
 * --dist runs another build's dist/src (a worktree of the commit to compare with). WAL_PAGES=1 also
 * prints which b-trees the WAL frames of 20 sends belong to (SQLite's dbstat). --postgres URL runs on
 * PostgreSQL instead (a schema of its own, dropped after) and counts the round trips (`pg` queries,
 * BEGIN and COMMIT included) per send; on SQLite it counts the statements run. QUERY_LOG=1 prints
 * the statements of three sends.
 */
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

const { values: args } = parseArgs({
  options: {
    sends: { type: 'string', default: '3000' },
    concurrency: { type: 'string', default: '1' },
    synchronous: { type: 'string', default: 'full' },
    rounds: { type: 'string', default: '3' },
    dist: { type: 'string', default: new URL('../dist/src/', import.meta.url).pathname },
    postgres: { type: 'string' },
  },
});
const sends = Number(args.sends);
const concurrency = Number(args.concurrency);
const dist = new URL(`file://${args.dist.endsWith('/') ? args.dist : `${args.dist}/`}`);
const { finishConfig } = await import(new URL('config/index.js', dist).href);
const { openDatabase, Storage, migrateToLatest } = await import(new URL('storage/index.js', dist).href);
const { createServices } = await import(new URL('services.js', dist).href);
const { systemClock } = await import(new URL('core/clock.js', dist).href);

const dir = mkdtempSync(join(tmpdir(), 'bhs-send-'));
const path = join(dir, 'homeserver.db');
const schema = `bench_inprocess_${process.pid}`;
const config = finishConfig({
  server_name: 'bench.local',
  database: { path, synchronous: args.synchronous, ...(args.postgres ? { url: args.postgres, schema } : {}) },
  ratelimiting_enabled: false,
  password_hashing: { memory_cost_kib: 8, time_cost: 1 },
  bridge: { enabled: false },
  logging: { level: 'warn' },
});
// Every statement `pg` sends is a round trip (Kysely's BEGIN and COMMIT included); on SQLite,
// the statements run.
let roundTrips = 0;
let queryLog;
if (args.postgres) {
  const { createRequire } = await import('node:module');
  const pg = createRequire(new URL('../package.json', dist))('pg');
  const query = pg.Client.prototype.query;
  pg.Client.prototype.query = function (...queryArgs) {
    roundTrips += 1;
    queryLog?.push(typeof queryArgs[0] === 'string' ? queryArgs[0] : queryArgs[0]?.text);
    return query.apply(this, queryArgs);
  };
}
// SQLite: every statement run (BEGIN and COMMIT included), counted on better-sqlite3's Statement.
if (!args.postgres) {
  const { SqliteDriver } = await import(new URL('storage/database.js', dist).href);
  const scratch = new SqliteDriver(':memory:');
  const proto = Object.getPrototypeOf(scratch.prepare('SELECT 1'));
  scratch.close();
  for (const method of ['run', 'all', 'get', 'iterate']) {
    const original = proto[method];
    proto[method] = function (...runArgs) {
      roundTrips += 1;
      queryLog?.push(this.source);
      return original.apply(this, runArgs);
    };
  }
}
const storage = new Storage(openDatabase({ ...config.database, measureQueries: config.metrics.enabled }), { searchIndex: config.enable_search });
try {
  await migrateToLatest(storage.db);
  const services = await createServices(config, storage, systemClock);
  await services.searchIndexer?.start?.();
  const { accounts, sessions, rooms } = services;
  const users = [];
  for (let i = 0; i < 10; i++) {
    await accounts.createUser({ localpart: `sender${i}`, password: `pw-${i}` });
    const session = await sessions.createSession(`@sender${i}:bench.local`);
    users.push({ userId: session.user_id, deviceId: session.device_id, accessTokenId: 0 });
  }
  const roomId = await rooms.createRoom(users[0], { preset: 'public_chat' });
  for (const user of users.slice(1)) await rooms.join(user, roomId);
  const wal = () => {
    try {
      return statSync(`${path}-wal`).size;
    } catch {
      return 0;
    }
  };
  let txn = 0;
  const sendMany = async (n) => {
    let next = 0;
    const loop = async (user) => {
      while (next < n) {
        next += 1;
        await rooms.send(user, roomId, 'm.room.message', `t${txn++}`, { msgtype: 'm.text', body: `message ${txn} of a bot, about this long` });
      }
    };
    await Promise.all(users.slice(0, concurrency).map(loop));
  };
  await sendMany(Math.min(1000, sends)); // warm-up
  if (process.env.QUERY_LOG) {
    queryLog = [];
    await sendMany(3);
    console.log(`statements of 3 sends:\n  ${queryLog.join('\n  ')}`);
    queryLog = undefined;
  }
  // What one send's commit writes: the WAL's growth over 200 sends with checkpoints held off.
  if (!args.postgres) {
    const { sql } = await import('kysely');
    await sql`PRAGMA wal_autocheckpoint = 0`.execute(storage.db);
    await sql`PRAGMA wal_checkpoint(TRUNCATE)`.execute(storage.db);
    const before = wal();
    await sendMany(200);
    console.log(`WAL per send: ${Math.round((wal() - before) / 200)} bytes (${((wal() - before) / 200 / 4120).toFixed(1)} pages of 4 KiB)`);
    if (process.env.WAL_PAGES) {
      // Which b-trees those pages belong to (dbstat), for 20 more sends.
      await sql`PRAGMA wal_checkpoint(TRUNCATE)`.execute(storage.db);
      await sendMany(20);
      const { readFileSync } = await import('node:fs');
      const buf = readFileSync(`${path}-wal`);
      const pageSize = buf.readUInt32BE(8);
      const counts = new Map();
      for (let at = 32; at + 24 + pageSize <= buf.length; at += 24 + pageSize) {
        const page = buf.readUInt32BE(at);
        counts.set(page, (counts.get(page) ?? 0) + 1);
      }
      const { rows } = await sql`SELECT name, pageno FROM dbstat`.execute(storage.db);
      const nameOf = new Map(rows.map((r) => [r.pageno, r.name]));
      const byName = new Map();
      for (const [page, n] of counts) byName.set(nameOf.get(page) ?? `page ${page}`, (byName.get(nameOf.get(page) ?? `page ${page}`) ?? 0) + n);
      console.log('WAL frames over 20 sends by b-tree:', [...byName].sort((a, b) => b[1] - a[1]).map(([k, v]) => `${k} ${v}`).join(', '));
    }
    await sql`PRAGMA wal_autocheckpoint = 1000`.execute(storage.db);
  }
  // Requests per group commit, from the writer's own listener.
  let flushes = 0;
  let flushedRequests = 0;
  services.writer.onFlush((requests) => {
    flushes += 1;
    flushedRequests += requests;
  });
  for (let round = 0; round < Number(args.rounds); round++) {
    flushes = 0;
    flushedRequests = 0;
    const walBefore = wal();
    const tripsBefore = roundTrips;
    const cpu = process.cpuUsage();
    const t0 = performance.now();
    await sendMany(sends);
    const used = process.cpuUsage(cpu);
    const ms = performance.now() - t0;
    const walGrowth = wal() - walBefore;
    console.log(
      `sends ${sends} concurrency ${concurrency} ${args.synchronous}: ${((used.user + used.system) / 1000 / sends).toFixed(3)} ms CPU/send ` +
        `(user ${(used.user / 1000 / sends).toFixed(3)}, system ${(used.system / 1000 / sends).toFixed(3)}), ${(sends / (ms / 1000)).toFixed(0)}/s` +
        `, ${(flushedRequests / Math.max(1, flushes)).toFixed(1)} sends per commit` +
        `, ${((roundTrips - tripsBefore) / sends).toFixed(2)} ${args.postgres ? 'round trips' : 'statements'} per send`,
    );
  }
  await services.searchIndexer?.close?.();
} finally {
  if (args.postgres) {
    const { sql } = await import('kysely');
    await sql.raw(`DROP SCHEMA ${schema} CASCADE`).execute(storage.db).catch(() => undefined);
  }
  await storage.close();
  rmSync(dir, { recursive: true, force: true });
}
