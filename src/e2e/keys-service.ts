/**
 * End-to-end encryption keys (the client-server spec's "End-to-End Encryption" module): devices
 * upload their identity keys and one-time and fallback keys (`/keys/upload`), other devices read
 * them (`/keys/query`) and take one-time keys to start Olm sessions (`/keys/claim`), and
 * `/keys/changes` and sync's `device_lists` say whose keys changed. The server never sees a
 * private key; it checks that what it stores is signed by the device it claims to be.
 * Users of other servers are not served yet (federation's `/user/keys/...` comes next).
 */
import type { KeyObject } from 'node:crypto';
import { MatrixError } from '../core/errors.js';
import { parseStoredJson } from '../core/json.js';
import { ed25519PublicKey, hasValidSignature } from '../core/signed-json.js';
import type { JsonObject } from '../rooms/events.js';
import type { RoomCache } from '../rooms/room-cache.js';
import { isUserId, serverOf } from '../rooms/ids.js';
import type { Storage, Stores } from '../storage/index.js';
import type { Notifier } from '../sync/notifier.js';
import { writeAtNextPosition, type StreamCounter } from '../sync/stream.js';

/** One-time keys a device may hold: enough for any client (they upload about 50), bounded for the disk. */
export const MAX_ONE_TIME_KEYS_PER_DEVICE = 1_000;
/** Devices and users one query or claim may name. */
const MAX_QUERIED_USERS = 1_000;
const MAX_CLAIMED_KEYS = 1_000;

export interface Device {
  userId: string;
  deviceId: string;
}

export class KeysService {
  constructor(
    private readonly storage: Storage,
    private readonly stream: StreamCounter,
    private readonly notifier: Notifier,
    private readonly cache: RoomCache,
    private readonly serverName: string,
  ) {}

  /** `POST /keys/upload`: the device's own keys; answers how many one-time keys it has left. */
  async upload(device: Device, body: { device_keys?: unknown; one_time_keys?: unknown; fallback_keys?: unknown }): Promise<{ one_time_key_counts: Record<string, number> }> {
    const { userId, deviceId } = device;
    let identity = await this.identityKeys(userId, deviceId);
    let newDeviceKeys: string | undefined;
    if (body.device_keys !== undefined && body.device_keys !== null) {
      const keys = checkedDeviceKeys(body.device_keys, device);
      identity = signingKeysOf(keys, deviceId);
      if (!hasValidSignature(keys, userId, identity)) throw new MatrixError('M_INVALID_PARAM', 'device_keys must be signed with the device’s own ed25519 key', { status: 400 });
      const stored = (await this.storage.e2e.deviceKeys(userId, [deviceId]))[0]?.key_json;
      const json = JSON.stringify(withoutUnsigned(keys));
      if (stored !== json) newDeviceKeys = json;
    }
    const oneTime = checkedKeys(body.one_time_keys, 'one_time_keys', device, identity);
    const fallback = checkedKeys(body.fallback_keys, 'fallback_keys', device, identity);
    if (fallback.length > 1 && new Set(fallback.map((key) => key.algorithm)).size !== fallback.length) {
      throw new MatrixError('M_INVALID_PARAM', 'At most one fallback key per algorithm', { status: 400 });
    }
    for (const key of oneTime) {
      const existing = await this.storage.e2e.oneTimeKey(userId, deviceId, key.algorithm, key.keyId);
      // The same key again is a retry; another key under the same id is a client bug.
      if (existing !== undefined && existing !== key.keyJson) {
        throw new MatrixError('M_INVALID_PARAM', `One time key ${key.algorithm}:${key.keyId} already exists with other content`, { status: 400 });
      }
    }
    const counts = await this.storage.e2e.oneTimeKeyCounts(userId, deviceId);
    const held = Object.values(counts).reduce((sum, n) => sum + n, 0);
    if (held + oneTime.length > MAX_ONE_TIME_KEYS_PER_DEVICE) {
      throw new MatrixError('M_LIMIT_EXCEEDED', `A device may hold at most ${MAX_ONE_TIME_KEYS_PER_DEVICE} one-time keys; claim some first`, { status: 400 });
    }
    if (newDeviceKeys !== undefined) {
      await writeAtNextPosition(this.storage, this.stream, async (stores, position) => {
        await stores.e2e.setDeviceKeys(userId, deviceId, newDeviceKeys!);
        await this.storeKeys(stores, device, oneTime, fallback);
        await stores.e2e.recordDeviceListChange(userId, position);
      });
      await this.tellOthers(userId);
    } else if (oneTime.length > 0 || fallback.length > 0) {
      await this.storage.transaction((stores) => this.storeKeys(stores, device, oneTime, fallback));
    }
    return { one_time_key_counts: await this.oneTimeKeyCounts(userId, deviceId) };
  }

  /** `POST /keys/query`: the identity keys of the devices named (all of a user's for an empty list). */
  async query(body: { device_keys?: unknown }): Promise<JsonObject> {
    const wanted = body.device_keys;
    if (typeof wanted !== 'object' || wanted === null || Array.isArray(wanted)) throw new MatrixError('M_BAD_JSON', 'device_keys must be an object of user ids', { status: 400 });
    const entries = Object.entries(wanted as Record<string, unknown>);
    if (entries.length > MAX_QUERIED_USERS) throw new MatrixError('M_LIMIT_EXCEEDED', `At most ${MAX_QUERIED_USERS} users per query`, { status: 400 });
    const deviceKeys: Record<string, JsonObject> = {};
    const failures: Record<string, JsonObject> = {};
    for (const [userId, devices] of entries) {
      if (!isUserId(userId)) continue;
      if (serverOf(userId) !== this.serverName) {
        failures[serverOf(userId)] = { errcode: 'M_UNRECOGNIZED', error: 'Keys of users of other servers are not served yet' };
        continue;
      }
      const deviceIds = Array.isArray(devices) && devices.length > 0 ? devices.filter((d): d is string => typeof d === 'string') : undefined;
      const names = new Map((await this.storage.sessions.listDevices(userId)).map((d) => [d.device_id, d.display_name]));
      const forUser: JsonObject = {};
      for (const row of await this.storage.e2e.deviceKeys(userId, deviceIds)) {
        const keys = parseStoredJson<JsonObject>(row.key_json, {});
        const name = names.get(row.device_id);
        forUser[row.device_id] = { ...keys, unsigned: name ? { device_display_name: name } : {} };
      }
      deviceKeys[userId] = forUser;
    }
    return { device_keys: deviceKeys, failures, master_keys: {}, self_signing_keys: {}, user_signing_keys: {} };
  }

  /** `POST /keys/claim`: one one-time key per device named, or its fallback key when none is left. */
  async claim(body: { one_time_keys?: unknown }): Promise<JsonObject> {
    const wanted = body.one_time_keys;
    if (typeof wanted !== 'object' || wanted === null || Array.isArray(wanted)) throw new MatrixError('M_BAD_JSON', 'one_time_keys must be an object of user ids', { status: 400 });
    const claims: Array<{ userId: string; deviceId: string; algorithm: string }> = [];
    const failures: Record<string, JsonObject> = {};
    for (const [userId, devices] of Object.entries(wanted as Record<string, unknown>)) {
      if (!isUserId(userId) || typeof devices !== 'object' || devices === null) continue;
      if (serverOf(userId) !== this.serverName) {
        failures[serverOf(userId)] = { errcode: 'M_UNRECOGNIZED', error: 'Keys of users of other servers are not served yet' };
        continue;
      }
      for (const [deviceId, algorithm] of Object.entries(devices as Record<string, unknown>)) {
        if (typeof algorithm === 'string') claims.push({ userId, deviceId, algorithm });
      }
    }
    if (claims.length > MAX_CLAIMED_KEYS) throw new MatrixError('M_LIMIT_EXCEEDED', `At most ${MAX_CLAIMED_KEYS} keys per claim`, { status: 400 });
    const oneTimeKeys: Record<string, Record<string, JsonObject>> = {};
    // One transaction: two claims at once never get the same key.
    await this.storage.transaction(async (stores) => {
      for (const { userId, deviceId, algorithm } of claims) {
        const key = (await stores.e2e.claimOneTimeKey(userId, deviceId, algorithm)) ?? (await stores.e2e.useFallbackKey(userId, deviceId, algorithm));
        if (!key) continue;
        const forUser = (oneTimeKeys[userId] ??= {});
        forUser[deviceId] = { [`${algorithm}:${key.keyId}`]: parseStoredJson<JsonObject | string>(key.keyJson, '') as JsonObject };
      }
    });
    return { one_time_keys: oneTimeKeys, failures };
  }

  /** Users sharing a room with `userId` (and the user) whose device lists changed in (after, upTo]. */
  async changedFor(userId: string, after: number, upTo: number): Promise<string[]> {
    if (after >= upTo) return [];
    const changed = await this.storage.e2e.deviceListChanges(after, upTo);
    if (changed.length === 0) return [];
    const shared = await this.usersSharingRooms(userId);
    return changed.filter((other) => other === userId || shared.has(other)).sort();
  }

  /** For sync: the device's one-time key counts and unused fallback key types. */
  async countsFor(device: Device): Promise<{ counts: Record<string, number>; fallbackTypes: string[] }> {
    return {
      counts: await this.oneTimeKeyCounts(device.userId, device.deviceId),
      fallbackTypes: await this.storage.e2e.unusedFallbackKeyTypes(device.userId, device.deviceId),
    };
  }

  /** Devices of the user were deleted: their keys go, and everyone sharing a room is told. */
  async devicesRemoved(userId: string): Promise<void> {
    let removed = 0;
    await writeAtNextPosition(this.storage, this.stream, async (stores, position) => {
      removed = await stores.e2e.deleteKeysOfRemovedDevices(userId);
      if (removed > 0) await stores.e2e.recordDeviceListChange(userId, position);
    });
    if (removed > 0) await this.tellOthers(userId);
  }

  private async storeKeys(stores: Stores, device: Device, oneTime: readonly KeyToStore[], fallback: readonly KeyToStore[]): Promise<void> {
    await stores.e2e.addOneTimeKeys(device.userId, device.deviceId, oneTime);
    for (const key of fallback) await stores.e2e.setFallbackKey(device.userId, device.deviceId, key);
  }

  private async oneTimeKeyCounts(userId: string, deviceId: string): Promise<Record<string, number>> {
    // Clients read a missing signed_curve25519 as "unknown"; Synapse always says 0.
    return { signed_curve25519: 0, ...(await this.storage.e2e.oneTimeKeyCounts(userId, deviceId)) };
  }

  private async identityKeys(userId: string, deviceId: string): Promise<ReadonlyMap<string, KeyObject>> {
    const stored = (await this.storage.e2e.deviceKeys(userId, [deviceId]))[0];
    return stored ? signingKeysOf(parseStoredJson<JsonObject>(stored.key_json, {}), deviceId) : new Map();
  }

  private async usersSharingRooms(userId: string): Promise<Set<string>> {
    const users = new Set<string>();
    for (const [roomId, entry] of await this.cache.roomsOf(userId)) {
      if (entry.membership !== 'join') continue;
      const room = await this.cache.room(roomId);
      if (room) for (const member of room.joinedUsers()) users.add(member);
    }
    return users;
  }

  /** Wakes the syncs of everyone who shares a room with the user, and the user's own. */
  private async tellOthers(userId: string): Promise<void> {
    const users = await this.usersSharingRooms(userId);
    users.add(userId);
    this.notifier.notify(users);
  }
}

interface KeyToStore {
  algorithm: string;
  keyId: string;
  keyJson: string;
}

function checkedDeviceKeys(value: unknown, device: Device): JsonObject {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new MatrixError('M_BAD_JSON', 'device_keys must be an object', { status: 400 });
  const keys = value as JsonObject;
  if (keys.user_id !== device.userId || keys.device_id !== device.deviceId) {
    throw new MatrixError('M_INVALID_PARAM', 'device_keys.user_id and device_id must be those of the device uploading them', { status: 400 });
  }
  if (!Array.isArray(keys.algorithms) || !keys.algorithms.every((a) => typeof a === 'string')) throw new MatrixError('M_BAD_JSON', 'device_keys.algorithms must be a list of strings', { status: 400 });
  if (typeof keys.keys !== 'object' || keys.keys === null) throw new MatrixError('M_BAD_JSON', 'device_keys.keys must be an object', { status: 400 });
  return keys;
}

/** The device's ed25519 key, as `hasValidSignature` takes keys. */
function signingKeysOf(keys: JsonObject, deviceId: string): ReadonlyMap<string, KeyObject> {
  const keyId = `ed25519:${deviceId}`;
  const base64 = (keys.keys as Record<string, unknown> | undefined)?.[keyId];
  const key = typeof base64 === 'string' ? ed25519PublicKey(base64) : undefined;
  if (!key) throw new MatrixError('M_INVALID_PARAM', `device_keys.keys must hold the device's ${keyId} key`, { status: 400 });
  return new Map([[keyId, key]]);
}

/**
 * One-time or fallback keys: `{"<algorithm>:<key id>": key}`, a key being a string (unsigned
 * curve25519) or an object with `key` and `signatures`, which must carry the device's signature.
 */
function checkedKeys(value: unknown, field: string, device: Device, identity: ReadonlyMap<string, KeyObject>): KeyToStore[] {
  if (value === undefined || value === null) return [];
  if (typeof value !== 'object' || Array.isArray(value)) throw new MatrixError('M_BAD_JSON', `${field} must be an object`, { status: 400 });
  const keys: KeyToStore[] = [];
  for (const [name, key] of Object.entries(value as Record<string, unknown>)) {
    const colon = name.indexOf(':');
    if (colon <= 0 || colon === name.length - 1) throw new MatrixError('M_INVALID_PARAM', `${field}: ${name} is not <algorithm>:<key id>`, { status: 400 });
    if (typeof key === 'object' && key !== null && !Array.isArray(key)) {
      if (typeof (key as JsonObject).key !== 'string') throw new MatrixError('M_BAD_JSON', `${field}: ${name} has no key`, { status: 400 });
      if (identity.size > 0 && !hasValidSignature(key as JsonObject, device.userId, identity)) {
        throw new MatrixError('M_INVALID_PARAM', `${field}: ${name} is not signed by the device`, { status: 400 });
      }
    } else if (typeof key !== 'string') {
      throw new MatrixError('M_BAD_JSON', `${field}: ${name} must be a string or an object`, { status: 400 });
    }
    keys.push({ algorithm: name.slice(0, colon), keyId: name.slice(colon + 1), keyJson: JSON.stringify(key) });
  }
  return keys;
}

function withoutUnsigned(keys: JsonObject): JsonObject {
  const { unsigned: _unsigned, ...rest } = keys;
  return rest;
}
