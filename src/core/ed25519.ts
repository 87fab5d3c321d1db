/**
 * ed25519 signing and checking, through libsodium (`sodium-native`) when it loads and Node's
 * OpenSSL otherwise. libsodium signs in about 14 µs where OpenSSL takes 23, and checks in 37
 * against 62 (docs/benchmarks.md): every event this server sends is signed, and every event and
 * request another server sends is checked. It is also what Synapse uses (PyNaCl), so a signature
 * is refused here exactly when Synapse refuses it: libsodium also rejects small-order public keys
 * and non-canonical signatures, which OpenSSL lets through. Signatures are the same bytes either
 * way (ed25519 is deterministic).
 */
import { createPrivateKey, createPublicKey, sign, verify, type KeyObject } from 'node:crypto';
import { createRequire } from 'node:module';

interface Sodium {
  crypto_sign_seed_keypair(publicKey: Buffer, secretKey: Buffer, seed: Buffer): void;
  crypto_sign_detached(signature: Buffer, message: Buffer, secretKey: Buffer): void;
  crypto_sign_verify_detached(signature: Buffer, message: Buffer, publicKey: Buffer): boolean;
}

/** libsodium, or undefined where its prebuilt addon does not load (BOT_HOMESERVER_NO_SODIUM=1 forces that). */
const sodium: Sodium | undefined = (() => {
  if (process.env.BOT_HOMESERVER_NO_SODIUM === '1') return undefined;
  try {
    return createRequire(import.meta.url)('sodium-native') as Sodium;
  } catch {
    return undefined;
  }
})();

/** Which implementation is in use (tests check that libsodium loads). */
export const ed25519Implementation: 'libsodium' | 'openssl' = sodium ? 'libsodium' : 'openssl';

const PKCS8_ED25519_PREFIX = Buffer.from('302e020100300506032b657004220420', 'hex');
const SPKI_ED25519_PREFIX = Buffer.from('302a300506032b6570032100', 'hex');

/** The raw 32 bytes of public keys made here, so that checking with libsodium needs no export. */
const rawPublicKeys = new WeakMap<KeyObject, Buffer>();

export interface Ed25519KeyPair {
  /** The raw 32-byte public key. */
  publicKey: Buffer;
  sign(data: Buffer): Buffer;
}

/** A key pair from a 32-byte seed (what Synapse's signing key file holds). */
export function ed25519KeyPair(seed: Buffer): Ed25519KeyPair {
  if (seed.length !== 32) throw new Error('an ed25519 seed is 32 bytes');
  if (sodium) {
    const publicKey = Buffer.alloc(32);
    const secretKey = Buffer.alloc(64);
    sodium.crypto_sign_seed_keypair(publicKey, secretKey, seed);
    return {
      publicKey,
      sign: (data) => {
        const signature = Buffer.allocUnsafe(64);
        sodium.crypto_sign_detached(signature, data, secretKey);
        return signature;
      },
    };
  }
  const privateKey = createPrivateKey({ key: Buffer.concat([PKCS8_ED25519_PREFIX, seed]), format: 'der', type: 'pkcs8' });
  const publicKey = (createPublicKey(privateKey).export({ format: 'der', type: 'spki' }) as Buffer).subarray(SPKI_ED25519_PREFIX.length);
  return { publicKey: Buffer.from(publicKey), sign: (data) => sign(null, data, privateKey) };
}

/** An ed25519 public key from its raw 32 bytes, or undefined when they are not one. */
export function ed25519PublicKeyFromRaw(raw: Buffer): KeyObject | undefined {
  if (raw.length !== 32) return undefined;
  try {
    const key = createPublicKey({ key: Buffer.concat([SPKI_ED25519_PREFIX, raw]), format: 'der', type: 'spki' });
    rawPublicKeys.set(key, Buffer.from(raw));
    return key;
  } catch {
    return undefined;
  }
}

/** Whether `signature` is `key`'s ed25519 signature of `data`. */
export function ed25519Verify(data: Buffer, key: KeyObject, signature: Buffer): boolean {
  if (signature.length !== 64) return false;
  if (!sodium) return verify(null, data, key, signature);
  let raw = rawPublicKeys.get(key);
  if (!raw) {
    if (key.asymmetricKeyType !== 'ed25519') return false;
    raw = (key.export({ format: 'der', type: 'spki' }) as Buffer).subarray(SPKI_ED25519_PREFIX.length);
    rawPublicKeys.set(key, raw);
  }
  return sodium.crypto_sign_verify_detached(signature, data, raw);
}
