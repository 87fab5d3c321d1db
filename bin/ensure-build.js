#!/usr/bin/env node
// Builds dist/ when it is missing or older than what it is built from, so `npm start` works from a
// fresh clone. It is also the `prepare` script: `npm ci`, an install from git and `npx` in a
// checkout (which links the checkout into npx's cache and prepares it) each run it, and only the
// first of them pays for a build.
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';

const root = new URL('..', import.meta.url).pathname;
// The bundle is written last, so it is the build's newest file.
const marker = join(root, 'dist/bundle/main.mjs');

function newestMtime(path) {
  if (!existsSync(path)) return 0;
  const stat = statSync(path);
  if (!stat.isDirectory()) return stat.mtimeMs;
  let newest = 0;
  for (const entry of readdirSync(path)) newest = Math.max(newest, newestMtime(join(path, entry)));
  return newest;
}

// An installed package (a tarball) ships dist/ and no sources: nothing to build from.
if (existsSync(join(root, 'src'))) {
  // The bundle carries the dependencies too, so a changed lockfile means a stale bundle.
  const inputs = ['src', 'migrations', 'scripts/build.mjs', 'scripts/bundle.mjs', 'package-lock.json', 'tsconfig.json', 'tsconfig.build.json'];
  const sourcesMtime = Math.max(...inputs.map((input) => newestMtime(join(root, input))));
  if (!existsSync(marker) || statSync(marker).mtimeMs < sourcesMtime) {
    console.error('bot-homeserver: building (dist/ is missing or older than src/)...');
    execFileSync(process.execPath, [join(root, 'scripts/build.mjs')], { stdio: 'inherit' });
  }
}
