/**
 * Idle long-polls: registers `count` users who are in no room and parks one `/sync` for each,
 * from one generator process, and measures what holding them costs the server. Used by the
 * idle-syncs scenario and by sync-wake's parked variant.
 */
import { openFilesLimit, round } from './server.mjs';
import { Worker } from './workers.mjs';

/** Parked syncs ask for this; measurements finish well within it, so the idle polls stay parked. */
export const IDLE_TIMEOUT_MS = 60_000;
/** Parked syncs opened at a time, each batch accepted by the server before the next. */
const PARK_BATCH = 100;

/** File descriptors kept free beyond one socket per parked sync (database, pipes, node itself). */
const FD_HEADROOM = 1000;

/**
 * How many syncs can be parked: both the generator and the server hold one socket per parked
 * sync, so `ulimit -n` caps it. Lowers `count` to fit, with a note saying so.
 */
export function fitToFileLimit(count, notes, log) {
  const limit = openFilesLimit();
  if (count + FD_HEADROOM <= limit) return count;
  const fitted = Math.max(0, limit - FD_HEADROOM);
  notes.push(`parked syncs lowered from ${count} to ${fitted}: ulimit -n is ${limit}`);
  log(`note: ${notes.at(-1)}`);
  return fitted;
}

/**
 * Returns the generator holding the polls (the caller stops it with 'park-stop' and kills it) and
 * `parked`: counts, timings, server RSS before/after and idle CPU. Kills the generator on failure.
 * `quietMs`: how long the server is left alone before each RSS reading (see idle-syncs.mjs).
 */
export async function parkIdleSyncs(ctx, server, count, notes, { quietMs = 0 } = {}) {
  const parker = await Worker.start('parker');
  try {
    const fdsBefore = server.openFds();
    const rssBefore = server.memory().rssMb;
    ctx.log(`  registering ${count} idle users and parking a sync for each...`);
    const registerFrom = performance.now();
    await parker.run('park-register', { baseUrl: server.baseUrl, sharedSecret: ctx.sharedSecret, count, prefix: 'idle', concurrency: 8 });
    const registerMs = performance.now() - registerFrom;
    // Registration alone grows the heap (accounts, tokens, caches); measured apart from parking.
    await settle(server);
    await sleep(quietMs);
    const rssRegistered = server.memory().rssMb;
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
    await sleep(quietMs);
    const memParked = server.memory();
    // What the parked polls cost while nothing happens: timers and sockets only, ideally.
    const idleFrom = server.cpuMs();
    await sleep(1000);
    const idleCpuPct = round((server.cpuMs() - idleFrom) / 10, 1);
    ctx.log(`  ${count} syncs parked (registration ${round(registerMs / 1000, 1)} s, parking ${round(parkMs / 1000, 1)} s)`);
    return {
      parker,
      parked: {
        count,
        server_sockets_held: heldSockets,
        register_s: round(registerMs / 1000, 1),
        // From the first poll sent until the server has accepted them all and gone quiet.
        park_s: round(parkMs / 1000, 1),
        server_cpu_ms_per_park: round(parkCpuMs / count, 3),
        server_rss_mb_before: rssBefore,
        server_rss_mb_registered: rssRegistered,
        server_rss_mb_parked: memParked.rssMb,
        server_rss_hwm_mb: memParked.hwmMb,
        server_kb_per_parked_sync: round(((memParked.rssMb - rssBefore) * 1024) / count, 1),
        server_idle_cpu_pct: idleCpuPct,
      },
    };
  } catch (err) {
    parker.kill();
    throw err;
  }
}

async function untilServerHolds(server, fds, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  while (server.openFds() < fds && Date.now() < deadline) await sleep(5);
}

/** Waits (up to 5 s) until the server uses under 5% CPU over 200 ms, i.e. it has finished its work. */
export async function settle(server) {
  for (let i = 0; i < 25; i++) {
    const from = server.cpuMs();
    await sleep(200);
    if (server.cpuMs() - from <= 10) return;
  }
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
