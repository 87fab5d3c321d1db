#!/usr/bin/env node
/**
 * `npm run bench:test-double`: what `startTestHomeserver()` costs a bot's test suite. In a fresh
 * process (as a test file gets one): the first start (module loading and compiling included),
 * then warm starts, resets and closes, each timed one at a time; prints medians and the worst.
 * Needs the build (prebench builds it).
 *
 *   node bench/test-double.mjs [ROUNDS] [--json]
 *
 * `--json` prints one JSON line with every sample instead of the table (the bench's start-up
 * scenario runs it that way, in a fresh process).
 */
import { performance } from 'node:perf_hooks';

const json = process.argv.includes('--json');
const ROUNDS = Number(process.argv.slice(2).find((a) => /^\d+$/.test(a)) ?? 30);
const cpuAtStart = process.cpuUsage();
const t0 = performance.now();
const { startTestHomeserver } = await import('../dist/src/testing/index.js');
const importMs = performance.now() - t0;

const times = { start: [], reset: [], close: [], 'user + room + send + waitFor': [] };
const time = async (name, work) => {
  const began = performance.now();
  const result = await work();
  times[name].push(performance.now() - began);
  return result;
};

const firstStarted = performance.now();
const first = await startTestHomeserver();
const firstStartMs = performance.now() - firstStarted;
await first.close();

for (let i = 0; i < ROUNDS; i++) {
  const hs = await time('start', () => startTestHomeserver());
  await time('user + room + send + waitFor', async () => {
    const alice = await hs.createUser('alice');
    const room = await hs.createRoom(alice);
    const id = await hs.send(alice, room, 'hi');
    await hs.waitFor(room, (e) => e.event_id === id);
  });
  await time('reset', () => hs.reset());
  await time('close', () => hs.close());
}

if (json) {
  const cpu = process.cpuUsage(cpuAtStart);
  console.log(
    JSON.stringify({
      import_ms: importMs,
      first_start_ms: firstStartMs,
      ...Object.fromEntries(Object.entries(times).map(([k, v]) => [k, v])),
      cpu_ms: (cpu.user + cpu.system) / 1000,
      rss_mb: process.memoryUsage().rss / 2 ** 20,
    }),
  );
  process.exit(0);
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const ms = (x) => `${x.toFixed(1)} ms`;
console.log(`| what | median | worst |\n|---|---|---|`);
console.log(`| import bot-homeserver/testing | ${ms(importMs)} | |`);
console.log(`| first start in a process | ${ms(firstStartMs)} | |`);
for (const [name, xs] of Object.entries(times)) console.log(`| ${name} (x${xs.length}) | ${ms(median(xs))} | ${ms(Math.max(...xs))} |`);
