/**
 * Growth: does the server slow down as a bot's world grows? For each size (1 room and nothing
 * else; 1,000 joined rooms; 1,000 rooms and 1 million stored messages), the database is seeded
 * first by bench/seed.mjs (in-process, through the server's own services), then the server is
 * started on it and measures: the bot's initial sync, sequential sends, and incremental syncs
 * (a message is sent into one of the bot's rooms, then the bot's `/sync?since=…&timeout=0` is
 * timed and must carry it).
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { round } from '../lib/server.mjs';
import { summarize } from '../lib/stats.mjs';
import { machineCpuOver, systemCpu } from '../lib/system.mjs';
import { liveChildren, Worker } from '../lib/workers.mjs';

export const name = 'growth';
export const standalone = true;

/** Unmeasured send + sync rounds before the measured ones. */
const WARMUP_ROUNDS = 50;

/** @param {import('../run.mjs').StandaloneContext} ctx */
export async function run(ctx) {
  const results = [];
  for (const size of ctx.settings.growth.sizes) results.push(...(await measureSize(ctx, size)));
  return results;
}

export function sizeLabel({ rooms, events }) {
  const n = (x) => (x >= 1e6 && x % 1e6 === 0 ? `${x / 1e6}M` : x >= 1e4 && x % 1000 === 0 ? `${x / 1000}k` : x.toLocaleString('en-US'));
  return `${n(rooms)} room${rooms === 1 ? '' : 's'}${events ? `, ${n(events)} events` : ''}`;
}

async function measureSize(ctx, size) {
  const label = sizeLabel(size);
  const dir = mkdtempSync(join(ctx.dbDir, 'bhs-bench-growth-'));
  let server;
  try {
    ctx.log(`  seeding ${label}...`);
    const seeded = await seed(ctx, join(dir, 'hs.db'), size);
    ctx.log(`  seeded ${label} in ${seeded.seconds} s`);
    server = await ctx.startServer({ synchronous: 'full', dir });
    const { rounds, initialSyncs } = ctx.settings.growth;
    const worker = await Worker.start('growth');
    try {
      const base = { baseUrl: server.baseUrl, posterToken: seeded.poster.access_token, rooms: seeded.rooms };
      const phase = async (task, args) => {
        const cpuFrom = server.cpuMs();
        const machineFrom = systemCpu();
        const started = performance.now();
        const answer = await worker.run(task, args);
        const wallMs = performance.now() - started;
        const cpuMs = server.cpuMs() - cpuFrom;
        server.assertAlive();
        return { answer, cpuMs, wallMs, machine: machineCpuOver(machineFrom, systemCpu(), wallMs, cpuMs, answer.genCpuMs), memory: server.memory() };
      };
      const row = (variant, samples, p, extra = {}) => ({
        scenario: name,
        variant: `${variant}, ${label}`,
        synchronous: 'full',
        params: { rooms: size.rooms, events: size.events, seeded_events: seeded.events, seed_s: seeded.seconds },
        ops: samples.length,
        latency_ms: summarize(samples),
        errors: p.answer.errors,
        ...(p.answer.errors ? { error_samples: p.answer.errorSamples } : {}),
        server: {
          cpu_ms_per_op: samples.length ? round(p.cpuMs / samples.length, 3) : null,
          cpu_pct: round((p.cpuMs / p.wallMs) * 100, 1),
          rss_mb: p.memory.rssMb,
          rss_hwm_mb: p.memory.hwmMb,
        },
        generator: { cpu_pct: round((p.answer.genCpuMs / p.wallMs) * 100, 1) },
        machine_cpu: p.machine,
        ...extra,
      });

      // A bot starting up: its first sync, cold (first) and again.
      const initial = await phase('growth-initial-sync', { ...base, botToken: seeded.bot.access_token, count: initialSyncs });
      const notes = [];
      if (initial.answer.joinedRooms !== size.rooms) notes.push(`the initial sync listed ${initial.answer.joinedRooms} joined rooms, not ${size.rooms}`);
      const initialRow = row('initial sync', initial.answer.latencies, initial, {
        response_kb: summarize(initial.answer.bytes.map((b) => b / 1024)),
        first_ms: round(initial.answer.latencies[0] ?? NaN),
        ...(notes.length ? { notes } : {}),
      });

      await worker.run('growth-rounds', { ...base, syncToken: seeded.bot.access_token, since: initial.answer.since, count: WARMUP_ROUNDS, offset: 0, tag: `${ctx.runId}-gw` });
      const sends = await phase('growth-rounds', { ...base, count: rounds, offset: WARMUP_ROUNDS, tag: `${ctx.runId}-gs` });
      const sendRow = row('send', sends.answer.sendMs, sends, { rate_per_s: round(sends.answer.sendMs.length / (sends.wallMs / 1000), 1) });

      // The bot's position is taken afresh: the sends above are not part of the next measurement.
      const { since } = await worker.run('growth-rounds', { ...base, syncToken: seeded.bot.access_token, since: initial.answer.since, count: 1, offset: 0, tag: `${ctx.runId}-gp` });
      const syncs = await phase('growth-rounds', { ...base, syncToken: seeded.bot.access_token, since, count: rounds, offset: 0, tag: `${ctx.runId}-gi` });
      // The round's send is part of the server's CPU; take off what a send alone cost just before.
      const sendCpuPerOp = sends.cpuMs / Math.max(1, sends.answer.sendMs.length);
      const syncRow = row('incremental sync', syncs.answer.syncMs, { ...syncs, cpuMs: Math.max(0, syncs.cpuMs - sendCpuPerOp * syncs.answer.sendMs.length) }, {
        send_latency_ms: summarize(syncs.answer.sendMs),
        missed: syncs.answer.missing,
      });
      return [sendRow, syncRow, initialRow];
    } finally {
      worker.kill();
    }
  } finally {
    if (server) await server.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Runs bench/seed.mjs in its own process (it loads the server's code) and returns its JSON line. */
function seed(ctx, dbPath, { rooms, events }) {
  const child = spawn(process.execPath, [join(ctx.repoDir, 'bench/seed.mjs'), '--db', dbPath, '--rooms', String(rooms), '--events', String(events)], {
    cwd: ctx.repoDir,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  liveChildren.add(child);
  const out = [];
  const err = [];
  createInterface({ input: child.stdout }).on('line', (line) => out.push(line));
  createInterface({ input: child.stderr }).on('line', (line) => {
    err.push(line);
    if (line.startsWith('  seeded')) ctx.log(`  ${line.trim()}`);
  });
  return new Promise((resolve, reject) => {
    child.once('exit', (code, signal) => {
      liveChildren.delete(child);
      if (code !== 0) return reject(new Error(`seeding failed (code ${code}, signal ${signal}):\n${err.slice(-20).join('\n')}`));
      try {
        resolve(JSON.parse(out.at(-1)));
      } catch {
        reject(new Error(`seeding printed no JSON:\n${out.slice(-5).join('\n')}`));
      }
    });
  });
}
