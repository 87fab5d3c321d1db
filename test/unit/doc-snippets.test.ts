/**
 * Code the docs show as a file of the repository (a `<!-- file: PATH -->` line right above the
 * fenced block) is that file, byte for byte, so what a reader copies is what the suite and CI run
 * (examples/ping-bot is run by this suite and installed into a bot project by
 * scripts/check-install.mjs).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '../..');
const pages = ['README.md', ...readdirSync(join(ROOT, 'docs')).filter((name) => name.endsWith('.md')).map((name) => `docs/${name}`)];

function snippets(page: string) {
  const text = readFileSync(join(ROOT, page), 'utf8');
  const found: Array<{ path: string; code: string | undefined }> = [];
  for (const match of text.matchAll(/^<!-- file: (\S+) -->\n(?:```[^\n]*\n([\s\S]*?)^```$)?/gm)) {
    found.push({ path: match[1]!, code: match[2] });
  }
  return found;
}

it('docs/testing-bots.md shows the ping bot and its test as they are', () => {
  expect(snippets('docs/testing-bots.md').map((snippet) => snippet.path)).toEqual(['examples/ping-bot/src/bot.js', 'examples/ping-bot/test/ping.test.js']);
});

it.each(pages)('%s: every snippet marked as a file is that file', (page) => {
  for (const { path, code } of snippets(page)) {
    expect(code, `${page}: no fenced block right after <!-- file: ${path} -->`).toBeDefined();
    expect(code, `${page} shows ${path} differently from the file`).toBe(readFileSync(join(ROOT, path), 'utf8'));
  }
});
