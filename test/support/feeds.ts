// Where the shared real-world feed corpus lives (see /work/shared/feeds/SOURCES.md), found the
// same way as the Matrix spec: beside the repository.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const repoRoot = fileURLToPath(new URL('../..', import.meta.url));
export const FEEDS_DIR = path.resolve(repoRoot, '../shared/feeds');

export function feedFixture(name: string): Buffer {
  return fs.readFileSync(path.join(FEEDS_DIR, name));
}

/** Every fixture document in the corpus (SOURCES.md is its description, not a fixture). */
export function feedFixtureNames(): string[] {
  return fs
    .readdirSync(FEEDS_DIR)
    .filter((name) => name !== 'SOURCES.md' && !name.startsWith('.'))
    .sort();
}
