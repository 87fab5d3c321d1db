/**
 * Send throughput: senders in one room PUT m.room.message back to back, each waiting for its
 * answer before the next. Measures messages/s, per-request latency, and the server's CPU time
 * per message and memory over the measured window (after a warm-up).
 */
import { registerUsers, roomWith } from '../lib/setup.mjs';
import { summarize } from '../lib/stats.mjs';
import { round } from '../lib/server.mjs';
import { machineCpuOver, systemCpu } from '../lib/system.mjs';
import { Worker } from '../lib/workers.mjs';

const epochNow = () => performance.timeOrigin + performance.now();

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
  const workers = await Promise.all(Array.from({ length: processes }, (_, i) => Worker.start(`send-${i}`)));
  try {
    const startAt = epochNow() + 100;
    const measureFrom = startAt + warmupMs;
    const measureTo = measureFrom + durationMs;
    const server = ctx.server;
    let cpuFrom;
    let cpuTo;
    let memory;
    let machineFrom;
    let machineTo;
    const t1 = setTimeout(() => {
      cpuFrom = server.cpuMs();
      machineFrom = systemCpu();
    }, measureFrom - epochNow());
    const t2 = setTimeout(() => {
      cpuTo = server.cpuMs();
      machineTo = systemCpu();
      memory = server.memory();
    }, measureTo - epochNow());
    const answers = await Promise.all(
      workers.map((w, i) =>
        w.run('send-load', {
          baseUrl: server.baseUrl,
          roomId,
          tokens: senders.slice(i * sendersPerProcess, (i + 1) * sendersPerProcess).map((u) => u.access_token),
          startAt,
          warmupMs,
          durationMs,
          tag: `${ctx.runId}-${variant.replace(/\W+/g, '')}-${i}`,
        }),
      ),
    );
    // Generators stop by their own clocks; let this process's end-of-window timer fire too.
    await new Promise((r) => setTimeout(r, Math.max(0, measureTo + 20 - epochNow())));
    clearTimeout(t1);
    clearTimeout(t2);
    server.assertAlive();
    if (cpuFrom === undefined || cpuTo === undefined) throw new Error('the measured window did not run its timers; is the machine overloaded?');
    const latencies = answers.flatMap((a) => a.latencies);
    const completed = answers.reduce((n, a) => n + a.completed, 0);
    const errors = answers.reduce((n, a) => n + a.errors, 0);
    const genCpuMs = answers.reduce((n, a) => n + (a.genCpuMs ?? 0), 0);
    const seconds = durationMs / 1000;
    return {
      scenario: name,
      variant,
      synchronous: ctx.synchronous,
      params: { senders: processes * sendersPerProcess, generator_processes: processes, warmup_s: warmupMs / 1000, duration_s: seconds },
      ops: completed,
      rate_per_s: round(completed / seconds, 1),
      latency_ms: summarize(latencies),
      errors,
      ...(errors ? { error_samples: answers.flatMap((a) => a.errorSamples).slice(0, 5) } : {}),
      server: {
        cpu_ms_per_op: completed ? round((cpuTo - cpuFrom) / completed, 3) : null,
        cpu_pct: round(((cpuTo - cpuFrom) / durationMs) * 100, 1),
        rss_mb: memory.rssMb,
        rss_hwm_mb: memory.hwmMb,
      },
      generator: { cpu_pct: round((genCpuMs / durationMs) * 100, 1) },
      machine_cpu: machineCpuOver(machineFrom, machineTo, durationMs, cpuTo - cpuFrom, genCpuMs),
    };
  } finally {
    for (const w of workers) w.kill();
  }
}
