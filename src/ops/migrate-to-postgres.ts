/**
 * `bot-homeserver migrate-to-postgres --from homeserver.db --to postgres://...`: brings both
 * databases to this build's schema, copies every row into the empty PostgreSQL one and checks
 * each table's count on both sides. The server must be stopped meanwhile (a row written during
 * the copy would be missed); the SQLite file is only read. No server can start on the PostgreSQL
 * database during the copy (it holds the lock a server takes).
 */
import { existsSync } from 'node:fs';
import { ConfigError } from '../config/index.js';
import { copySqliteToPostgres, holdExclusiveUse, migrateToLatest, openDatabase } from '../storage/index.js';

export async function migrateToPostgres(options: { from: string; to: string; schema: string }, say: (line: string) => void): Promise<boolean> {
  if (!existsSync(options.from)) throw new ConfigError(`--from ${options.from}: no such file`);
  if (!/^postgres(ql)?:\/\//.test(options.to)) throw new ConfigError(`--to ${options.to}: not a postgres:// URL`);
  const source = openDatabase({ path: options.from, synchronous: 'full' });
  const target = openDatabase({ path: ':memory:', synchronous: 'full', url: options.to, schema: options.schema, pool_size: 3 });
  try {
    const applied = await migrateToLatest(source);
    if (applied.length > 0) say(`SQLite: applied ${applied.join(', ')} first`);
    await migrateToLatest(target);
    // No server may start on the target while it is being filled.
    const release = await holdExclusiveUse(target);
    let last = '';
    const counts = await copySqliteToPostgres(source, target, (table, rows) => {
      if (table !== last || rows % 50_000 === 0) say(`copying ${table}: ${rows} rows`);
      last = table;
    }).finally(release);
    const wrong = counts.filter((entry) => entry.source !== entry.target);
    for (const entry of counts) say(`${entry.table}: ${entry.source} → ${entry.target}${entry.source === entry.target ? '' : '  MISMATCH'}`);
    say(wrong.length === 0 ? `done: ${counts.length} tables, every count matches. Set database.url to ${redacted(options.to)} and start the server.` : `${wrong.length} tables differ: do not switch.`);
    return wrong.length === 0;
  } finally {
    await source.destroy();
    await target.destroy();
  }
}

/** The URL without its password, for the closing line. */
function redacted(url: string): string {
  const parsed = new URL(url);
  if (parsed.password) parsed.password = '***';
  return parsed.toString();
}
