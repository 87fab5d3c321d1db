#!/usr/bin/env node
// Builds dist/ when it is missing or older than the sources, so `npm start` works from a fresh clone.
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';

const root = new URL('..', import.meta.url).pathname;
// The bundle is written last, so it is the build's newest file.
const marker = join(root, 'dist/bundle/main.mjs');

function newestMtime(dir) {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    newest = Math.max(newest, entry.isDirectory() ? newestMtime(path) : statSync(path).mtimeMs);
  }
  return newest;
}

const sourcesMtime = Math.max(newestMtime(join(root, 'src')), newestMtime(join(root, 'migrations')));
if (!existsSync(marker) || statSync(marker).mtimeMs < sourcesMtime) {
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  console.error('bot-homeserver: building (dist/ is missing or older than src/)...');
  execFileSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.build.json')], { stdio: 'inherit' });
  execFileSync(process.execPath, [join(root, 'scripts/bundle.mjs')], { stdio: 'inherit' });
}
