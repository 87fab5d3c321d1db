/**
 * `bot-homeserver backup <file>`: everything a restore needs, taken while the server runs. The
 * database through SQLite's online backup (a consistent copy, whatever is being written), then the
 * media store (files are written once and never changed, so a copy taken after the database holds
 * every file the backup's rows name), then the signing key (without it, other servers would not
 * accept this server's events as the same server's).
 */
import { chmodSync, cpSync, copyFileSync, existsSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import type { Config } from '../config/index.js';
import { CommandError } from './command-error.js';
import { signingKeyPathFor } from '../federation/signing-key.js';
import { mediaStorePathFor } from '../media/media-service.js';
import { backupDatabase, type Storage } from '../storage/index.js';

export interface BackupResult {
  database: string;
  /** The copy of the media store and how much it holds, or null when there is none. */
  media: { path: string; files: number; bytes: number } | null;
  signingKey: string | null;
}

export async function backup(config: Config, storage: Storage, target: string): Promise<BackupResult> {
  if (config.database.url !== null) throw new CommandError('the database is PostgreSQL: back it up with pg_dump, and copy the media store and the signing key beside it (docs/scaling.md)');
  if (config.database.path === ':memory:') throw new CommandError('an in-memory database has nothing to back up');
  const mediaTarget = `${target}.media`;
  const keyTarget = `${target}.signing.key`;
  for (const path of [target, mediaTarget, keyTarget]) {
    if (existsSync(path)) throw new CommandError(`${path} exists; a backup never overwrites anything`);
  }
  // The backup makes files, not folders: a mistyped folder is said as such, before anything is written.
  const folder = dirname(resolve(target));
  if (!existsSync(folder)) throw new CommandError(`cannot write the backup to ${target}: the folder ${folder} does not exist (create it first)`);
  if (!statSync(folder).isDirectory()) throw new CommandError(`cannot write the backup to ${target}: ${folder} is not a folder`);
  try {
    await backupDatabase(storage.db, target);
  } catch (err) {
    throw new CommandError(`cannot write the backup to ${target}: ${(err as Error).message}`, { cause: err });
  }
  // Password hashes and sealed secrets: readable by the operator only, as the key is.
  chmodSync(target, 0o600);

  const mediaStore = mediaStorePathFor(config);
  let media: BackupResult['media'] = null;
  if (mediaStore !== null && existsSync(mediaStore)) {
    // tmp/ holds uploads still arriving: not part of any row yet.
    cpSync(mediaStore, mediaTarget, { recursive: true, filter: (source) => source !== join(mediaStore, 'tmp') });
    media = { path: mediaTarget, ...countFiles(mediaTarget) };
  }
  const keyPath = signingKeyPathFor(config);
  let signingKey: string | null = null;
  if (keyPath !== null && existsSync(keyPath)) {
    copyFileSync(keyPath, keyTarget);
    chmodSync(keyTarget, 0o600);
    signingKey = keyTarget;
  }
  return { database: target, media, signingKey };
}

function countFiles(dir: string): { files: number; bytes: number } {
  let files = 0;
  let bytes = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) {
      const inner = countFiles(path);
      files += inner.files;
      bytes += inner.bytes;
    } else {
      files += 1;
      bytes += statSync(path).size;
    }
  }
  return { files, bytes };
}
