// The real-world feed corpus (test/fixtures/feeds, see its SOURCES.md for where each file comes
// from and its licence).
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const FEEDS_DIR = fileURLToPath(new URL('../fixtures/feeds', import.meta.url));

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
