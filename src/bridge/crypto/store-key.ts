/**
 * The crypto store's key: 32 random bytes with which the Matrix Rust SDK encrypts what it keeps
 * (device keys, Olm and Megolm sessions). The database holds it only sealed (AES-256-GCM) under a
 * key derived from a key file kept beside the database, as the signing key is; so a copy of the
 * database alone, or of the key file alone, opens nothing. Neither the key nor the file's content
 * is ever logged.
 */
import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';

const SEAL_VERSION = 'v1';
const KEY_INFO = 'bot-homeserver bridge crypto store key v1';
/** Bound to what it seals, so a sealed value cannot be moved to another purpose. */
const AAD = Buffer.from('bridge crypto store key');

/** The key file's secret, 32 bytes: read, or made (mode 0600) on first use. `null` path: memory only. */
export function loadOrCreateKeyFile(path: string | null): Buffer {
  if (path === null) return randomBytes(32);
  if (existsSync(path)) {
    const text = readFileSync(path, 'utf8').trim();
    const key = Buffer.from(text, 'base64');
    if (key.length !== 32) throw new Error(`the bridge's crypto key file ${path} does not hold a 32-byte base64 key`);
    return key;
  }
  mkdirSync(dirname(path), { recursive: true });
  const key = randomBytes(32);
  const temporary = `${path}.tmp-${process.pid}`;
  writeFileSync(temporary, key.toString('base64') + '\n', { mode: 0o600, flag: 'wx' });
  chmodSync(temporary, 0o600);
  renameSync(temporary, path);
  return key;
}

function sealingKey(fileKey: Buffer): Buffer {
  return Buffer.from(hkdfSync('sha256', fileKey, '', KEY_INFO, 32));
}

export function newStoreKey(): Buffer {
  return randomBytes(32);
}

export function sealStoreKey(fileKey: Buffer, storeKey: Buffer): string {
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', sealingKey(fileKey), iv);
  cipher.setAAD(AAD);
  const sealed = Buffer.concat([cipher.update(storeKey), cipher.final()]);
  return [SEAL_VERSION, iv.toString('base64url'), sealed.toString('base64url'), cipher.getAuthTag().toString('base64url')].join('.');
}

/** The store key, or undefined when the seal does not open with this key file. */
export function openStoreKey(fileKey: Buffer, sealed: string): Buffer | undefined {
  const [version, iv, data, tag] = sealed.split('.');
  if (version !== SEAL_VERSION || iv === undefined || data === undefined || tag === undefined) return undefined;
  try {
    const decipher = createDecipheriv('aes-256-gcm', sealingKey(fileKey), Buffer.from(iv, 'base64url'));
    decipher.setAAD(AAD);
    decipher.setAuthTag(Buffer.from(tag, 'base64url'));
    const key = Buffer.concat([decipher.update(Buffer.from(data, 'base64url')), decipher.final()]);
    return key.length === 32 ? key : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Where the key file is: `bridge.encryption.key_path`, else `<server_name>.bridge-crypto.key`
 * beside the signing key (or the database file); null (a key in memory) when those are in memory.
 */
export function bridgeCryptoKeyPath(config: {
  bridge: { encryption: { key_path: string | null } };
  signing_key_path: string | null;
  server_name: string;
  database: { path: string };
}): string | null {
  if (config.bridge.encryption.key_path !== null) return config.bridge.encryption.key_path;
  const beside = config.signing_key_path ?? (config.database.path === ':memory:' ? null : config.database.path);
  if (beside === null) return null;
  return `${dirname(beside)}/${config.server_name.replace(/[^A-Za-z0-9.-]/g, '_')}.bridge-crypto.key`;
}
