/**
 * Closed-loop load: senders in generator processes, each sending one request and waiting for its
 * answer before the next, over its own keep-alive connection. Used by send-throughput (room
 * messages), webhook (posts to a webhook) and limits (a bare Fastify route), so all three are
 * driven by the same code at the same concurrency.
 */
import { round } from './server.mjs';
import { summarize } from './stats.mjs';
import { machineCpuOver, systemCpu } from './system.mjs';
import { Worker } from './workers.mjs';

const epochNow = () => performance.timeOrigin + performance.now();

/**
 * What each sender sends. `path` gets a fresh transaction id appended when it ends with '/';
 * `body` is 'message' (an m.room.message content) or 'webhook' ({ text }); an answer counts when
 * it is a 200 whose JSON has the key `expect`. The default is a message PUT into `roomId`.
 * @typedef {{ method: string, path: string, body: 'message'|'webhook', expect: string }} Target
 */

/**
 * Runs the load and returns the common result fields (ops, rate, latency, server CPU and RSS,
 * generator and machine CPU). `server` needs `baseUrl`, `cpuMs()`, `memory()`, `assertAlive()`.
 * @param {{ server: object, target: Target, tokens: (string|undefined)[], processes: number,
 *   sendersPerProcess: number, warmupMs: number, durationMs: number, tag: string }} options
 */
/**
 * `servers`, when given, spreads the generator processes over several server processes (of one
 * server on PostgreSQL): generator i sends to servers[i % n], and server CPU is their sum.
 */
export async function closedLoop({ server, servers: given, target, tokens, processes, sendersPerProcess, warmupMs, durationMs, tag }) {
  const servers = given ?? [server];
  server = { cpuMs: () => servers.reduce((sum, s) => sum + s.cpuMs(), 0), memory: () => servers[0].memory(), assertAlive: () => servers.forEach((s) => s.assertAlive()) };
  const workers = await Promise.all(Array.from({ length: processes }, (_, i) => Worker.start(`load-${i}`)));
  try {
    const startAt = epochNow() + 100;
    const measureFrom = startAt + warmupMs;
    const measureTo = measureFrom + durationMs;
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
          baseUrl: servers[i % servers.length].baseUrl,
          // A target with `paths` (one per sender: each its own room) is sliced like the tokens.
          target: target.paths ? { ...target, paths: target.paths.slice(i * sendersPerProcess, (i + 1) * sendersPerProcess) } : target,
          tokens: tokens.slice(i * sendersPerProcess, (i + 1) * sendersPerProcess),
          startAt,
          warmupMs,
          durationMs,
          tag: `${tag}-${i}`,
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
