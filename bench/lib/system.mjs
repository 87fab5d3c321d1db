/**
 * Whole-machine context for a result: how busy the CPUs were besides the server and the
 * generators (other tenants, a test run in another shell, hypervisor steal), and how long an
 * fsync takes where the database lives (it bounds every commit with synchronous=full).
 */
import { closeSync, fdatasyncSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { CLK_TCK, round } from './server.mjs';
import { summarize } from './stats.mjs';

/** Cumulative CPU time of all cores from /proc/stat, in ms: { busyMs, stealMs }. */
export function systemCpu() {
  const line = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0];
  // cpu user nice system idle iowait irq softirq steal guest guest_nice
  const [user, nice, system, , , irq, softirq, steal] = line.trim().split(/\s+/).slice(1).map(Number);
  const toMs = (ticks) => (ticks * 1000) / CLK_TCK;
  return { busyMs: toMs(user + nice + system + irq + softirq), stealMs: toMs(steal ?? 0) };
}

/**
 * CPU use over a window, in percent of one core: all busy time, and what remains after the
 * server's and the generators' own time ("other": anything else running on the machine).
 */
export function machineCpuOver(from, to, wallMs, serverMs, generatorMs) {
  const busy = to.busyMs - from.busyMs;
  return {
    busy_pct: round((busy / wallMs) * 100, 1),
    other_pct: round((Math.max(0, busy - serverMs - generatorMs) / wallMs) * 100, 1),
    steal_pct: round(((to.stealMs - from.stealMs) / wallMs) * 100, 1),
  };
}

/** Latency of a 4 KiB write + fdatasync in `dir`, `count` times (ms). */
export function fsyncProbe(dir, count = 100) {
  const path = join(dir, `fsync-probe-${process.pid}`);
  const fd = openSync(path, 'w');
  const block = Buffer.alloc(4096, 1);
  const samples = [];
  try {
    for (let i = 0; i < count; i++) {
      const t = performance.now();
      writeSync(fd, block, 0, block.length, (i % 16) * 4096);
      fdatasyncSync(fd);
      samples.push(performance.now() - t);
    }
  } finally {
    closeSync(fd);
    rmSync(path, { force: true });
  }
  const s = summarize(samples);
  return { p50: s.p50, p99: s.p99, max: s.max };
}
