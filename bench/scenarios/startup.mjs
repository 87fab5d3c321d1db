/**
 * Start-up: (1) the server process, from spawn to the first 200 from `/_matrix/client/versions`,
 * each run on a fresh database (so migrations are included), median of several runs; (2) the test
 * double, `startTestHomeserver()` to ready in a fresh Node process: the first instance (module
 * loading and compiling included) and further instances in the same process.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { round } from '../lib/server.mjs';
import { summarize } from '../lib/stats.mjs';

export const name = 'startup';
export const standalone = true;

/** Readiness is polled this often (ms), so a start is timed to about this. */
const POLL_MS = 2;

/** @param {import('../run.mjs').StandaloneContext} ctx */
export async function run(ctx) {
  return [await serverProcess(ctx), ...(await testDouble(ctx))];
}

async function serverProcess(ctx) {
  const { processRuns } = ctx.settings.startup;
  const times = [];
  const rss = [];
  const cpu = [];
  for (let i = 0; i < processRuns; i++) {
    // `info` so the server logs its port with `ready` the moment it listens.
    const server = await ctx.startServer({ synchronous: 'full', logLevel: 'info', pollMs: POLL_MS });
    try {
      times.push(server.startMs);
      rss.push(server.memory().rssMb);
      cpu.push(server.cpuMs());
    } finally {
      await server.stop();
    }
  }
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  return {
    scenario: name,
    variant: 'process spawn to first /versions',
    synchronous: 'full',
    params: { runs: processRuns, poll_ms: POLL_MS, fresh_database: true },
    ops: times.length,
    latency_ms: summarize(times),
    errors: 0,
    // CPU used by the whole start (node, modules, migrations), not per request.
    server: { cpu_ms_per_op: median(cpu), cpu_pct: null, rss_mb: median(rss), rss_hwm_mb: null },
  };
}

async function testDouble(ctx) {
  const { testDoubleRounds } = ctx.settings.startup;
  const script = join(ctx.repoDir, 'bench/test-double.mjs');
  const { stdout } = await promisify(execFile)(process.execPath, [script, String(testDoubleRounds), '--json'], { cwd: ctx.repoDir, maxBuffer: 1 << 20 });
  const t = JSON.parse(stdout.trim().split('\n').at(-1));
  const row = (variant, samples, extra = {}) => ({
    scenario: name,
    variant,
    synchronous: 'memory',
    params: { rounds: testDoubleRounds, in_memory_database: true },
    ops: samples.length,
    latency_ms: summarize(samples),
    errors: 0,
    // The test double runs inside the test's process: its RSS at the end, and its CPU per round.
    server: { cpu_ms_per_op: round(t.cpu_ms / (testDoubleRounds + 1), 1), cpu_pct: null, rss_mb: round(t.rss_mb, 1), rss_hwm_mb: null },
    ...extra,
  });
  return [
    row('startTestHomeserver, first in a process', [t.first_start_ms], { import_ms: round(t.import_ms, 1) }),
    row('startTestHomeserver, further instances', t.start),
    row('test double reset()', t.reset),
  ];
}
