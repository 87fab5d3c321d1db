/**
 * Cross-signing (the spec's "Cross-signing"): a user's master key, and the self-signing key
 * (signs the user's own devices) and user-signing key (signs other users' master keys) it signs.
 * Uploading them replaces what was there, so a second upload needs the password again (the first
 * one does not, as Synapse decides since MSC3967); signatures made with them are checked before
 * they are kept. Users see others' master and self-signing keys, and only their own user-signing
 * key and the signatures they made of others.
 */
import type { KeyObject } from 'node:crypto';
import { MatrixError } from '../core/errors.js';
import { parseStoredJson } from '../core/json.js';
import { assertSignable, ed25519PublicKey, hasValidSignature, signedBytes } from '../core/signed-json.js';
import type { JsonObject } from '../rooms/events.js';
import type { Storage } from '../storage/index.js';

export type CrossSigningType = 'master' | 'self_signing' | 'user_signing';
const TYPES: readonly CrossSigningType[] = ['master', 'self_signing', 'user_signing'];
const BODY_FIELD: Record<CrossSigningType, string> = { master: 'master_key', self_signing: 'self_signing_key', user_signing: 'user_signing_key' };

/** How changes of cross-signing keys and signatures are announced (device-list changes). */
export interface KeyChanges {
  /** The user's public keys changed: those sharing a room are told, other servers get `edus`. */
  keysChanged(userId: string, edus: ReadonlyArray<{ edu_type: string; content: JsonObject }>): Promise<void>;
  /** Only `toldUserId` is told that the keys of `userIds` changed; no other server hears of it. */
  toldOnly(toldUserId: string, userIds: readonly string[]): Promise<void>;
  /** Devices of the user were signed by the self-signing key: their new keys go to other servers. */
  devicesSigned(userId: string, deviceIds: readonly string[]): Promise<void>;
}

export class CrossSigningService {
  constructor(
    private readonly storage: Storage,
    private readonly changes: KeyChanges,
  ) {}

  /** Whether this upload replaces keys the user has (then it needs the password again). */
  async uploadNeedsAuth(userId: string, body: JsonObject): Promise<boolean> {
    const stored = await this.storage.e2e.crossSigningKeys(userId);
    if (stored.master === undefined) return false;
    return TYPES.some((type) => {
      const given = body[BODY_FIELD[type]];
      return given !== undefined && stored[type] !== JSON.stringify(given);
    });
  }

  /** `POST /keys/device_signing/upload` (after any user-interactive auth). */
  async upload(userId: string, body: JsonObject): Promise<void> {
    const stored = await this.storage.e2e.crossSigningKeys(userId);
    const given: Partial<Record<CrossSigningType, JsonObject>> = {};
    for (const type of TYPES) {
      const value = body[BODY_FIELD[type]];
      if (value !== undefined) given[type] = checkedKey(value, userId, type);
    }
    const master = given.master ?? (stored.master ? parseStoredJson<JsonObject>(stored.master, {}) : undefined);
    if (!master) throw new MatrixError('M_MISSING_PARAM', 'master_key is required the first time', { status: 400 });
    const masterKeys = publicKeyMap(master);
    for (const type of ['self_signing', 'user_signing'] as const) {
      const key = given[type];
      if (key && !hasValidSignature(key, userId, masterKeys)) throw new MatrixError('M_INVALID_SIGNATURE', `${BODY_FIELD[type]} must be signed by the master key`, { status: 400 });
    }
    if (Object.keys(given).length === 0) return;
    await this.storage.transaction(async (stores) => {
      for (const [type, key] of Object.entries(given)) await stores.e2e.setCrossSigningKey(userId, type, JSON.stringify(key));
    });
    const content: JsonObject = { user_id: userId };
    if (given.master) content.master_key = given.master;
    if (given.self_signing) content.self_signing_key = given.self_signing;
    // Other servers learn of the public keys; the user-signing key stays with its owner, and only
    // the owner is told it changed (as Synapse).
    if (given.master !== undefined || given.self_signing !== undefined) await this.changes.keysChanged(userId, [{ edu_type: 'm.signing_key_update', content }]);
    if (given.user_signing !== undefined) await this.changes.toldOnly(userId, [userId]);
  }

  /** `POST /keys/signatures/upload`: signatures of the user's devices and master key, and of others' master keys. */
  async uploadSignatures(userId: string, body: JsonObject): Promise<{ failures: Record<string, Record<string, JsonObject>> }> {
    const failures: Record<string, Record<string, JsonObject>> = {};
    const fail = (target: string, keyId: string, errcode: string, error: string) => ((failures[target] ??= {})[keyId] = { errcode, error });
    const mine = await this.storage.e2e.crossSigningKeys(userId);
    const master = mine.master ? parseStoredJson<JsonObject>(mine.master, {}) : undefined;
    const selfSigning = mine.self_signing ? publicKeyMap(parseStoredJson<JsonObject>(mine.self_signing, {})) : undefined;
    const userSigning = mine.user_signing ? publicKeyMap(parseStoredJson<JsonObject>(mine.user_signing, {})) : undefined;
    const signedDevices: string[] = [];
    let signedMaster = false;
    const signedUsers: string[] = [];
    for (const [target, keys] of Object.entries(body)) {
      if (typeof keys !== 'object' || keys === null || Array.isArray(keys)) continue;
      for (const [keyId, signed] of Object.entries(keys as Record<string, unknown>)) {
        if (typeof signed !== 'object' || signed === null || Array.isArray(signed)) {
          fail(target, keyId, 'M_BAD_JSON', 'Not an object');
          continue;
        }
        const object = signed as JsonObject;
        try {
          assertSignable(object, `${target} ${keyId}`);
        } catch (err) {
          fail(target, keyId, 'M_BAD_JSON', (err as Error).message);
          continue;
        }
        if (target === userId) {
          const result = await this.signOwn(userId, keyId, object, master, selfSigning);
          if (result !== true) fail(target, keyId, result.errcode, result.error);
          else if (master && publicKeyOf(master) === keyId) signedMaster = true;
          else signedDevices.push(keyId);
        } else {
          const result = await this.signOther(userId, target, keyId, object, userSigning);
          if (result === 'new') signedUsers.push(target);
          else if (result !== 'known') fail(target, keyId, result.errcode, result.error);
        }
      }
    }
    // As Synapse: a signed device goes to other servers as an m.device_list_update with its keys,
    // a signed master key as an m.signing_key_update.
    if (signedDevices.length > 0) await this.changes.devicesSigned(userId, signedDevices);
    if (signedMaster) {
      const stored = (await this.storage.e2e.crossSigningKeys(userId)).master;
      await this.changes.keysChanged(userId, stored ? [{ edu_type: 'm.signing_key_update', content: { user_id: userId, master_key: parseStoredJson<JsonObject>(stored, {}) } }] : []);
    }
    // Signatures of others' master keys are shown to the signer only: the signer alone is told
    // that those users' keys changed (so that their client queries them again), and neither the
    // signed users nor other servers hear of it (as Synapse's user_signature_stream).
    await this.changes.toldOnly(userId, signedUsers);
    return { failures };
  }

  /** What `/keys/query` shows `viewer` of `userId`'s cross-signing keys. */
  async keysFor(viewer: string, userId: string): Promise<Partial<Record<CrossSigningType, JsonObject>>> {
    const stored = await this.storage.e2e.crossSigningKeys(userId);
    const shown: Partial<Record<CrossSigningType, JsonObject>> = {};
    if (stored.master) {
      const master = parseStoredJson<JsonObject>(stored.master, {});
      // The viewer's own signatures of this master key, made with their user-signing key (not
      // those of a master key the user has replaced since).
      const keyId = publicKeyOf(master);
      for (const row of viewer === userId || viewer === '' ? [] : await this.storage.e2e.crossSigningSignaturesBy(viewer, userId)) {
        if (row.target_key_id !== keyId) continue;
        const signatures = { ...((master.signatures ?? {}) as Record<string, Record<string, string>>) };
        signatures[viewer] = { ...signatures[viewer], [row.key_id]: row.signature };
        master.signatures = signatures;
      }
      shown.master = master;
    }
    if (stored.self_signing) shown.self_signing = parseStoredJson<JsonObject>(stored.self_signing, {});
    if (stored.user_signing && viewer === userId) shown.user_signing = parseStoredJson<JsonObject>(stored.user_signing, {});
    return shown;
  }

  /** A signature of one of the user's devices (by the self-signing key) or of the master key (by a device). */
  private async signOwn(userId: string, keyId: string, object: JsonObject, master: JsonObject | undefined, selfSigning: ReadonlyMap<string, KeyObject> | undefined): Promise<true | { errcode: string; error: string }> {
    if (master && publicKeyOf(master) === keyId) {
      // The master key, signed by one of the user's devices.
      const devices = new Map<string, KeyObject>();
      for (const row of await this.storage.e2e.deviceKeys(userId)) {
        const keys = parseStoredJson<JsonObject>(row.key_json, {});
        const key = ed25519PublicKey(String((keys.keys as Record<string, unknown> | undefined)?.[`ed25519:${row.device_id}`] ?? ''));
        if (key) devices.set(`ed25519:${row.device_id}`, key);
      }
      if (!sameKey(object, master)) return { errcode: 'M_INVALID_PARAM', error: 'The signed object is not the master key' };
      if (!hasValidSignature(object, userId, devices)) return { errcode: 'M_INVALID_SIGNATURE', error: 'Not signed by one of your devices' };
      await this.storage.e2e.setCrossSigningKey(userId, 'master', JSON.stringify(mergedSignatures(master, object, userId, devices)));
      return true;
    }
    const [device] = await this.storage.e2e.deviceKeys(userId, [keyId]);
    if (!device) return { errcode: 'M_NOT_FOUND', error: 'No such device or key' };
    if (!selfSigning) return { errcode: 'M_MISSING_PARAM', error: 'Upload a self-signing key first' };
    const keys = parseStoredJson<JsonObject>(device.key_json, {});
    if (!sameKey(object, keys)) return { errcode: 'M_INVALID_PARAM', error: 'The signed object is not this device’s keys' };
    if (!hasValidSignature(object, userId, selfSigning)) return { errcode: 'M_INVALID_SIGNATURE', error: 'Not signed by your self-signing key' };
    await this.storage.e2e.setDeviceKeys(userId, keyId, JSON.stringify(mergedSignatures(keys, object, userId, selfSigning)));
    return true;
  }

  /** A signature of another user's master key, by the user's user-signing key: `known` when it was kept already. */
  private async signOther(userId: string, target: string, keyId: string, object: JsonObject, userSigning: ReadonlyMap<string, KeyObject> | undefined): Promise<'new' | 'known' | { errcode: string; error: string }> {
    if (!userSigning) return { errcode: 'M_MISSING_PARAM', error: 'Upload a user-signing key first' };
    const stored = await this.storage.e2e.crossSigningKeys(target);
    const master = stored.master ? parseStoredJson<JsonObject>(stored.master, {}) : undefined;
    if (!master || publicKeyOf(master) !== keyId) return { errcode: 'M_NOT_FOUND', error: 'Not that user’s master key' };
    if (!sameKey(object, master)) return { errcode: 'M_INVALID_PARAM', error: 'The signed object is not that master key' };
    if (!hasValidSignature(object, userId, userSigning)) return { errcode: 'M_INVALID_SIGNATURE', error: 'Not signed by your user-signing key' };
    const signatures = ((object.signatures as Record<string, Record<string, string>>)[userId] ?? {}) as Record<string, string>;
    const kept = new Map((await this.storage.e2e.crossSigningSignaturesBy(userId, target)).filter((row) => row.target_key_id === keyId).map((row) => [row.key_id, row.signature]));
    let added = false;
    for (const [signingKeyId, signature] of Object.entries(signatures)) {
      if (!userSigning.has(signingKeyId) || kept.get(signingKeyId) === signature) continue;
      await this.storage.e2e.addCrossSigningSignature({ signer_user_id: userId, target_user_id: target, target_key_id: keyId, key_id: signingKeyId, signature });
      added = true;
    }
    return added ? 'new' : 'known';
  }
}

function checkedKey(value: unknown, userId: string, type: CrossSigningType): JsonObject {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new MatrixError('M_BAD_JSON', `${BODY_FIELD[type]} must be an object`, { status: 400 });
  assertSignable(value, BODY_FIELD[type]);
  const key = value as JsonObject;
  if (key.user_id !== userId) throw new MatrixError('M_INVALID_PARAM', `${BODY_FIELD[type]}.user_id must be yours`, { status: 400 });
  if (!Array.isArray(key.usage) || !key.usage.includes(type)) throw new MatrixError('M_INVALID_PARAM', `${BODY_FIELD[type]}.usage must include ${type}`, { status: 400 });
  if (publicKeyOf(key) === undefined) throw new MatrixError('M_INVALID_PARAM', `${BODY_FIELD[type]}.keys must hold one ed25519 key, named by itself`, { status: 400 });
  return key;
}

/** The key's one ed25519 public key, when its id names it (`ed25519:<key>`). */
function publicKeyOf(key: JsonObject): string | undefined {
  const entries = Object.entries((key.keys ?? {}) as Record<string, unknown>);
  if (entries.length !== 1) return undefined;
  const [id, value] = entries[0]!;
  return typeof value === 'string' && id === `ed25519:${value}` && ed25519PublicKey(value) ? value : undefined;
}

function publicKeyMap(key: JsonObject): ReadonlyMap<string, KeyObject> {
  const publicKey = publicKeyOf(key);
  const object = publicKey ? ed25519PublicKey(publicKey) : undefined;
  return object ? new Map([[`ed25519:${publicKey}`, object]]) : new Map();
}

/** The same key apart from signatures (and what is unsigned): the bytes a signature covers. */
function sameKey(a: JsonObject, b: JsonObject): boolean {
  try {
    return signedBytes(a).equals(signedBytes(b));
  } catch {
    // Not canonical JSON (a float, say): not a key this server holds.
    return false;
  }
}

/** `stored` with the checked signatures of `signer` from `signed` added. */
function mergedSignatures(stored: JsonObject, signed: JsonObject, signer: string, by: ReadonlyMap<string, KeyObject>): JsonObject {
  const signatures = { ...((stored.signatures ?? {}) as Record<string, Record<string, string>>) };
  const given = ((signed.signatures as Record<string, Record<string, string>> | undefined)?.[signer] ?? {}) as Record<string, string>;
  const added = Object.fromEntries(Object.entries(given).filter(([id]) => by.has(id)));
  signatures[signer] = { ...signatures[signer], ...added };
  return { ...stored, signatures };
}
