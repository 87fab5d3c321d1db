#!/usr/bin/env node
// `npm run build`: compiles src/ and migrations/ with tsc and bundles the CLI (scripts/bundle.mjs)
// into a fresh folder beside dist/, then swaps it in (scripts/dist-swap.mjs). A server started from
// this checkout keeps running through a rebuild: dist/ is never half-written, and the chunks of the
// build it started from stay beside the new ones, so its first webhook after a rebuild still finds
// the renderers it was built with.
import { execFileSync } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { bundle } from './bundle.mjs';
import { CHUNKS_MANIFEST, keepPreviousChunks, removeLeftovers, swapIn } from './dist-swap.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));
const dist = join(root, 'dist');
const staging = join(root, `dist.tmp-${process.pid}`);
const retired = join(root, `dist.old-${process.pid}`);
// `npm pack` and `npm publish` build with --clean (the prepack script): a package carries no
// chunks of earlier builds.
const clean = process.argv.includes('--clean');

removeLeftovers(root);
try {
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  execFileSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.build.json'), '--outDir', staging], { stdio: 'inherit' });
  const chunks = await bundle(staging);
  writeFileSync(join(staging, CHUNKS_MANIFEST), `${JSON.stringify({ chunks }, null, 2)}\n`);
  if (!clean) keepPreviousChunks(dist, staging, chunks);
  swapIn(staging, dist, retired);
} catch (err) {
  // tsc and esbuild have printed their own errors; anything else is ours to show.
  if (!(err && typeof err === 'object' && ('status' in err || 'errors' in err))) console.error(err);
  process.exitCode = 1;
} finally {
  rmSync(staging, { recursive: true, force: true });
  rmSync(retired, { recursive: true, force: true });
}
