#!/usr/bin/env node
// Sums the self time of a V8 .cpuprofile (as `--cpu-prof` writes) by function and by file, and
// the inclusive ("total") time of each function, so that a profile can be read without Chrome
// DevTools. Usage:
//   node bench/profile-summary.mjs FILE.cpuprofile [--top N] [--ops N] [--match REGEX]
// --ops N divides every time by N operations (e.g. the sends measured), printing µs per op.
// --match prints the inclusive time of every function whose name or file matches REGEX.
// Build with `BUNDLE_READABLE=1 npm run build` so that function names survive bundling.
import { readFileSync } from 'node:fs';
import { basename } from 'node:path';

const args = process.argv.slice(2);
const file = args.find((a) => !a.startsWith('--') && !/^\d+$/.test(a));
if (!file) {
  console.error('usage: node bench/profile-summary.mjs FILE.cpuprofile [--top N] [--ops N] [--match REGEX]');
  process.exit(2);
}
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : dflt;
};
const top = Number(opt('--top', 40));
const ops = Number(opt('--ops', 0));
const match = opt('--match', null);
// --window A:B keeps the samples between A and B seconds after the profile's start (the bench's
// setup and warm-up come first); --timeline prints the busy (non-idle) ms of each second to find them.
const window = opt('--window', null)?.split(':').map(Number);
const timeline = args.includes('--timeline');

const profile = JSON.parse(readFileSync(file, 'utf8'));
const nodes = new Map(profile.nodes.map((n) => [n.id, n]));
const parent = new Map();
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);

// Self time per node from samples and their time deltas (µs).
const self = new Map();
const idleIds = new Set(profile.nodes.filter((n) => n.callFrame.functionName === '(idle)').map((n) => n.id));
const busyPerSecond = [];
let t = 0;
for (let i = 0; i < profile.samples.length; i++) {
  t += profile.timeDeltas[i];
  const id = profile.samples[i];
  const us = profile.timeDeltas[i + 1] ?? 0;
  const sec = Math.floor(t / 1e6);
  if (!idleIds.has(id)) busyPerSecond[sec] = (busyPerSecond[sec] ?? 0) + us;
  if (window && (t < window[0] * 1e6 || t >= window[1] * 1e6)) continue;
  self.set(id, (self.get(id) ?? 0) + us);
}
if (timeline) {
  console.log('second  busy ms');
  busyPerSecond.forEach((us, s) => console.log(`${String(s).padStart(6)}  ${((us ?? 0) / 1000).toFixed(0)}`));
}
const totalUs = [...self.values()].reduce((a, b) => a + b, 0);

const label = (n) => {
  const f = n.callFrame;
  const url = f.url ? basename(f.url.replace(/^file:\/\//, '')) : '';
  return `${f.functionName || '(anonymous)'} ${url}${url ? `:${f.lineNumber + 1}` : ''}`;
};
const fileOf = (n) => {
  const u = n.callFrame.url || `(${n.callFrame.functionName || 'native'})`;
  return u.replace(/^file:\/\//, '').replace(/.*node_modules\//, 'node_modules/').replace(/.*\/dist\//, 'dist/');
};

const byFn = new Map();
const byFile = new Map();
const inclusive = new Map();
for (const [id, us] of self) {
  const n = nodes.get(id);
  const l = label(n);
  byFn.set(l, (byFn.get(l) ?? 0) + us);
  const f = fileOf(n);
  byFile.set(f, (byFile.get(f) ?? 0) + us);
  // Inclusive: each distinct function on the stack once.
  const seen = new Set();
  for (let cur = id; cur !== undefined; cur = parent.get(cur)) {
    const cl = label(nodes.get(cur));
    if (seen.has(cl)) continue;
    seen.add(cl);
    inclusive.set(cl, (inclusive.get(cl) ?? 0) + us);
  }
}

const fmt = (us) => (ops ? `${(us / ops).toFixed(1)} µs/op` : `${(us / 1000).toFixed(1)} ms`);
const pct = (us) => `${((100 * us) / totalUs).toFixed(1)}%`;
const print = (title, map, n) => {
  console.log(`\n## ${title}`);
  for (const [k, v] of [...map].sort((a, b) => b[1] - a[1]).slice(0, n)) {
    console.log(`${pct(v).padStart(6)} ${fmt(v).padStart(14)}  ${k}`);
  }
};
console.log(`${file}: ${(totalUs / 1000).toFixed(0)} ms sampled${ops ? `, ${ops} ops` : ''}`);
print('self time by function', byFn, top);
print('self time by file', byFile, Math.min(top, 25));
print('inclusive time by function', inclusive, top);
if (match) {
  const re = new RegExp(match);
  print(`inclusive, matching /${match}/`, new Map([...inclusive].filter(([k]) => re.test(k))), 200);
}
