/**
 * Idle long-polls: what one server process holds. On a fresh server of its own: its RSS once
 * started and quiet, then N users (in no room) each park one `/sync`; reported are RSS before and
 * after parking and per 1,000 parked syncs, the server CPU to park them and while they sit idle.
 *
 * Idle means idle: each RSS reading comes after `quietMs` (15 s in the full run) without traffic.
 * Work just before a reading (start-up, registering users, parking) grows V8's young generation
 * to its 16 MB semi-spaces; about 12 s after the allocation stops, V8's memory reducer gives them
 * back, and RSS drops by 10-30 MB. Read at once, RSS shows that transient instead of what the
 * process holds. The reading right after the work is kept too (`*_at_once`).
 */
import { fitToFileLimit, parkIdleSyncs, settle, sleep } from '../lib/parked.mjs';
import { round } from '../lib/server.mjs';
import { summarize } from '../lib/stats.mjs';

export const name = 'idle-syncs';
/** Runs once on servers of its own, not once per durability mode on the shared one. */
export const standalone = true;

/** @param {import('../run.mjs').StandaloneContext} ctx */
export async function run(ctx) {
  const notes = [];
  const count = fitToFileLimit(ctx.settings.idle.parked, notes, ctx.log);
  const server = await ctx.startServer({ synchronous: 'full' });
  try {
    // A fresh server, started and quiet: what an operator sees before any bot connects.
    await sleep(500);
    await settle(server);
    const freshAtOnce = server.memory();
    const quietMs = ctx.settings.idle.quietMs;
    await sleep(quietMs);
    const fresh = server.memory();
    const { parker, parked } = await parkIdleSyncs({ ...ctx, server }, server, count, notes, { quietMs });
    try {
      const status = await parker.run('park-stop');
      server.assertAlive();
      const mb = (kb) => round(kb, 1);
      return [
        {
          scenario: name,
          variant: `${count} syncs parked`,
          synchronous: 'full',
          params: { parked_syncs: count, timeout_ms: 60_000 },
          ops: count,
          // Nothing here has a latency: the polls just wait. (Parking time is in `parked`.)
          latency_ms: summarize([]),
          errors: status.errors,
          ...(status.errors ? { error_samples: status.errorSamples } : {}),
          server: {
            cpu_ms_per_op: parked.server_cpu_ms_per_park,
            cpu_pct: parked.server_idle_cpu_pct,
            rss_mb: parked.server_rss_mb_parked,
            rss_hwm_mb: parked.server_rss_hwm_mb,
          },
          idle: {
            quiet_s: quietMs / 1000,
            fresh_server_rss_mb_at_once: freshAtOnce.rssMb,
            fresh_server_rss_mb: fresh.rssMb,
            rss_mb_before_parking: parked.server_rss_mb_registered,
            rss_mb_parked: parked.server_rss_mb_parked,
            // Parking alone, after the users were registered (their accounts and tokens are not
            // what a parked poll costs).
            rss_mb_per_1000_parked: mb(((parked.server_rss_mb_parked - parked.server_rss_mb_registered) * 1000) / count),
            early_returns: status.earlyReturns,
          },
          parked: { ...parked, early_returns: status.earlyReturns, errors: status.errors },
          ...(notes.length ? { notes } : {}),
        },
      ];
    } finally {
      parker.kill();
    }
  } finally {
    await server.stop();
  }
}
