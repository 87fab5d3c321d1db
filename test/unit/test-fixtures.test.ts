// The suite needs nothing beside the clone: the spec, feed and webhook files it reads are in
// test/fixtures, each folder with its source and licence, and the spec copy is what
// scripts/refresh-spec.mjs makes of a spec checkout.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { specDir } from '../support/spec-validator.js';
import { FEEDS_DIR } from '../support/feeds.js';
import { WEBHOOK_FIXTURES_DIR } from '../support/webhook-fixtures.js';

const repoRoot = fileURLToPath(new URL('../..', import.meta.url));
const fixtures = path.join(repoRoot, 'test', 'fixtures');

function filesUnder(dir: string): string[] {
  return fs.readdirSync(dir, { recursive: true, encoding: 'utf8' }).filter((name) => fs.statSync(path.join(dir, name)).isFile()).sort();
}

afterEach(() => {
  vi.unstubAllEnvs();
});

describe('test fixtures', () => {
  it('are read from inside the repository', () => {
    vi.stubEnv('MATRIX_SPEC_DIR', '');
    expect(specDir()).toBe(path.join(fixtures, 'matrix-spec'));
    expect(FEEDS_DIR).toBe(path.join(fixtures, 'feeds'));
    expect(fileURLToPath(WEBHOOK_FIXTURES_DIR)).toBe(path.join(fixtures, 'webhooks') + path.sep);
  });

  // `data/` in .gitignore once kept the spec's data/ folder out of every commit, unnoticed here.
  it('are all committed: .gitignore leaves none of them out', () => {
    const ignored = execFileSync('git', ['ls-files', '--cached', '--others', '--ignored', '--exclude-standard', '--', 'test/fixtures'], { cwd: repoRoot, encoding: 'utf8' });
    expect(ignored.split('\n').filter(Boolean)).toEqual([]);
  });

  it('MATRIX_SPEC_DIR still points the validator at another copy', () => {
    vi.stubEnv('MATRIX_SPEC_DIR', '/somewhere/matrix-spec');
    expect(specDir()).toBe('/somewhere/matrix-spec');
  });

  it('say where each folder comes from and under which licence', () => {
    for (const corpus of ['feeds', 'webhooks']) {
      expect(fs.readFileSync(path.join(fixtures, corpus, 'SOURCES.md'), 'utf8')).toMatch(/licen[cs]e/i);
    }
    const spec = path.join(fixtures, 'matrix-spec');
    expect(fs.readFileSync(path.join(spec, 'LICENSE'), 'utf8')).toContain('Apache License');
    expect(fs.readFileSync(path.join(spec, 'NOTICE'), 'utf8')).toContain('https://github.com/matrix-org/matrix-spec');
    expect(fs.readFileSync(path.join(spec, 'SOURCE.md'), 'utf8')).toMatch(/Version: tag `v[\d.]+`.*commit\s+`[0-9a-f]{40}`/s);
  });

  // Run on the copy itself as its source, the script must copy exactly the same files: every
  // `$ref` resolves inside the copy, and a refresh from a real checkout keeps this set.
  it('hold the files scripts/refresh-spec.mjs copies, and everything they reference', () => {
    const spec = path.join(fixtures, 'matrix-spec');
    const out = fs.mkdtempSync(path.join(os.tmpdir(), 'refresh-spec-'));
    try {
      execFileSync(process.execPath, [path.join(repoRoot, 'scripts', 'refresh-spec.mjs'), spec, '--out', out], { stdio: 'pipe' });
      expect(filesUnder(path.join(out, 'data'))).toEqual(filesUnder(path.join(spec, 'data')));
    } finally {
      fs.rmSync(out, { recursive: true, force: true });
    }
  });
});
