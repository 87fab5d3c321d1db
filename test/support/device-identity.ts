/** A client device's ed25519 identity for tests: signs keys as the SDKs do. */
import { generateKeyPairSync, sign, type KeyObject } from 'node:crypto';
import { signedBytes, unpaddedBase64 } from '../../src/core/signed-json.js';
import type { Json } from './client.js';

/** A device's ed25519 identity, signing as the real SDKs do (canonical JSON without signatures and unsigned). */
export class DeviceIdentity {
  private readonly privateKey: KeyObject;
  readonly publicKey: string;
  constructor(
    readonly userId: string,
    readonly deviceId: string,
  ) {
    const pair = generateKeyPairSync('ed25519');
    this.privateKey = pair.privateKey;
    this.publicKey = unpaddedBase64(pair.publicKey.export({ format: 'der', type: 'spki' }).subarray(-32));
  }

  signed<T extends Json>(object: T): T {
    const signature = unpaddedBase64(sign(null, signedBytes(object), this.privateKey));
    return { ...object, signatures: { [this.userId]: { [`ed25519:${this.deviceId}`]: signature } } };
  }

  deviceKeys(): Json {
    return this.signed({
      user_id: this.userId,
      device_id: this.deviceId,
      algorithms: ['m.olm.v1.curve25519-aes-sha2', 'm.megolm.v1.aes-sha2'],
      keys: { [`curve25519:${this.deviceId}`]: unpaddedBase64(Buffer.alloc(32, 7)), [`ed25519:${this.deviceId}`]: this.publicKey },
    });
  }

  oneTimeKeys(ids: string[]): Json {
    return Object.fromEntries(ids.map((id) => [`signed_curve25519:${id}`, this.signed({ key: unpaddedBase64(Buffer.alloc(32, id.charCodeAt(0))) })]));
  }
}


/** A cross-signing key (master, self-signing or user-signing) of a user, for tests. */
export class CrossSigningKey {
  private readonly privateKey: KeyObject;
  readonly publicKey: string;
  constructor(
    readonly userId: string,
    readonly usage: 'master' | 'self_signing' | 'user_signing',
  ) {
    const pair = generateKeyPairSync('ed25519');
    this.privateKey = pair.privateKey;
    this.publicKey = unpaddedBase64(pair.publicKey.export({ format: 'der', type: 'spki' }).subarray(-32));
  }

  get keyId(): string {
    return `ed25519:${this.publicKey}`;
  }

  /** The key as uploaded, signed by `signer` when given (the master key signs the other two). */
  object(signer?: CrossSigningKey): Json {
    const key = { user_id: this.userId, usage: [this.usage], keys: { [this.keyId]: this.publicKey } };
    return signer ? signer.sign(key) : key;
  }

  /** `object` with this key's signature added (as `userId`'s). */
  sign<T extends Json>(object: T): T {
    const signature = unpaddedBase64(sign(null, signedBytes(object), this.privateKey));
    const existing = (object.signatures ?? {}) as Record<string, Record<string, string>>;
    return { ...object, signatures: { ...existing, [this.userId]: { ...existing[this.userId], [this.keyId]: signature } } };
  }
}
