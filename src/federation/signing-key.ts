/**
 * This server's ed25519 signing key, in Synapse's file format so an operator can carry keys either
 * way: one line per key, `ed25519 <version> <unpadded base64 seed>`. Generated at first start
 * (the file is written with mode 0600 and fsynced before use), read at every start after.
 * Old keys (`old_signing_keys`) are published with their expiry so other servers can still check
 * events signed with them.
 */
import { randomBytes } from 'node:crypto';
import { closeSync, fsyncSync, mkdirSync, openSync, readFileSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';
import { decodeBase64, ed25519Signer, unpaddedBase64, type Signer } from '../core/signed-json.js';

export class SigningKeyError extends Error {
  override name = 'SigningKeyError';
}

/** Reads the first key of a signing key file (Synapse signs with the first one too). */
export function parseSigningKeyFile(text: string, serverName: string, path = 'the signing key file'): Signer {
  for (const [index, rawLine] of text.split('\n').entries()) {
    const line = rawLine.trim();
    if (line === '' || line.startsWith('#')) continue;
    const [algorithm, version, seedText, ...rest] = line.split(/\s+/);
    if (algorithm !== 'ed25519' || !version || !seedText || rest.length > 0) {
      throw new SigningKeyError(`${path}, line ${index + 1}: expected "ed25519 <key version> <base64 seed>"`);
    }
    if (!/^[A-Za-z0-9_]+$/.test(version)) throw new SigningKeyError(`${path}, line ${index + 1}: key version ${JSON.stringify(version)} may only hold letters, digits and _`);
    const seed = decodeBase64(seedText);
    if (!seed || seed.length !== 32) throw new SigningKeyError(`${path}, line ${index + 1}: the seed is not 32 bytes of base64`);
    return ed25519Signer(serverName, version, seed);
  }
  throw new SigningKeyError(`${path} holds no key`);
}

/** A new key line: version `a_` and four random characters, as Synapse names them. */
export function newSigningKeyLine(): string {
  const version = `a_${randomBytes(3).toString('base64url').replace(/[^A-Za-z0-9]/g, 'x').slice(0, 4)}`;
  return `ed25519 ${version} ${unpaddedBase64(randomBytes(32))}\n`;
}

/**
 * The server's signer from `path`, generating the file when it does not exist. A `null` path (an
 * in-memory database) gets a key that lives as long as the process.
 */
export function loadOrCreateSigningKey(path: string | null, serverName: string): Signer {
  if (path === null) return parseSigningKeyFile(newSigningKeyLine(), serverName);
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw new SigningKeyError(`cannot read the signing key ${path}: ${(err as Error).message}`);
    writeKeyFile(path, newSigningKeyLine());
    text = readFileSync(path, 'utf8');
  }
  return parseSigningKeyFile(text, serverName, path);
}

/** Written with O_EXCL (never over another process's key), mode 0600, and fsynced. */
function writeKeyFile(path: string, text: string): void {
  mkdirSync(dirname(path), { recursive: true });
  let fd: number;
  try {
    fd = openSync(path, 'wx', 0o600);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return; // another process made it first; it is read next
    throw new SigningKeyError(`cannot create the signing key ${path}: ${(err as Error).message}`);
  }
  try {
    writeSync(fd, text);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** An old key to keep publishing: `ed25519:<version>` → its public key and when it stopped being used. */
export interface OldVerifyKey {
  key: string;
  expiredTs: number;
}

/** Where the config says the key lives: `signing_key_path`, else beside the database (null: in memory). */
export function signingKeyPathFor(config: { signing_key_path: string | null; server_name: string; database: { path: string } }): string | null {
  if (config.signing_key_path !== null) return config.signing_key_path;
  if (config.database.path === ':memory:') return null;
  return `${dirname(config.database.path)}/${config.server_name.replace(/[^A-Za-z0-9.-]/g, '_')}.signing.key`;
}
