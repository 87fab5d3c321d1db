/**
 * One server as two processes on one PostgreSQL database (`--postgres URL` only; skipped
 * otherwise), next to one process on the same database, in the same run:
 * - send throughput: 10 senders in one room, spread over the processes (each generator process
 *   talks to one server process, as a load balancer would spread clients);
 * - many rooms: 100 bots, each sending into a room of its own (100 rooms), through one process
 *   and spread over two: rooms that share nothing, where two processes can work side by side
 *   (the one-room variant is serialized by design);
 * - wake latency: a user long-polls one process, another sends through the other; from the send
 *   starting to the sync answer carrying it (the commit's notification crossing PostgreSQL).
 */
import { mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import { closedLoop } from '../lib/load.mjs';
import { registerUsers, roomWith } from '../lib/setup.mjs';
import { summarize } from '../lib/stats.mjs';
import { round } from '../lib/server.mjs';
import { Worker } from '../lib/workers.mjs';
import { messageTarget } from './send-throughput.mjs';

export const name = 'processes';

/** Bots (and rooms, one each) of the many-rooms variants. */
const MANY_ROOMS = 100;
export const standalone = true;

/** @param {import('../run.mjs').StandaloneContext} ctx */
export async function run(ctx) {
  if (!ctx.postgres) {
    ctx.log('  (needs --postgres: skipped)');
    return [];
  }
  // Both processes share the schema, the signing key and the media store (the same directory).
  const dir = mkdtempSync(join(ctx.dbDir, 'bhs-bench-processes-'));
  const a = await ctx.startServer({ synchronous: 'full', postgres: ctx.postgres, dir });
  const b = await ctx.startServer({ synchronous: 'full', postgres: ctx.postgres, postgresSchema: a.postgresSchema, dir });
  const senders = await registerUsers({ server: a, sharedSecret: ctx.sharedSecret }, 'psender', 10);
  const roomId = await roomWith({ server: a }, senders);
  const [waker, sleeper] = await registerUsers({ server: a, sharedSecret: ctx.sharedSecret }, 'pwaker', 2);
  const wakeRoom = await roomWith({ server: a }, [waker, sleeper]);
  const results = [];
  for (const [variant, servers] of [['10 senders, 1 process', [a]], ['10 senders over 2 processes', [a, b]]]) {
    const { warmupMs, durationMs } = ctx.settings.send;
    const measured = await closedLoop({
      server: a,
      servers,
      target: messageTarget(roomId),
      tokens: senders.map((user) => user.access_token),
      processes: 2,
      sendersPerProcess: 5,
      warmupMs,
      durationMs,
      tag: `${ctx.runId}-${servers.length}p`,
    });
    results.push({ scenario: name, variant, synchronous: 'postgres', ...measured });
  }
  // 100 bots in 100 rooms: each bot creates its own room and sends into it.
  const bots = await registerUsers({ server: a, sharedSecret: ctx.sharedSecret }, 'pbot', MANY_ROOMS);
  const botRooms = [];
  for (const bot of bots) botRooms.push(await roomWith({ server: a }, [bot]));
  const perRoom = { ...messageTarget(botRooms[0]), paths: botRooms.map((roomId) => messageTarget(roomId).path) };
  for (const [variant, servers] of [[`${MANY_ROOMS} bots in ${MANY_ROOMS} rooms, 1 process`, [a]], [`${MANY_ROOMS} bots in ${MANY_ROOMS} rooms over 2 processes`, [a, b]]]) {
    const { warmupMs, durationMs } = ctx.settings.send;
    const measured = await closedLoop({
      server: a,
      servers,
      target: perRoom,
      tokens: bots.map((user) => user.access_token),
      processes: 2,
      sendersPerProcess: MANY_ROOMS / 2,
      warmupMs,
      durationMs,
      tag: `${ctx.runId}-rooms-${servers.length}p`,
    });
    results.push({ scenario: name, variant, synchronous: 'postgres', ...measured });
  }
  results.push(await wake(ctx, a, a, wakeRoom, waker, sleeper, 'wake, send and sync on 1 process'));
  results.push(await wake(ctx, a, b, wakeRoom, waker, sleeper, 'wake, send on one, sync on the other'));
  return results;
}

async function wake(ctx, sendTo, syncOn, roomId, sender, syncer, variant) {
  const worker = await Worker.start('processes-wake');
  const iterations = ctx.settings.wake.iterations;
  try {
    const args = { baseUrl: syncOn.baseUrl, senderBaseUrl: sendTo.baseUrl, roomId, senderToken: sender.access_token, syncerToken: syncer.access_token, parkDelayMs: 15, tag: `${ctx.runId}-pw-${variant.length}` };
    await worker.run('wake-latency', { ...args, iterations: 0, warmup: 50, tag: `${args.tag}-warmup` });
    const cpuFrom = sendTo.cpuMs() + (syncOn === sendTo ? 0 : syncOn.cpuMs());
    const measured = await worker.run('wake-latency', { ...args, iterations, warmup: 0 });
    const cpuTo = sendTo.cpuMs() + (syncOn === sendTo ? 0 : syncOn.cpuMs());
    const ops = measured.wake.length;
    return {
      scenario: name,
      variant,
      synchronous: 'postgres',
      ops,
      latency_ms: summarize(measured.wake),
      send_latency_ms: summarize(measured.send),
      server: { cpu_ms_per_op: round((cpuTo - cpuFrom) / Math.max(1, ops), 3), rss_mb: syncOn.memory().rssMb },
      errors: measured.errors,
      missed: measured.missed,
    };
  } finally {
    worker.kill();
  }
}
