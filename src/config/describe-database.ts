/**
 * Which database a configuration uses, in words for the operator: every command says it, so that
 * nobody works on the old SQLite file after a move to PostgreSQL without seeing it. Passwords never
 * appear: a URL's is replaced, whether in its user part or in its query.
 */
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import type { Config } from './schema.js';

/** Query parameters of a connection string that carry a secret (pg reads them as settings). */
const SECRET_PARAMS = new Set(['password', 'sslpassword']);

/** A database URL fit to print: its password replaced by `***`; an unparseable one is not shown. */
export function withoutPassword(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    // What cannot be parsed cannot be redacted with certainty: only its scheme is safe to show.
    return `${url.slice(0, url.indexOf(':') + 1) || 'a URL'}//<not shown: not a valid URL>`;
  }
  if (parsed.password) parsed.password = '***';
  for (const name of [...parsed.searchParams.keys()]) {
    if (SECRET_PARAMS.has(name.toLowerCase())) parsed.searchParams.set(name, '***');
  }
  return parsed.toString().replaceAll('%2A%2A%2A', '***');
}

/** "PostgreSQL postgres://bhs:***@db/bhs" or "SQLite /srv/bhs/data/homeserver.db". */
export function describeDatabase(database: Pick<Config['database'], 'url' | 'path' | 'schema'>): string {
  if (database.url !== null) {
    return `PostgreSQL ${withoutPassword(database.url)}${database.schema === 'public' ? '' : ` (schema ${database.schema})`}`;
  }
  if (database.path === ':memory:') return 'SQLite in memory (nothing is kept)';
  const path = resolve(database.path);
  return `SQLite ${path}${existsSync(path) ? '' : ' (a new file: none there yet)'}`;
}
