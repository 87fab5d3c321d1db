// How scripts/build.mjs puts a finished build in place of dist/ (tested in test/unit/dist-swap.test.ts).
import { copyFileSync, existsSync, linkSync, readdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';

/** This build's own files under bundle/chunks/, written beside them. */
export const CHUNKS_MANIFEST = 'bundle/chunks.json';

/**
 * Puts the previous build's own chunks into the new build's chunks folder: a server started from
 * the previous build loads them on first use (the webhook renderers), by the name it was built
 * with. Chunk names carry a content hash, so they never clash with the new build's. One build back
 * only: a server that lived through two rebuilds runs code two versions old and wants a restart.
 */
export function keepPreviousChunks(dist, staging, chunks) {
  const previousDir = join(dist, 'bundle/chunks');
  if (!existsSync(previousDir)) return [];
  let previous;
  try {
    previous = JSON.parse(readFileSync(join(dist, CHUNKS_MANIFEST), 'utf8')).chunks;
  } catch {
    previous = readdirSync(previousDir); // a build from before the manifest
  }
  const mine = new Set(chunks);
  const kept = [];
  for (const name of previous) {
    if (mine.has(name) || !existsSync(join(previousDir, name))) continue;
    const target = join(staging, 'bundle/chunks', name);
    try {
      linkSync(join(previousDir, name), target);
    } catch {
      copyFileSync(join(previousDir, name), target);
    }
    kept.push(name);
  }
  return kept;
}

/**
 * Replaces dist with staging by two renames: dist/ is missing only in between, never half-written.
 * Another build swapping at the same moment makes a rename fail; it is retried.
 */
export function swapIn(staging, dist, retired) {
  for (let attempt = 0; ; attempt++) {
    try {
      renameSync(dist, retired);
    } catch (err) {
      if (err.code !== 'ENOENT') throw err;
    }
    try {
      renameSync(staging, dist);
      break;
    } catch (err) {
      if (!['ENOTEMPTY', 'EEXIST'].includes(err.code) || attempt >= 5) throw err;
      rmSync(retired, { recursive: true, force: true });
    }
  }
  rmSync(retired, { recursive: true, force: true });
}

/** Staging and retired folders of builds that were killed midway (their process is gone). */
export function removeLeftovers(root) {
  const removed = [];
  for (const name of readdirSync(root)) {
    const match = /^dist\.(?:tmp|old)-(\d+)$/.exec(name);
    if (!match || isRunning(Number(match[1]))) continue;
    rmSync(join(root, name), { recursive: true, force: true });
    removed.push(name);
  }
  return removed;
}

function isRunning(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return err.code === 'EPERM';
  }
}
