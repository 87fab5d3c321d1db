/**
 * Send-to-sync wake latency: user B long-polls /sync; user A sends one message at a time; the
 * time runs from A's send starting to B's sync answer carrying that message. Run once with no
 * other syncs, and once with many idle syncs parked by users who are not in the room (they must
 * neither slow the wake-up down nor be woken themselves).
 */
import { registerUsers, roomWith } from '../lib/setup.mjs';
import { summarize } from '../lib/stats.mjs';
import { openFilesLimit, round } from '../lib/server.mjs';
import { machineCpuOver, systemCpu } from '../lib/system.mjs';
import { Worker } from '../lib/workers.mjs';

export const name = 'sync-wake';

/** Time between B's poll going out and A's send: enough for the poll to park on an idle server. */
const PARK_DELAY_MS = 15;
/** Parked syncs ask for this; wake tests finish well within it, so the idle polls stay parked. */
const IDLE_TIMEOUT_MS = 60_000;
/** Parked syncs opened at a time, each batch accepted by the server before the next. */
const PARK_BATCH = 100;
/** Unmeasured rounds before each measured run. */
const WARMUP_ROUNDS = 50;
/** File descriptors kept free beyond one socket per parked sync (database, pipes, node itself). */
const FD_HEADROOM = 1000;

/** @param {import('../run.mjs').Context} ctx */
export async function run(ctx) {
  const [a, b] = await registerUsers(ctx, 'waker', 2);
  const roomId = await roomWith(ctx, [a, b]);
  const results = [await measure(ctx, roomId, a, b, 0)];
  let parked = ctx.settings.wake.parked;
  if (parked > 0) {
    // Both the generator and the server hold one socket per parked sync.
    const limit = openFilesLimit();
    const notes = [];
    if (parked + FD_HEADROOM > limit) {
      const fitted = Math.max(0, limit - FD_HEADROOM);
      notes.push(`parked syncs lowered from ${parked} to ${fitted}: ulimit -n is ${limit}`);
      ctx.log(`note: ${notes[0]}`);
      parked = fitted;
    }
    if (parked > 0) results.push(await withParkedSyncs(ctx, parked, notes, () => measure(ctx, roomId, a, b, parked, notes)));
  }
  return results;
}

async function withParkedSyncs(ctx, count, notes, work) {
  const server = ctx.server;
  const parker = await Worker.start('parker');
  try {
    const fdsBefore = server.openFds();
    const rssBefore = server.memory().rssMb;
    ctx.log(`  registering ${count} idle users and parking a sync for each...`);
    const registerFrom = performance.now();
    await parker.run('park-register', { baseUrl: server.baseUrl, sharedSecret: ctx.sharedSecret, count, prefix: 'idle', concurrency: 8 });
    const registerMs = performance.now() - registerFrom;
    const parkFrom = performance.now();
    const parkCpuFrom = server.cpuMs();
    await sleep(100); // the registration connections are closing
    const fdsRegistered = server.openFds();
    for (let from = 0; from < count; from += PARK_BATCH) {
      const to = Math.min(count, from + PARK_BATCH);
      const batch = await parker.run('park-batch', { from, to, timeoutMs: IDLE_TIMEOUT_MS });
      if (batch.errors) throw new Error(`parking syncs failed: ${batch.errorSamples.join('; ')}`);
      await untilServerHolds(server, fdsRegistered + to - 20 - Math.ceil(to / 100), 2000);
    }
    // The server holds one socket per parked poll; wait until it has accepted them all.
    // (Allow 1% slack: the baseline may include a connection that has since closed.)
    const enough = count - Math.ceil(count / 100);
    await untilServerHolds(server, fdsBefore + enough, 15_000);
    const heldSockets = server.openFds() - fdsBefore;
    if (heldSockets < enough) notes.push(`server holds only ${heldSockets} more sockets than before parking ${count} syncs`);
    await settle(server);
    const parkMs = performance.now() - parkFrom;
    const parkCpuMs = server.cpuMs() - parkCpuFrom;
    const rssParked = server.memory().rssMb;
    // What the parked polls cost while nothing happens: timers and sockets only, ideally.
    const idleFrom = server.cpuMs();
    await sleep(1000);
    const idleCpuPct = round((server.cpuMs() - idleFrom) / 10, 1);
    ctx.log(`  ${count} syncs parked (registration ${round(registerMs / 1000, 1)} s, parking ${round(parkMs / 1000, 1)} s)`);
    const before = await parker.run('park-status');
    const result = await work();
    const after = await parker.run('park-stop');
    server.assertAlive();
    result.parked = {
      count,
      server_sockets_held: heldSockets,
      register_s: round(registerMs / 1000, 1),
      // From the first poll sent until the server has accepted them all and gone quiet.
      park_s: round(parkMs / 1000, 1),
      server_cpu_ms_per_park: round(parkCpuMs / count, 3),
      server_rss_mb_before: rssBefore,
      server_rss_mb_parked: rssParked,
      server_kb_per_parked_sync: round(((rssParked - rssBefore) * 1024) / count, 1),
      server_idle_cpu_pct: idleCpuPct,
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

async function measure(ctx, roomId, a, b, parkedCount, notes = []) {
  const server = ctx.server;
  const { iterations } = ctx.settings.wake;
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
      tag: `${ctx.runId}-p${parkedCount}`,
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
      scenario: name,
      variant: parkedCount ? `${parkedCount} other syncs parked` : 'no other syncs',
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

async function untilServerHolds(server, fds, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  while (server.openFds() < fds && Date.now() < deadline) await sleep(5);
}

/** Waits (up to 5 s) until the server uses under 5% CPU over 200 ms, i.e. it has finished parking. */
async function settle(server) {
  for (let i = 0; i < 25; i++) {
    const from = server.cpuMs();
    await sleep(200);
    if (server.cpuMs() - from <= 10) return;
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
