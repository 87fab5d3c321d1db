#!/usr/bin/env node
/**
 * `npm run bench [-- --quick]`: starts bot-homeserver as its own process on a fresh database,
 * drives it from forked generator processes over loopback, prints a Markdown table and writes
 * bench/results/<date-time>.json. See bench/README.md.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { renderChart } from './chart.mjs';
import { CLK_TCK, filesystemOf, liveServers, openFilesLimit, round, startServer } from './lib/server.mjs';
import { fsyncProbe } from './lib/system.mjs';
import { evaluateTargets, referenceComparisons } from './lib/targets.mjs';
import { killAllWorkers } from './lib/workers.mjs';
import * as feedParse from './scenarios/feed-parse.mjs';
import * as federation from './scenarios/federation.mjs';
import * as growth from './scenarios/growth.mjs';
import * as appservice from './scenarios/appservice.mjs';
import * as e2eKeys from './scenarios/e2e-keys.mjs';
import * as idleSyncs from './scenarios/idle-syncs.mjs';
import * as limits from './scenarios/limits.mjs';
import * as processes from './scenarios/processes.mjs';
import * as sendThroughput from './scenarios/send-throughput.mjs';
import * as startup from './scenarios/startup.mjs';
import * as syncWake from './scenarios/sync-wake.mjs';
import * as webhook from './scenarios/webhook.mjs';

/**
 * Every scenario: `{ name, run(ctx) -> result objects }`, in the order they run. Add new ones
 * here. Those without `standalone` run once per durability mode against one shared server; the
 * standalone ones run once, after them, and start the servers they need (`ctx.startServer`).
 */
const SCENARIOS = [sendThroughput, syncWake, webhook, idleSyncs, e2eKeys, startup, growth, appservice, feedParse, federation, limits, processes];

const BENCH_DIR = dirname(fileURLToPath(import.meta.url));
const REPO_DIR = resolve(BENCH_DIR, '..');

const MODES = {
  quick: {
    send: { warmupMs: 1000, durationMs: 3000 },
    wake: { iterations: 100, parked: 1000 },
    webhook: { warmupMs: 500, durationMs: 2000, iterations: 100 },
    idle: { parked: 1000, quietMs: 0 },
    startup: { processRuns: 2, testDoubleRounds: 3 },
    growth: { sizes: [{ rooms: 1, events: 0 }, { rooms: 100, events: 50_000 }], rounds: 100, initialSyncs: 3 },
    limits: { sqlite: { warmupMs: 100, durationMs: 500 } },
    federation: { wakeIterations: 100, transactions: 10, hostileTransactions: 3, bigRoom: { members: 100, events: 5_000 } },
    appservice: { iterations: 100, burst: 1_000, concurrency: 8 },
    e2eKeys: { iterations: 50 },
    synchronous: ['full'],
  },
  full: {
    send: { warmupMs: 2000, durationMs: 20000 },
    wake: { iterations: 500, parked: 10000 },
    webhook: { warmupMs: 1000, durationMs: 10000, iterations: 500 },
    idle: { parked: 10000, quietMs: 15_000 },
    startup: { processRuns: 5, testDoubleRounds: 20 },
    growth: {
      sizes: [{ rooms: 1, events: 0 }, { rooms: 1000, events: 0 }, { rooms: 1000, events: 1_000_000 }],
      rounds: 500,
      initialSyncs: 5,
    },
    limits: { sqlite: { warmupMs: 1000, durationMs: 5000 } },
    federation: { wakeIterations: 500, transactions: 50, hostileTransactions: 10, bigRoom: { members: 1_000, events: 100_000 } },
    appservice: { iterations: 500, burst: 10_000, concurrency: 8 },
    e2eKeys: { iterations: 200 },
    synchronous: ['full', 'normal'],
  },
};

/**
 * @typedef {object} Context
 * @property {import('./lib/server.mjs').Server} server
 * @property {'full'|'normal'} synchronous
 * @property {string} sharedSecret
 * @property {string} runId
 * @property {typeof MODES.full} settings
 * @property {(line: string) => void} log
 */

/**
 * What a standalone scenario gets: no shared server, but `startServer(options)` (options as
 * lib/server.mjs's startServer, minus what the run decides) and where databases go.
 * @typedef {object} StandaloneContext
 * @property {(options: object) => Promise<import('./lib/server.mjs').Server>} startServer
 * @property {string} sharedSecret
 * @property {string} runId
 * @property {typeof MODES.full} settings
 * @property {string} dbDir
 * @property {string} repoDir
 * @property {string | undefined} postgres the --postgres URL, if given
 * @property {(line: string) => void} log
 */

const USAGE = `usage: node bench/run.mjs [--quick] [--synchronous full|normal|both] [--parked N]
                         [--only SCENARIO] [--db-dir DIR] [--cpu-prof DIR] [--no-save]
                         [--postgres URL]
  --quick        short windows, 1,000 parked syncs, growth to 100 rooms and 50k events,
                 synchronous=full only (under a minute)
  --synchronous  database.synchronous for the shared-server scenarios (default: both in full
                 mode, full in quick mode); standalone ones run once with the default, full
  --parked N     idle syncs parked by sync-wake and idle-syncs (0 skips sync-wake's parked run)
  --only NAME    run one scenario: ${SCENARIOS.map((s) => s.name).join(', ')}
  --db-dir DIR   where the fresh database directory goes (default: the OS temp dir)
  --cpu-prof DIR write a V8 CPU profile of the server to DIR (open it in Chrome DevTools)
  --no-save      print the table only; write no file to bench/results/
  --postgres URL also run the shared-server scenarios on PostgreSQL (a schema of the run's own,
                 dropped after), labelled "postgres" in the sync column, and the "processes"
                 scenario: one server as 1 and as 2 processes on that database`;

async function main() {
  const { values: args } = parseArgs({
    options: {
      quick: { type: 'boolean', default: false },
      synchronous: { type: 'string' },
      parked: { type: 'string' },
      only: { type: 'string' },
      'db-dir': { type: 'string' },
      'cpu-prof': { type: 'string' },
      'no-save': { type: 'boolean', default: false },
      postgres: { type: 'string' },
      help: { type: 'boolean', default: false },
    },
  });
  if (args.help) {
    console.log(USAGE);
    return;
  }
  const mode = args.quick ? 'quick' : 'full';
  const settings = structuredClone(MODES[mode]);
  if (args.synchronous) {
    if (!['full', 'normal', 'both'].includes(args.synchronous)) throw new UsageError('--synchronous must be full, normal or both');
    settings.synchronous = args.synchronous === 'both' ? ['full', 'normal'] : [args.synchronous];
  }
  if (args.parked !== undefined) {
    if (!/^\d+$/.test(args.parked)) throw new UsageError('--parked must be a whole number');
    settings.wake.parked = Number(args.parked);
    settings.idle.parked = Math.max(1, Number(args.parked));
  }
  const scenarios = args.only ? SCENARIOS.filter((s) => s.name === args.only) : SCENARIOS;
  if (scenarios.length === 0) throw new UsageError(`no scenario named ${args.only}`);
  const dbDir = args['db-dir'] ? resolve(args['db-dir']) : os.tmpdir();

  checkBuild();
  const startedAt = new Date();
  const machine = machineInfo(dbDir);
  const log = (line) => console.error(line);
  log(`bot-homeserver bench, ${mode} mode, synchronous=${settings.synchronous.join(',')}, ${machine.cpus}x ${machine.cpu_model}`);
  if (machine.load_avg_1m_at_start > 0.5) log(`warning: the machine is already busy (load average ${machine.load_avg_1m_at_start}); results will be noisy`);

  const results = [];
  const serverErrors = [];
  let serverWarnings = 0;
  let serverErrorCount = 0;
  const nodeArgs = args['cpu-prof'] ? ['--cpu-prof', '--cpu-prof-interval=100', `--cpu-prof-dir=${resolve(args['cpu-prof'])}`] : [];
  const collectLog = (server, label) => {
    serverErrors.push(...server.errorLines.map((line) => ({ synchronous: label, line })));
    serverWarnings += server.warnCount;
    serverErrorCount += server.errorCount;
  };
  const runScenario = async (scenario, ctx) => {
    log(`- ${scenario.name}`);
    const started = performance.now();
    for (const result of await scenario.run(ctx)) {
      results.push(result);
      log(`  ${result.variant}: ${oneLine(result)}`);
      if (result.error_samples?.length) log(`    first error: ${result.error_samples[0]}`);
    }
    log(`  (${scenario.name}: ${round((performance.now() - started) / 1000, 1)} s)`);
  };

  const shared = scenarios.filter((s) => !s.standalone);
  const databases = [...settings.synchronous, ...(args.postgres ? ['postgres'] : [])];
  for (const synchronous of shared.length ? databases : []) {
    const sharedSecret = randomBytes(24).toString('base64url');
    const onPostgres = synchronous === 'postgres' ? { postgres: args.postgres, synchronous: 'full' } : {};
    const server = await startServer({ repoDir: REPO_DIR, synchronous, sharedSecret, dbDir, nodeArgs, ...onPostgres });
    log(`server pid ${server.pid} on ${server.baseUrl} (synchronous=${synchronous})`);
    /** @type {Context} */
    const ctx = { server, synchronous, sharedSecret, runId: randomBytes(3).toString('hex'), settings, log };
    try {
      for (const scenario of shared) await runScenario(scenario, ctx);
    } finally {
      collectLog(server, synchronous);
      await server.stop();
    }
  }

  for (const scenario of scenarios.filter((s) => s.standalone)) {
    const sharedSecret = randomBytes(24).toString('base64url');
    const started = [];
    /** @type {StandaloneContext} */
    const ctx = {
      startServer: async (options) => {
        const server = await startServer({ repoDir: REPO_DIR, sharedSecret, dbDir, nodeArgs, ...options });
        started.push(server);
        return server;
      },
      sharedSecret,
      runId: randomBytes(3).toString('hex'),
      settings,
      dbDir,
      repoDir: REPO_DIR,
      postgres: args.postgres,
      log,
    };
    try {
      await runScenario(scenario, ctx);
    } finally {
      for (const server of started) {
        collectLog(server, scenario.name);
        await server.stop();
      }
    }
  }

  const finishedAt = new Date();
  const targets = evaluateTargets(results, settings);
  const comparisons = referenceComparisons(results);
  console.log(markdown(results, mode, machine, targets, comparisons));
  if (serverErrors.length) {
    console.log(`\n**The server logged ${serverErrorCount} error line(s)** (first shown):\n\n\`\`\`\n${serverErrors[0].line}\n\`\`\``);
  }
  if (!args['no-save']) {
    const report = {
      bench: 'bot-homeserver',
      format: 1,
      mode,
      started_at: startedAt.toISOString(),
      duration_s: round((finishedAt - startedAt) / 1000, 1),
      machine,
      settings,
      results,
      comparisons,
      targets,
      server_log: { warn_lines: serverWarnings, error_lines: serverErrorCount, first_errors: serverErrors.slice(0, 5) },
    };
    const dir = join(BENCH_DIR, 'results');
    mkdirSync(dir, { recursive: true });
    const file = join(dir, `${startedAt.toISOString().replace(/[:.]/g, '-')}.json`);
    writeFileSync(file, `${JSON.stringify(report, null, 2)}\n`);
    log(`wrote ${relative(process.cwd(), file)}`);
    // The chart follows complete runs only: a partial one would replace it with a few bars.
    if (!args.only) {
      const svg = join(dir, 'latest.svg');
      writeFileSync(svg, renderChart(report));
      log(`wrote ${relative(process.cwd(), svg)} (re-render any results file with: node bench/chart.mjs FILE)`);
    }
  }
  const failures = results.reduce((n, r) => n + (r.errors ?? 0) + (r.missed ?? 0), 0);
  if (failures || serverErrorCount) {
    log(`bench finished with ${failures} failed request(s) and ${serverErrorCount} server error line(s); see the table and the JSON.`);
    process.exitCode = 1;
  }
}

class UsageError extends Error {}

/** dist/ is what runs; a stale one would benchmark old code. */
function checkBuild() {
  const marker = join(REPO_DIR, 'dist/src/main.js');
  if (!existsSync(marker)) throw new UsageError('dist/ is missing: run `npm run build` first');
  // `npm run bench` rebuilds a stale dist/ first (the prebench script, bin/ensure-build.js).
}

function machineInfo(dbDir) {
  const cpus = os.cpus();
  const git = (...a) => {
    try {
      return execFileSync('git', a, { cwd: REPO_DIR, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    } catch {
      return null;
    }
  };
  const status = git('status', '--porcelain', '--', 'src', 'migrations', 'bin');
  return {
    cpu_model: cpus[0]?.model ?? 'unknown',
    cpus: cpus.length,
    total_mem_mb: Math.round(os.totalmem() / 2 ** 20),
    os: `${os.type()} ${os.release()} ${os.arch()}`,
    node: process.version,
    git_commit: git('rev-parse', '--short', 'HEAD'),
    // Uncommitted changes to the server's code mean the commit alone does not say what ran.
    git_dirty: status === null ? null : status.length > 0,
    db_filesystem: filesystemOf(dbDir),
    // Every commit with synchronous=full waits for one of these (and blocks the server meanwhile).
    db_fsync_ms: fsyncProbe(dbDir),
    // Work already running before the bench started (1-minute average of runnable processes).
    load_avg_1m_at_start: round(os.loadavg()[0], 2),
    clk_tck: CLK_TCK,
    open_files_limit: openFilesLimit(),
  };
}

/** Above this, "other CPU %" means someone else was using the machine during a row. */
const NOISY_OTHER_PCT = 25;

const fmt = (x, digits = 2) => (x === null || x === undefined ? '–' : Number(x).toFixed(digits));

function oneLine(r) {
  const rate = r.rate_per_s !== undefined ? `${r.rate_per_s} ops/s, ` : '';
  const latency = r.latency_ms.n ? `p50 ${fmt(r.latency_ms.p50)} ms, p99 ${fmt(r.latency_ms.p99)} ms, ` : '';
  return `${rate}${latency}RSS ${fmt(r.server.rss_mb, 0)} MB, ${r.errors} errors`;
}

function markdown(results, mode, machine, targets, comparisons) {
  const lines = [
    `### bot-homeserver bench (${mode}), ${machine.cpus}x ${machine.cpu_model}, node ${machine.node}, ${machine.git_commit ?? 'no git'}${machine.git_dirty ? '+dirty' : ''}`,
    '',
    `CPU % columns are percent of one core (the machine has ${machine.cpus}); "other" is CPU used by anything but the server and the generators. fsync (4 KiB + fdatasync) where the database lives: p50 ${machine.db_fsync_ms.p50} ms, p99 ${machine.db_fsync_ms.p99} ms (${machine.db_filesystem}).`,
    '',
    '| scenario | variant | sync | ops | ops/s | p50 ms | p90 ms | p99 ms | max ms | server CPU ms/op | server CPU % | server RSS MB | generator CPU % | other CPU % | errors |',
    '|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|',
  ];
  for (const r of results) {
    const l = r.latency_ms;
    const errors = (r.errors ?? 0) + (r.missed ? ` (+${r.missed} missed)` : '');
    lines.push(
      `| ${r.scenario} | ${r.variant} | ${r.synchronous} | ${r.ops} | ${r.rate_per_s ?? '–'} | ${fmt(l.p50)} | ${fmt(l.p90)} | ${fmt(l.p99)} | ${fmt(l.max)} | ${fmt(r.server.cpu_ms_per_op, 3)} | ${fmt(r.server.cpu_pct, 0)} | ${fmt(r.server.rss_mb, 0)} | ${fmt(r.generator?.cpu_pct, 0)} | ${fmt(r.machine_cpu?.other_pct, 0)} | ${errors} |`,
    );
  }
  const notes = [];
  for (const r of results) {
    if (r.parked && !r.idle) {
      const p = r.parked;
      notes.push(
        `- ${r.scenario} (${r.synchronous}), ${p.count} parked syncs: parking took ${p.park_s} s at ${p.server_cpu_ms_per_park} ms server CPU each; server RSS ${p.server_rss_mb_before} → ${p.server_rss_mb_parked} MB (${p.server_kb_per_parked_sync} KB each); idle CPU ${p.server_idle_cpu_pct}%; spurious wake-ups ${p.early_returns}; re-polls during the measurement ${p.returns_during_measurement}; parked-sync errors ${p.errors}`,
      );
    }
    if (r.idle) {
      const i = r.idle;
      notes.push(
        `- ${r.scenario}: a fresh, quiet server holds ${i.fresh_server_rss_mb} MB RSS${i.quiet_s ? ` (each reading after ${i.quiet_s} s without traffic; ${i.fresh_server_rss_mb_at_once} MB right after start)` : ''}; with ${r.params.parked_syncs} syncs parked ${i.rss_mb_parked} MB (${i.rss_mb_before_parking} MB once their users were registered, so ${i.rss_mb_per_1000_parked} MB per 1,000 parked); ${r.parked.park_s} s to park them; idle CPU ${r.server.cpu_pct}%`,
      );
    }
    if (r.import_ms !== undefined) notes.push(`- ${r.scenario} / ${r.variant}: importing bot-homeserver/testing took ${fmt(r.import_ms, 0)} ms before it`);
    if (r.response_kb) notes.push(`- ${r.scenario} / ${r.variant}: answer ${fmt(r.response_kb.p50, 0)} KB; the first (cold) one took ${fmt(r.first_ms)} ms`);
    for (const n of r.notes ?? []) notes.push(`- ${r.scenario} / ${r.variant} (${r.synchronous}): ${n}`);
  }
  for (const c of comparisons) notes.push(`- ${c.text}`);
  const noisy = results.filter((r) => (r.machine_cpu?.other_pct ?? 0) > NOISY_OTHER_PCT);
  if (noisy.length) {
    notes.push(
      `- **Noisy:** ${noisy.length} of ${results.length} rows ran while other processes used more than ${NOISY_OTHER_PCT}% of a core (column "other CPU %"); with 2 cores that takes CPU from the server. Rerun on a quiet machine before comparing them.`,
    );
  }
  if (notes.length) lines.push('', ...notes);
  if (targets.length) {
    lines.push('', '| target | measured | met |', '|---|---|---|');
    for (const t of targets) lines.push(`| ${t.target} | ${t.measured} | ${t.met === null ? 'n/a' : t.met ? 'yes' : '**no**'} |`);
  }
  return lines.join('\n');
}

/** Kill the server and every generator however the run ends. */
function cleanupNow() {
  killAllWorkers();
  for (const server of [...liveServers]) server.killNow();
}
process.on('exit', cleanupNow);
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(signal, () => {
    console.error(`\nbench: ${signal}, stopping the server and the generators`);
    cleanupNow();
    process.exit(130);
  });
}

main().then(
  () => {
    killAllWorkers();
  },
  (err) => {
    cleanupNow();
    console.error(`bench failed: ${err instanceof UsageError ? `${err.message}\n${USAGE}` : (err?.stack ?? err)}`);
    process.exit(1);
  },
);
