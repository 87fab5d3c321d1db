/**
 * The bare-SQLite reference: one small insert per transaction, in a loop, with better-sqlite3 in
 * WAL mode, as the server opens its database. Forked by the limits scenario with
 * { path, synchronous, warmupMs, durationMs }; answers with the count, latency summary, CPU and RSS
 * of the measured window.
 */
import { createRequire } from 'node:module';
// The same driver the server loads for this Node (src/storage/database.ts SqliteDriver).
const require = createRequire(import.meta.url);
const Database = require(Number(process.versions.node.split('.')[0]) >= 22 ? 'better-sqlite3' : 'better-sqlite3-node20');
import { summarize } from '../lib/stats.mjs';

process.once('message', ({ path, synchronous, warmupMs, durationMs }) => {
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.pragma(`synchronous = ${synchronous}`);
  db.exec('CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY, room_id TEXT NOT NULL, body TEXT NOT NULL)');
  const insert = db.prepare('INSERT INTO events (room_id, body) VALUES (?, ?)');
  const commitOne = db.transaction((i) => insert.run('!room:bench.local', `{"msgtype":"m.text","body":"message ${i}"}`));
  const body = (until, latencies) => {
    let i = 0;
    while (performance.now() < until) {
      const t = performance.now();
      commitOne(i++);
      latencies?.push(performance.now() - t);
    }
    return i;
  };
  body(performance.now() + warmupMs);
  const latencies = [];
  const cpuFrom = process.cpuUsage();
  const from = performance.now();
  const ops = body(from + durationMs, latencies);
  const wallMs = performance.now() - from;
  const cpu = process.cpuUsage(cpuFrom);
  const cpuMs = (cpu.user + cpu.system) / 1000;
  db.close();
  process.send({ ops, wallMs, latency: summarize(latencies), cpuMs, rssMb: process.memoryUsage().rss / 2 ** 20 }, () => process.exit(0));
});
