/**
 * Send throughput: senders in one room PUT m.room.message back to back, each waiting for its
 * answer before the next. Measures messages/s, per-request latency, and the server's CPU time
 * per message and memory over the measured window (after a warm-up).
 */
import { CS, roomPath } from '../lib/http-client.mjs';
import { closedLoop } from '../lib/load.mjs';
import { registerUsers, roomWith } from '../lib/setup.mjs';

export const name = 'send-throughput';

/** @param {import('../run.mjs').Context} ctx */
export async function run(ctx) {
  const senders = await registerUsers(ctx, 'sender', 10);
  const roomId = await roomWith(ctx, senders);
  const variants = [
    { variant: '10 concurrent senders', processes: 2, sendersPerProcess: 5 },
    { variant: '1 sequential sender', processes: 1, sendersPerProcess: 1 },
  ];
  const results = [];
  for (const v of variants) {
    results.push(await measure(ctx, roomId, senders, v));
  }
  return results;
}

async function measure(ctx, roomId, senders, { variant, processes, sendersPerProcess }) {
  const { warmupMs, durationMs } = ctx.settings.send;
  const measured = await closedLoop({
    server: ctx.server,
    target: messageTarget(roomId),
    tokens: senders.map((u) => u.access_token),
    processes,
    sendersPerProcess,
    warmupMs,
    durationMs,
    tag: `${ctx.runId}-${variant.replace(/\W+/g, '')}`,
  });
  return { scenario: name, variant, synchronous: ctx.synchronous, ...measured };
}

/** A message PUT into the room, each with a fresh transaction id. */
export function messageTarget(roomId) {
  return { method: 'PUT', path: `${CS}/rooms/${roomPath(roomId)}/send/m.room.message/`, body: 'message', expect: 'event_id' };
}
