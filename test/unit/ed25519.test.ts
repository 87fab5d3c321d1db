/**
 * ed25519 through libsodium: the same signatures as Node's OpenSSL (so a key made by either checks
 * the other's), and the checks Synapse's PyNaCl makes that OpenSSL does not.
 */
import { createPrivateKey, generateKeyPairSync, randomBytes, sign, verify } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { ed25519Implementation, ed25519KeyPair, ed25519PublicKeyFromRaw, ed25519Verify } from '../../src/core/ed25519.js';

const PKCS8_ED25519_PREFIX = Buffer.from('302e020100300506032b657004220420', 'hex');

describe('ed25519', () => {
  it('uses libsodium on this machine', () => {
    // The prebuilt addon covers linux-x64 on every Node version the project supports; the
    // OpenSSL path is the fallback for a platform without one.
    expect(ed25519Implementation).toBe('libsodium');
  });

  it('signs the bytes OpenSSL signs, and each checks the other', () => {
    for (let i = 0; i < 50; i++) {
      const seed = randomBytes(32);
      const message = randomBytes(i * 37);
      const keys = ed25519KeyPair(seed);
      const publicKey = ed25519PublicKeyFromRaw(keys.publicKey)!;
      const opensslKey = createPrivateKey({ key: Buffer.concat([PKCS8_ED25519_PREFIX, seed]), format: 'der', type: 'pkcs8' });
      const ours = keys.sign(message);
      expect(ours.equals(sign(null, message, opensslKey))).toBe(true);
      expect(verify(null, message, publicKey, ours)).toBe(true);
      expect(ed25519Verify(message, publicKey, ours)).toBe(true);
    }
  });

  it('refuses a changed message, a changed signature, a wrong length', () => {
    const keys = ed25519KeyPair(randomBytes(32));
    const publicKey = ed25519PublicKeyFromRaw(keys.publicKey)!;
    const message = Buffer.from('{"a":1}');
    const signature = keys.sign(message);
    expect(ed25519Verify(Buffer.from('{"a":2}'), publicKey, signature)).toBe(false);
    const flipped = Buffer.from(signature);
    flipped[10]! ^= 1;
    expect(ed25519Verify(message, publicKey, flipped)).toBe(false);
    expect(ed25519Verify(message, publicKey, signature.subarray(0, 63))).toBe(false);
  });

  it('checks keys it did not make (exported from a KeyObject)', () => {
    const { publicKey, privateKey } = generateKeyPairSync('ed25519');
    const message = Buffer.from('hello');
    expect(ed25519Verify(message, publicKey, sign(null, message, privateKey))).toBe(true);
    const { publicKey: other } = generateKeyPairSync('ed25519');
    expect(ed25519Verify(message, other, sign(null, message, privateKey))).toBe(false);
  });

  it('refuses a small-order public key, whose "signature" fits every message', () => {
    // The identity point as the key, R = identity and S = 0: [S]B = R + [k]A holds for any
    // message. OpenSSL accepts it; libsodium (and so Synapse) does not.
    const identity = Buffer.alloc(32);
    identity[0] = 1;
    const key = ed25519PublicKeyFromRaw(identity);
    expect(key).toBeDefined();
    const forged = Buffer.concat([identity, Buffer.alloc(32)]);
    expect(ed25519Verify(Buffer.from('anything at all'), key!, forged)).toBe(false);
  });
});
