/** What every command prints of its database: a path, or a URL whose password is never shown. */
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { describeDatabase, withoutPassword } from '../../src/config/index.js';

describe('withoutPassword', () => {
  it.each([
    ['postgres://bots:s3cret@db.internal:5432/bots', 'postgres://bots:***@db.internal:5432/bots'],
    // An "@" in the password: the last one ends the user part.
    ['postgres://bots:p@ss@db/bots', 'postgres://bots:***@db/bots'],
    ['postgres://bots:a%2Fb%40c@db/bots', 'postgres://bots:***@db/bots'],
    // pg reads settings from the query too.
    ['postgresql://bots@db/bots?sslmode=require&password=s3cret', 'postgresql://bots@db/bots?sslmode=require&password=***'],
    ['postgres://db/bots?PASSWORD=s3cret&sslpassword=k3y', 'postgres://db/bots?PASSWORD=***&sslpassword=***'],
    ['postgres://bots@db/bots', 'postgres://bots@db/bots'],
  ])('%s', (url, shown) => {
    expect(withoutPassword(url)).toBe(shown);
  });

  it('shows nothing of a URL it cannot parse', () => {
    const shown = withoutPassword('postgres://bots:s3cret@[not-a-host/bots');
    expect(shown).not.toContain('s3cret');
    expect(shown).toBe('postgres://<not shown: not a valid URL>');
  });
});

describe('describeDatabase', () => {
  it('names the engine and where', () => {
    expect(describeDatabase({ url: 'postgres://bots:s3cret@db/bots', path: './data/homeserver.db', schema: 'public' })).toBe('PostgreSQL postgres://bots:***@db/bots');
    expect(describeDatabase({ url: 'postgres://db/bots', path: './data/homeserver.db', schema: 'bots_a' })).toBe('PostgreSQL postgres://db/bots (schema bots_a)');
    expect(describeDatabase({ url: null, path: ':memory:', schema: 'public' })).toBe('SQLite in memory (nothing is kept)');
    expect(describeDatabase({ url: null, path: './no/such/dir/homeserver.db', schema: 'public' })).toBe(`SQLite ${resolve('./no/such/dir/homeserver.db')} (a new file: none there yet)`);
  });
});
