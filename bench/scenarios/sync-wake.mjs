/**
 * Send-to-sync wake latency: user B long-polls /sync; user A sends one message at a time; the
 * time runs from A's send starting to B's sync answer carrying that message. Run once with no
 * other syncs, and once with many idle syncs parked by users who are not in the room (they must
 * neither slow the wake-up down nor be woken themselves).
 */
import { registerUsers, roomWith } from '../lib/setup.mjs';
import { summarize } from '../lib/stats.mjs';
import { fitToFileLimit, parkIdleSyncs } from '../lib/parked.mjs';
import { round } from '../lib/server.mjs';
import { machineCpuOver, systemCpu } from '../lib/system.mjs';
import { Worker } from '../lib/workers.mjs';

export const name = 'sync-wake';

/** Time between B's poll going out and A's send: enough for the poll to park on an idle server. */
export const PARK_DELAY_MS = 15;
/** Unmeasured rounds before each measured run. */
const WARMUP_ROUNDS = 50;

/** @param {import('../run.mjs').Context} ctx */
export async function run(ctx) {
  const [a, b] = await registerUsers(ctx, 'waker', 2);
  const roomId = await roomWith(ctx, [a, b]);
  const results = [await measure(ctx, roomId, a, b, 0)];
  if (ctx.settings.wake.parked > 0) {
    const notes = [];
    const parked = fitToFileLimit(ctx.settings.wake.parked, notes, ctx.log);
    if (parked > 0) results.push(await withParkedSyncs(ctx, parked, notes, () => measure(ctx, roomId, a, b, parked, notes)));
  }
  return results;
}

async function withParkedSyncs(ctx, count, notes, work) {
  const server = ctx.server;
  const { parker, parked } = await parkIdleSyncs(ctx, server, count, notes);
  try {
    const before = await parker.run('park-status');
    const result = await work();
    const after = await parker.run('park-stop');
    server.assertAlive();
    result.parked = {
      ...parked,
      // Idle users are in no room: any answer before their timeout is a spurious wake-up.
      early_returns: after.earlyReturns,
      returns_during_measurement: after.returns - before.returns,
      errors: after.errors,
      ...(after.errors ? { error_samples: after.errorSamples } : {}),
    };
    if (after.earlyReturns) notes.push(`${after.earlyReturns} parked syncs of users in no room returned before their timeout`);
    if (notes.length) result.notes = notes;
    return result;
  } finally {
    parker.kill();
  }
}

/**
 * Runs the wake rounds and returns a result row. `options` lets the webhook scenario reuse it:
 * `webhookPath` posts each message to a webhook instead of A sending it.
 */
export async function measure(ctx, roomId, a, b, parkedCount, notes = [], options = {}) {
  const server = ctx.server;
  const iterations = options.iterations ?? ctx.settings.wake.iterations;
  const worker = await Worker.start(`wake-${parkedCount}`);
  try {
    const args = {
      baseUrl: server.baseUrl,
      roomId,
      senderToken: a.access_token,
      syncerToken: b.access_token,
      warmup: 0,
      iterations,
      parkDelayMs: PARK_DELAY_MS,
      tag: `${ctx.runId}-p${parkedCount}${options.webhookPath ? '-hook' : ''}`,
      webhookPath: options.webhookPath,
      encrypted: options.encrypted,
    };
    // Warm-up rounds apart from the measured ones, so the server CPU counted is theirs alone.
    await worker.run('wake-latency', { ...args, iterations: 0, warmup: WARMUP_ROUNDS, tag: `${args.tag}-warmup` });
    const cpuFrom = server.cpuMs();
    const machineFrom = systemCpu();
    const started = performance.now();
    const answer = await worker.run('wake-latency', args);
    const cpuMs = server.cpuMs() - cpuFrom;
    const machineTo = systemCpu();
    const wallMs = performance.now() - started;
    const memory = server.memory();
    server.assertAlive();
    if (answer.missed) notes.push(`${answer.missed} messages did not reach the long-polling sync (it stops after 3)`);
    if (answer.extraPolls) notes.push(`${answer.extraPolls} sync answers after a send did not carry the message`);
    return {
      scenario: options.scenario ?? name,
      variant: options.variant ?? (parkedCount ? `${parkedCount} other syncs parked` : 'no other syncs'),
      synchronous: ctx.synchronous,
      params: { iterations, warmup_rounds: WARMUP_ROUNDS, park_delay_ms: PARK_DELAY_MS, parked_syncs: parkedCount },
      ops: answer.wake.length,
      latency_ms: summarize(answer.wake),
      send_latency_ms: summarize(answer.send),
      errors: answer.errors,
      ...(answer.errors ? { error_samples: answer.errorSamples } : {}),
      missed: answer.missed,
      early_returns: answer.earlyReturns,
      server: {
        cpu_ms_per_op: answer.wake.length ? round(cpuMs / answer.wake.length, 3) : null,
        cpu_pct: round((cpuMs / wallMs) * 100, 1),
        rss_mb: memory.rssMb,
        rss_hwm_mb: memory.hwmMb,
      },
      generator: { cpu_pct: round((answer.genCpuMs / wallMs) * 100, 1) },
      // The parked syncs' generator is idle meanwhile; its little time counts as "other".
      machine_cpu: machineCpuOver(machineFrom, machineTo, wallMs, cpuMs, answer.genCpuMs),
      ...(notes.length ? { notes } : {}),
    };
  } finally {
    worker.kill();
  }
}

