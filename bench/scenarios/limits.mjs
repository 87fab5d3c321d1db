/**
 * The limits of this machine, measured in the same run for reference: a bare Fastify route under
 * the same generators and concurrency as send-throughput's 10 senders (and its one sequential
 * sender), and a bare better-sqlite3
 * loop of one small insert per transaction (WAL; synchronous FULL and NORMAL), each in a child
 * process of its own. The report gives send throughput as a fraction of them. The bare route is
 * also timed in the wake scenario's rhythm (one request after each 15 ms of silence): what any
 * request costs on this machine once both processes have gone idle, the floor under wake latency.
 */
import { fork } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { closedLoop } from '../lib/load.mjs';
import { processCpuMs, processMemory, round } from '../lib/server.mjs';
import { summarize } from '../lib/stats.mjs';
import { Worker } from '../lib/workers.mjs';
import { liveChildren } from '../lib/workers.mjs';
import { messageTarget } from './send-throughput.mjs';
import { PARK_DELAY_MS } from './sync-wake.mjs';

export const name = 'limits';
export const standalone = true;

/** @param {import('../run.mjs').StandaloneContext} ctx */
export async function run(ctx) {
  // One after another: each reference should have the machine to itself, as our server does.
  const results = [...(await bareFastify(ctx))];
  for (const synchronous of ['FULL', 'NORMAL']) results.push(await bareSqlite(ctx, synchronous));
  return results;
}

async function bareFastify(ctx) {
  const child = spawnChild(join(ctx.repoDir, 'bench/limits/bare-fastify.mjs'));
  try {
    const { port } = await nextMessage(child);
    const pid = child.pid;
    const server = {
      baseUrl: `http://127.0.0.1:${port}`,
      cpuMs: () => processCpuMs(pid),
      memory: () => processMemory(pid),
      assertAlive: () => {
        if (child.exitCode !== null || child.signalCode !== null) throw new Error('the bare Fastify server exited during the run');
      },
    };
    const { warmupMs, durationMs } = ctx.settings.send;
    const measured = await closedLoop({
      server,
      // The same PUT path and body as a message send; the answer is {hello: 'world'}.
      target: { ...messageTarget('!bare:bench.local'), expect: 'hello' },
      tokens: Array.from({ length: 10 }, () => 'bare'),
      processes: 2,
      sendersPerProcess: 5,
      warmupMs,
      durationMs,
      tag: `${ctx.runId}-bare`,
    });
    const concurrent = { scenario: name, variant: 'bare Fastify route, 10 concurrent senders', synchronous: '–', ...measured };
    // One sender back to back, as send-throughput's sequential variant: what a request costs when
    // the server has one at a time (it sleeps between them), the floor under a sequential send.
    const sequential = {
      scenario: name,
      variant: 'bare Fastify route, 1 sequential sender',
      synchronous: '–',
      ...(await closedLoop({
        server,
        target: { ...messageTarget('!bare:bench.local'), expect: 'hello' },
        tokens: ['bare'],
        processes: 1,
        sendersPerProcess: 1,
        warmupMs,
        durationMs,
        tag: `${ctx.runId}-bare-seq`,
      })),
    };
    return [concurrent, sequential, await afterSilence(ctx, server, pid)];
  } finally {
    child.kill('SIGKILL');
  }
}

/** One request after each PARK_DELAY_MS of silence, as the wake scenario sends its messages. */
async function afterSilence(ctx, server, pid) {
  const worker = await Worker.start('bare-idle');
  try {
    const count = ctx.settings.wake.iterations;
    const cpuFrom = processCpuMs(pid);
    const started = performance.now();
    const answer = await worker.run('idle-requests', {
      baseUrl: server.baseUrl,
      path: `${messageTarget('!bare:bench.local').path}${ctx.runId}-idle-`,
      count,
      gapMs: PARK_DELAY_MS,
    });
    const wallMs = performance.now() - started;
    const cpuMs = processCpuMs(pid) - cpuFrom;
    return {
      scenario: name,
      variant: `bare Fastify route, one request after each ${PARK_DELAY_MS} ms of silence`,
      synchronous: '–',
      params: { requests: count, silence_ms: PARK_DELAY_MS },
      ops: answer.latencies.length,
      latency_ms: summarize(answer.latencies),
      errors: answer.errors,
      ...(answer.errors ? { error_samples: answer.errorSamples } : {}),
      server: { cpu_ms_per_op: answer.latencies.length ? round(cpuMs / (answer.latencies.length + 20), 3) : null, cpu_pct: round((cpuMs / wallMs) * 100, 1), rss_mb: server.memory().rssMb, rss_hwm_mb: null },
      generator: { cpu_pct: round((answer.genCpuMs / wallMs) * 100, 1) },
    };
  } finally {
    worker.kill();
  }
}

async function bareSqlite(ctx, synchronous) {
  const dir = mkdtempSync(join(ctx.dbDir, 'bhs-bench-sqlite-'));
  const child = spawnChild(join(ctx.repoDir, 'bench/limits/bare-sqlite.mjs'));
  try {
    const { warmupMs, durationMs } = ctx.settings.limits.sqlite;
    child.send({ path: join(dir, 'bare.db'), synchronous, warmupMs, durationMs });
    const r = await nextMessage(child);
    return {
      scenario: name,
      variant: `bare SQLite insert transaction, synchronous=${synchronous}`,
      synchronous: synchronous.toLowerCase(),
      params: { warmup_s: warmupMs / 1000, duration_s: durationMs / 1000, journal_mode: 'wal', inserts_per_transaction: 1 },
      ops: r.ops,
      rate_per_s: round(r.ops / (r.wallMs / 1000), 1),
      latency_ms: r.latency,
      errors: 0,
      server: { cpu_ms_per_op: round(r.cpuMs / r.ops, 4), cpu_pct: round((r.cpuMs / r.wallMs) * 100, 1), rss_mb: round(r.rssMb, 1), rss_hwm_mb: null },
    };
  } finally {
    child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }
}

function spawnChild(script) {
  const child = fork(script, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  liveChildren.add(child);
  child.once('exit', () => liveChildren.delete(child));
  return child;
}

function nextMessage(child) {
  return new Promise((resolve, reject) => {
    const onExit = (code, signal) => reject(new Error(`${child.spawnfile} exited (code ${code}, signal ${signal}) before answering`));
    child.once('exit', onExit);
    child.once('message', (msg) => {
      child.off('exit', onExit);
      resolve(msg);
    });
  });
}
