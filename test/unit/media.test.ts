/** Pure media helpers: Content-Disposition and upload sizes. */
import { describe, expect, it } from 'vitest';
import { contentDisposition, isInlineType } from '../../src/media/content-disposition.js';
import { finishConfig } from '../../src/config/index.js';
import { parseSize } from '../../src/config/load.js';

describe('contentDisposition', () => {
  it.each([
    ['image/png', 'cat.png', 'inline; filename="cat.png"'],
    ['IMAGE/PNG; charset=binary', null, 'inline'],
    ['text/html', 'x.html', 'attachment; filename="x.html"'],
    ['image/svg+xml', 'x.svg', 'attachment; filename="x.svg"'],
    ['application/octet-stream', 'a b.bin', 'attachment; filename="a b.bin"'],
    ['text/plain', 'naïve.txt', "inline; filename*=utf-8''na%C3%AFve.txt"],
    ['text/plain', 'quote".txt', "inline; filename*=utf-8''quote%22.txt"],
    ['text/plain', "é's (1)*.txt", "inline; filename*=utf-8''%C3%A9%27s%20%281%29%2A.txt"],
    ['text/plain', 'line\r\nX-Evil: 1', "inline; filename*=utf-8''line%0D%0AX-Evil%3A%201"],
  ])('%s named %s → %s', (type, name, expected) => {
    expect(contentDisposition(type, name)).toBe(expected);
  });

  it('never inlines types that can run script', () => {
    for (const type of ['text/html', 'application/xhtml+xml', 'image/svg+xml', 'application/javascript', 'text/xml']) {
      expect(isInlineType(type)).toBe(false);
    }
  });
});

describe('max_upload_size', () => {
  it('reads Synapse-style sizes in powers of 1024', () => {
    expect(parseSize('50M')).toBe(52_428_800);
    expect(parseSize('10K')).toBe(10_240);
    expect(parseSize('1G')).toBe(1_073_741_824);
    expect(parseSize(123)).toBe(123);
    expect(finishConfig({}).max_upload_size).toBe(52_428_800);
    expect(finishConfig({ max_upload_size: '2M' }).max_upload_size).toBe(2_097_152);
    expect(() => finishConfig({ max_upload_size: '2 MB' })).toThrow(/max_upload_size/);
  });
});
