#!/usr/bin/env node
/**
 * `npm run bench:test-double`: what `startTestHomeserver()` costs a bot's test suite. In a fresh
 * process (as a test file gets one): the first start (module loading and compiling included),
 * then warm starts, resets and closes, each timed one at a time; prints medians and the worst.
 * Needs the build (prebench builds it).
 */
import { performance } from 'node:perf_hooks';

const ROUNDS = Number(process.argv[2] ?? 30);
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

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const ms = (x) => `${x.toFixed(1)} ms`;
console.log(`| what | median | worst |\n|---|---|---|`);
console.log(`| import bot-homeserver/testing | ${ms(importMs)} | |`);
console.log(`| first start in a process | ${ms(firstStartMs)} | |`);
for (const [name, xs] of Object.entries(times)) console.log(`| ${name} (x${xs.length}) | ${ms(median(xs))} | ${ms(Math.max(...xs))} |`);
