/**
 * Signing JSON (appendices, "Signing JSON" and "Checking for a Signature"): ed25519 over the
 * canonical JSON of an object without its `signatures` and `unsigned`, signatures in unpadded
 * base64 under `signatures.<entity>.<algorithm>:<key id>`. The ed25519 itself is in ed25519.ts.
 */
import type { KeyObject } from 'node:crypto';
import { ed25519KeyPair, ed25519PublicKeyFromRaw, ed25519Verify } from './ed25519.js';
import { canonicalJsonBytes, canonicalJsonProblem, type CanonicalJsonOptions } from './canonical-json.js';
import { MatrixError } from './errors.js';

/** What signs for this server: its name, the key id (`ed25519:<version>`) and the signature. */
export interface Signer {
  readonly serverName: string;
  readonly keyId: string;
  /** The public key, unpadded base64 (for publishing). */
  readonly publicKey: string;
  sign(data: Buffer): Buffer;
}

export type Signatures = Record<string, Record<string, string>>;

/** Unpadded base64 (standard alphabet). */
export function unpaddedBase64(bytes: Uint8Array): string {
  return Buffer.from(bytes).toString('base64').replace(/=+$/, '');
}

/** Decodes standard or url-safe base64, padded or not; undefined for anything else. */
export function decodeBase64(text: string): Buffer | undefined {
  if (!/^[A-Za-z0-9+/_-]*={0,2}$/.test(text)) return undefined;
  return Buffer.from(text.replace(/-/g, '+').replace(/_/g, '/'), 'base64');
}

/** A signer from a 32-byte ed25519 seed (what Synapse's signing key file holds). */
export function ed25519Signer(serverName: string, keyVersion: string, seed: Buffer): Signer {
  const keys = ed25519KeyPair(seed);
  return { serverName, keyId: `ed25519:${keyVersion}`, publicKey: unpaddedBase64(keys.publicKey), sign: keys.sign };
}

/** An ed25519 public key from its unpadded base64 form, or undefined when it is not one. */
export function ed25519PublicKey(base64: string): KeyObject | undefined {
  const raw = decodeBase64(base64);
  return raw ? ed25519PublicKeyFromRaw(raw) : undefined;
}

/** The bytes a signature covers: canonical JSON without `signatures` and `unsigned`. */
export function signedBytes(object: Record<string, unknown>, options?: CanonicalJsonOptions): Buffer {
  const { signatures: _signatures, unsigned: _unsigned, ...rest } = object;
  return canonicalJsonBytes(rest, options);
}

/** Adds this server's signature to `object` (a copy; the original is left alone). */
export function signJson<T extends Record<string, unknown>>(object: T, signer: Signer): T & { signatures: Signatures } {
  const signature = unpaddedBase64(signer.sign(signedBytes(object)));
  const existing = (object.signatures ?? {}) as Signatures;
  const signatures: Signatures = { ...existing, [signer.serverName]: { ...existing[signer.serverName], [signer.keyId]: signature } };
  return { ...object, signatures };
}

/**
 * Whether `object` carries a valid signature of `entity` by one of `keys` (key id → public key).
 * Signatures by keys not given, or of algorithms other than ed25519, are ignored; at least one
 * known key must have signed, and every known key that signed must verify.
 */
export function hasValidSignature(
  object: Record<string, unknown>,
  entity: string,
  keys: ReadonlyMap<string, KeyObject>,
  options?: CanonicalJsonOptions,
): boolean {
  const signatures = object.signatures;
  if (typeof signatures !== 'object' || signatures === null) return false;
  const mine = (signatures as Record<string, unknown>)[entity];
  if (typeof mine !== 'object' || mine === null) return false;
  let bytes: Buffer | undefined;
  let checked = 0;
  for (const [keyId, signature] of Object.entries(mine as Record<string, unknown>)) {
    if (!keyId.startsWith('ed25519:') || typeof signature !== 'string') continue;
    const key = keys.get(keyId);
    if (!key) continue;
    const raw = decodeBase64(signature);
    if (!raw || raw.length !== 64) return false;
    bytes ??= signedBytes(object, options);
    if (!ed25519Verify(bytes, key, raw)) return false;
    checked += 1;
  }
  return checked > 0;
}

/**
 * What a client hands in to be signed or checked must be canonical JSON (no floats, no integers
 * beyond 2^53): otherwise no signature over it can be checked, and the client is told so.
 */
export function assertSignable(value: unknown, what: string): void {
  const problem = canonicalJsonProblem(value);
  if (problem !== undefined) throw new MatrixError('M_BAD_JSON', `${what} is not canonical JSON: ${problem}`, { status: 400 });
}
