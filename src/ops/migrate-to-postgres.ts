/**
 * `bot-homeserver migrate-to-postgres --from homeserver.db --to postgres://...`: brings both
 * databases to this build's schema, copies every row into the empty PostgreSQL one and checks
 * each table's count on both sides. The server must be stopped meanwhile (a row written during
 * the copy would be missed); the SQLite file is only read. No server can start on the PostgreSQL
 * database during the copy (it holds the lock a server takes).
 */
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { ConfigError, describeDatabase, withoutPassword, type Config } from '../config/index.js';
import { signingKeyPathFor } from '../federation/signing-key.js';
import { mediaStorePathFor } from '../media/media-service.js';
import { copySqliteToPostgres, holdExclusiveUse, migrateToLatest, openDatabase, recordedServerName, Storage } from '../storage/index.js';
import { indexAllForSearch } from '../rooms/search-indexer.js';

/** What the server's configuration says of the files that stay files (the key, the media store). */
export type FilesConfig = Pick<Config, 'server_name' | 'signing_key_path' | 'media_store_path'>;

export async function migrateToPostgres(
  options: { from: string; to: string; schema: string },
  say: (line: string) => void,
  files: FilesConfig = { server_name: 'localhost', signing_key_path: null, media_store_path: null },
): Promise<boolean> {
  if (!existsSync(options.from)) throw new ConfigError(`--from ${options.from}: no such file`);
  if (!/^postgres(ql)?:\/\//.test(options.to)) throw new ConfigError(`--to ${withoutPassword(options.to)}: not a postgres:// URL`);
  say(`from: ${describeDatabase({ url: null, path: options.from, schema: 'public' })}`);
  say(`to: ${describeDatabase({ url: options.to, path: ':memory:', schema: options.schema })}`);
  const source = openDatabase({ path: options.from, synchronous: 'full' });
  const target = openDatabase({ path: ':memory:', synchronous: 'full', url: options.to, schema: options.schema, pool_size: 3 });
  try {
    const applied = await migrateToLatest(source);
    if (applied.length > 0) say(`SQLite: applied ${applied.join(', ')} first`);
    // Search rows follow commits on SQLite: a server that stopped by a crash may have left some to add.
    const sourceStorage = new Storage(source);
    await indexAllForSearch(sourceStorage, await sourceStorage.rooms.maxStreamOrdering());
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
    if (wrong.length > 0) {
      say(`${wrong.length} tables differ: do not switch.`);
      return false;
    }
    say(`done: ${counts.length} tables, every count matches.`);
    const serverName = (await recordedServerName(source)) ?? files.server_name;
    for (const line of switchInstructions(options, { ...files, server_name: serverName })) say(line);
    return true;
  } finally {
    await source.destroy();
    await target.destroy();
  }
}

/**
 * What to change in the configuration to switch. The signing key and the media store stay files,
 * and by default they are found beside database.path: a configuration that drops the SQLite path
 * would make the server look elsewhere, make a new key (other servers would refuse what it signs)
 * and miss every upload. So their paths are written out in full, as they are now.
 */
function switchInstructions(options: { from: string; to: string; schema: string }, files: FilesConfig): string[] {
  const before = { ...files, database: { path: resolve(options.from) } };
  const key = resolve(signingKeyPathFor(before) ?? '');
  const media = mediaStorePathFor(before) ?? '';
  const missing = (path: string, what: string) => (existsSync(path) ? '' : `   # no ${what} there now: if yours is elsewhere, name that`);
  return [
    'To switch, set these in the server\'s configuration (or as BOT_HOMESERVER_... variables), then start it:',
    '  database:',
    `    url: ${withoutPassword(options.to)}   # with the real password`,
    ...(options.schema === 'public' ? [] : [`    schema: ${options.schema}`]),
    `  signing_key_path: ${key}${missing(key, 'key file')}`,
    `  media_store_path: ${media}${missing(media, 'media store')}`,
    'Keep the key and the media store where they are (they are not in the database), and keep the SQLite file until the server runs well on PostgreSQL.',
    'Every command then names the database it uses on stderr ("database: PostgreSQL ..."): a command that still says SQLite is run without these settings.',
  ];
}
