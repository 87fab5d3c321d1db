import { describe, expect, it } from 'vitest';
import { compileGlob } from '../../src/core/glob.js';
import { compileEventFilter } from '../../src/sync/filters.js';

const globMatches = (pattern: string, text: string) => compileGlob(pattern)(text);

describe('globMatches', () => {
  it.each([
    ['m.room.message', 'm.room.message', true],
    ['m.room.*', 'm.room.message', true],
    ['m.room.*', 'm.room.', true],
    ['m.room.*', 'm.roomx', false],
    ['*', '', true],
    ['*.message', 'm.room.message', true],
    ['m.*.message', 'm.room.message', true],
    ['m.*.member', 'm.room.message', false],
    ['a*b*c', 'aXXbYYc', true],
    ['a*b*c', 'aXXbYY', false],
    ['', '', true],
    ['', 'x', false],
    ['m.room.message', 'm.room.messages', false],
    // No one-character wildcard in filters, and case matters.
    ['m.room.?', 'm.room.x', false],
    ['m.room.?', 'm.room.?', true],
    ['a?*', 'a?b', true],
    ['M.ROOM.*', 'm.room.message', false],
  ])('%s against %s is %s', (pattern, text, expected) => {
    expect(globMatches(pattern, text)).toBe(expected);
  });

  it('takes linear time on patterns that make regular expressions backtrack', () => {
    // As a regular expression this pattern took over a minute on this text.
    expect(globMatches('a*a*a*a*a*a*a*a*a*a*a*a*b', 'a'.repeat(40))).toBe(false);
    expect(globMatches('*a*a*a*a*a*a*a*a*a*a*', 'a'.repeat(5000))).toBe(true);
  });
});

describe('compileEventFilter', () => {
  it('applies types, not_types, senders and not_senders, and says whether it restricts anything', () => {
    const filter = compileEventFilter({ types: ['m.room.*'], not_types: ['m.room.member'], not_senders: ['@spam:x'] });
    expect(filter.matches({ type: 'm.room.message', sender: '@a:x' })).toBe(true);
    expect(filter.matches({ type: 'm.room.member', sender: '@a:x' })).toBe(false);
    expect(filter.matches({ type: 'm.room.message', sender: '@spam:x' })).toBe(false);
    expect(filter.matches({ type: 'org.custom', sender: '@a:x' })).toBe(false);
    expect(filter.restrictive).toBe(true);
    expect(compileEventFilter({ limit: 5, lazy_load_members: true }).restrictive).toBe(false);
  });
});
