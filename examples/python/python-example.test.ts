/**
 * The Python example of docs/testing-bots.md, run as its reader would: a pytest test (matrix-nio,
 * pytest-asyncio) in a bot project whose node_modules/.bin has the `bot-homeserver` command. The
 * docs show these very files (checked below), so they cannot drift from what passes. A test that
 * pytest skips counts as a failure: without pytest-asyncio in auto mode, pytest skips every
 * `async def` test and still exits 0.
 */
import { spawn, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const PYTHON = '/usr/bin/python3';
const HERE = import.meta.dirname;
const REPO = resolve(HERE, '../..');
const FILES = ['test_bot.py', 'fixtures.yaml', 'pytest.ini'];
const read = (file: string) => readFileSync(join(HERE, file), 'utf8');

/** The fenced code blocks of one language in a Markdown text. */
function codeBlocks(markdown: string, lang: string): string[] {
  return [...markdown.matchAll(new RegExp('^```' + lang + '\\n([\\s\\S]*?)^```$', 'gm'))].map((match) => match[1]!);
}

/** What pytest's JUnit XML report counts. */
function summary(xml: string): Record<'tests' | 'failures' | 'errors' | 'skipped', number> {
  const suite = /<testsuite\b[^>]*>/.exec(xml)?.[0] ?? '';
  const count = (name: string) => Number(new RegExp(`\\b${name}="(\\d+)"`).exec(suite)?.[1] ?? NaN);
  return { tests: count('tests'), failures: count('failures'), errors: count('errors'), skipped: count('skipped') };
}

describe('the Python example of docs/testing-bots.md', () => {
  it('is shown in the docs exactly as it is here', () => {
    const docs = readFileSync(join(REPO, 'docs/testing-bots.md'), 'utf8');
    expect(codeBlocks(docs, 'python')).toContain(read('test_bot.py'));
    expect(codeBlocks(docs, 'yaml')).toContain(read('fixtures.yaml'));
    expect(codeBlocks(docs, 'ini')).toContain(read('pytest.ini'));
  });

  describe('run with pytest', () => {
    let project: string;
    beforeAll(() => {
      // Not skipped when missing: CI installs them (.ci/run), and a silent skip would prove nothing.
      const probe = spawnSync(PYTHON, ['-c', 'import pytest, pytest_asyncio, nio'], { encoding: 'utf8' });
      if (probe.error || probe.status !== 0) {
        throw new Error(`${PYTHON} lacks pytest, pytest-asyncio or matrix-nio: apt-get install python3-pytest python3-pytest-asyncio python3-matrix-nio\n${probe.stderr ?? probe.error}`);
      }
      if (!existsSync(join(REPO, 'dist/bundle/main.mjs'))) throw new Error('dist/ is missing: npm run build');
      // A bot project: the example's files, and the command where an npm install puts it.
      project = mkdtempSync(join(tmpdir(), 'bhs-python-example-'));
      for (const file of FILES) copyFileSync(join(HERE, file), join(project, file));
      mkdirSync(join(project, 'node_modules/.bin'), { recursive: true });
      symlinkSync(join(REPO, 'bin/bot-homeserver.js'), join(project, 'node_modules/.bin/bot-homeserver'));
    });
    afterAll(() => {
      if (project) rmSync(project, { recursive: true, force: true });
    });

    it('passes every test in test_bot.py, none skipped', async () => {
      const env = { ...process.env, PATH: [dirname(process.execPath), process.env['PATH']].join(delimiter) };
      // Async spawn, so that vitest's timeout can still end a hung run.
      const child = spawn(PYTHON, ['-m', 'pytest', '-p', 'no:cacheprovider', '--junitxml=report.xml', '-rA'], { cwd: project, env });
      let output = '';
      child.stdout.on('data', (chunk: Buffer) => (output += chunk));
      child.stderr.on('data', (chunk: Buffer) => (output += chunk));
      const status = await new Promise<number | null>((done) => child.once('exit', done));
      const defined = (read('test_bot.py').match(/^(async )?def test_/gm) ?? []).length;
      expect(defined).toBeGreaterThan(0);
      expect({ status, ...summary(readFileSync(join(project, 'report.xml'), 'utf8')) }, output).toEqual({
        status: 0,
        tests: defined,
        failures: 0,
        errors: 0,
        skipped: 0,
      });
    }, 60_000);
  });
});
