/**
 * How `npm run build` replaces dist/ (scripts/dist-swap.mjs): a server started from a checkout
 * keeps loading its lazily loaded chunks after a rebuild, and dist/ is never half-written.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { CHUNKS_MANIFEST, keepPreviousChunks, removeLeftovers, swapIn } from '../../scripts/dist-swap.mjs';

let root: string;
beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), 'bhs-dist-swap-'));
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

/** A build as scripts/build.mjs stages it: main.mjs, its chunks and the manifest naming them. */
function fakeBuild(dir: string, version: string, chunks: string[]) {
  mkdirSync(join(dir, 'bundle/chunks'), { recursive: true });
  writeFileSync(join(dir, 'bundle/main.mjs'), version);
  for (const name of chunks) writeFileSync(join(dir, 'bundle/chunks', name), `${version} ${name}`);
  writeFileSync(join(dir, CHUNKS_MANIFEST), JSON.stringify({ chunks }));
}

/** One build: staged beside dist, the previous build's chunks kept, swapped in. */
function rebuild(version: string, chunks: string[]) {
  const staging = join(root, 'dist.tmp-1');
  fakeBuild(staging, version, chunks);
  const kept = keepPreviousChunks(join(root, 'dist'), staging, chunks);
  swapIn(staging, join(root, 'dist'), join(root, 'dist.old-1'));
  return kept;
}

it('swaps the new build in whole, keeping the previous build\'s chunks for a server started from it', () => {
  rebuild('v1', ['renderers-AAAA.mjs', 'renderers-AAAA.mjs.map', 'chunk-SAME.mjs']);
  const kept = rebuild('v2', ['renderers-BBBB.mjs', 'renderers-BBBB.mjs.map', 'chunk-SAME.mjs']);

  expect(kept).toEqual(['renderers-AAAA.mjs', 'renderers-AAAA.mjs.map']);
  const dist = join(root, 'dist');
  expect(readFileSync(join(dist, 'bundle/main.mjs'), 'utf8')).toBe('v2');
  // A v1 server's renderers, by the name it was built with, and the chunk both builds share, v2's.
  expect(readFileSync(join(dist, 'bundle/chunks/renderers-AAAA.mjs'), 'utf8')).toBe('v1 renderers-AAAA.mjs');
  expect(readFileSync(join(dist, 'bundle/chunks/chunk-SAME.mjs'), 'utf8')).toBe('v2 chunk-SAME.mjs');
  // The manifest still names the new build's own chunks only.
  expect(JSON.parse(readFileSync(join(dist, CHUNKS_MANIFEST), 'utf8')).chunks).not.toContain('renderers-AAAA.mjs');
  expect(readdirSync(root)).toEqual(['dist']);

  // One build back only.
  rebuild('v3', ['renderers-CCCC.mjs', 'chunk-SAME.mjs']);
  expect(readdirSync(join(dist, 'bundle/chunks')).sort()).toEqual(['renderers-BBBB.mjs', 'renderers-BBBB.mjs.map', 'renderers-CCCC.mjs', 'chunk-SAME.mjs'].sort());
});

it('never leaves dist/ half-written: a reader sees the old build or the new one', () => {
  rebuild('v1', ['a.mjs']);
  const staging = join(root, 'dist.tmp-1');
  fakeBuild(staging, 'v2', ['b.mjs']);
  // Until the swap, dist/ is the old build, whole.
  expect(readFileSync(join(root, 'dist/bundle/main.mjs'), 'utf8')).toBe('v1');
  expect(existsSync(join(root, 'dist/bundle/chunks/a.mjs'))).toBe(true);
  swapIn(staging, join(root, 'dist'), join(root, 'dist.old-1'));
  expect(readFileSync(join(root, 'dist/bundle/main.mjs'), 'utf8')).toBe('v2');
});

it('builds from before the manifest keep every chunk they had', () => {
  mkdirSync(join(root, 'dist/bundle/chunks'), { recursive: true });
  writeFileSync(join(root, 'dist/bundle/chunks/renderers-OLD.mjs'), 'old');
  expect(rebuild('v2', ['renderers-NEW.mjs'])).toEqual(['renderers-OLD.mjs']);
});

it('removes the folders of killed builds, not those of a build still running', async () => {
  const dead = spawn(process.execPath, ['-e', '']);
  await new Promise((resolve) => dead.on('exit', resolve));
  mkdirSync(join(root, `dist.tmp-${dead.pid}`));
  mkdirSync(join(root, `dist.old-${dead.pid}`));
  mkdirSync(join(root, `dist.tmp-${process.pid}`));
  mkdirSync(join(root, 'dist'));

  expect(removeLeftovers(root).sort()).toEqual([`dist.old-${dead.pid}`, `dist.tmp-${dead.pid}`]);
  expect(readdirSync(root).sort()).toEqual(['dist', `dist.tmp-${process.pid}`]);
});
