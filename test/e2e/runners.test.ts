/**
 * The test runners bot projects use, each running a test that imports `bot-homeserver/testing` as
 * an installed package (the build in dist/, through the package's own `exports`). vitest is this
 * suite; jest and node:test run as the bot developer would run them.
 */
import { spawnSync } from 'node:child_process';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '../..');
const JEST = join(ROOT, 'node_modules/jest/bin/jest.js');
const [major = 0, minor = 0] = process.versions.node.split('.').map(Number);
// Jest loads an ES module from a CommonJS test only where Node has require(esm) for it (24.9+),
// and then only with VM modules on, as in ESM mode.
const requireEsm = major > 24 || (major === 24 && minor >= 9);

function run(args: string[], env: Record<string, string> = {}) {
  const result = spawnSync(process.execPath, args, { cwd: ROOT, encoding: 'utf8', timeout: 60_000, env: { ...process.env, ...env } });
  return { status: result.status, output: `${result.stdout}${result.stderr}` };
}

function jest(testMatch: string, env: Record<string, string> = {}) {
  // An inline config: only our runner fixture, no transform (what a plain JavaScript project has).
  const config = JSON.stringify({ rootDir: ROOT, roots: ['<rootDir>/test/runners'], testMatch: [`**/${testMatch}`], transform: {} });
  return run(['--experimental-vm-modules', JEST, '--config', config, '--ci'], env);
}

describe('test runners', () => {
  it('jest in ESM mode (--experimental-vm-modules), as docs/testing-bots.md shows', () => {
    const result = jest('double.jest.mjs');
    expect(result.output).toContain('the test double serves a jest test');
    expect(result.status, result.output).toBe(0);
  });

  it.runIf(requireEsm)('jest with CommonJS tests (require), on Node 24.9 and later', () => {
    const result = run(['--experimental-vm-modules', JEST, '--config', JSON.stringify({ rootDir: ROOT, roots: ['<rootDir>/test/runners'], testMatch: ['**/double.jest.cjs'] }), '--ci']);
    expect(result.status, result.output).toBe(0);
  });

  it('node:test', () => {
    const result = run(['--test', '--test-reporter=tap', join(ROOT, 'test/runners/double.node-test.mjs')]);
    expect(result.status, result.output).toBe(0);
    expect(result.output).toMatch(/# pass 1/);
  });
});
