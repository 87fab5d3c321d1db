/**
 * End-to-end encryption keys (the client-server spec's "End-to-End Encryption" module): devices
 * upload their identity keys and one-time and fallback keys (`/keys/upload`), other devices read
 * them (`/keys/query`) and take one-time keys to start Olm sessions (`/keys/claim`), and
 * `/keys/changes` and sync's `device_lists` say whose keys changed. The server never sees a
 * private key; it checks that what it stores, or hands on from another server, is signed by the
 * device it claims to be. Users of other servers are asked of their server (federation's
 * `/user/keys/query` and `/user/keys/claim`), and device-list changes travel both ways as
 * `m.device_list_update` EDUs.
 */
import type { KeyObject } from 'node:crypto';
import { MatrixError } from '../core/errors.js';
import { parseStoredJson } from '../core/json.js';
import { assertSignable, ed25519PublicKey, hasValidSignature } from '../core/signed-json.js';
import type { JsonObject } from '../rooms/events.js';
import type { RoomCache } from '../rooms/room-cache.js';
import { isUserId, serverOf } from '../rooms/ids.js';
import type { Storage, Stores } from '../storage/index.js';
import type { Notifier } from '../sync/notifier.js';
import { writeAtNextPosition, type StreamCounter, type StreamEffects } from '../sync/stream.js';
import { CrossSigningService } from './cross-signing.js';
import { BoundedCache } from '../core/bounded-cache.js';
import { KeyedQueue } from '../core/keyed-queue.js';

/** One-time keys a device may hold: enough for any client (they upload about 50), bounded for the disk. */
export const MAX_ONE_TIME_KEYS_PER_DEVICE = 1_000;
/** Devices and users one query or claim may name. */
const MAX_QUERIED_USERS = 1_000;
const MAX_CLAIMED_KEYS = 1_000;

export interface Device {
  userId: string;
  deviceId: string;
}

/** Other servers, for the keys of their users and to tell them of ours. */
export interface RemoteKeys {
  query(server: string, deviceKeys: Record<string, string[]>, timeoutMs: number): Promise<JsonObject>;
  claim(server: string, oneTimeKeys: Record<string, Record<string, string>>, timeoutMs: number): Promise<JsonObject>;
  /** Queues EDUs (`m.device_list_update`, `m.signing_key_update`) for the servers. */
  sendEdus(servers: readonly string[], edus: readonly Edu[]): void;
  /** Federation's `GET /user/devices/{userId}` of the user's server (a resync). */
  devices?(server: string, userId: string, timeoutMs: number): Promise<JsonObject>;
  /** Whether a resync with this server may start now (a per-server rate limit); true when absent. */
  mayResync?(server: string): boolean;
}

interface RemoteUserKeys {
  devices: JsonObject;
  master?: JsonObject;
  selfSigning?: JsonObject;
  /** Date.now() after which the entry is not used. */
  until: number;
}

/** How long another server's answer is used without a device-list update. */
const REMOTE_KEYS_TTL_MS = 5 * 60_000;
const MAX_CACHED_REMOTE_USERS = 10_000;
const MAX_CACHED_DEVICE_COUNTS = 10_000;
/**
 * A sync reads the device-list changes of the user and their roommates one user at a time below
 * this many roommates, and every change in its window above (a user in big rooms, where most
 * changes concern them anyway).
 */
const CHANGES_BY_USER_MAX = 2_000;
/**
 * The most devices kept of one user of another server (a resync's answer beyond it is cut): a
 * hostile server cannot make us hold an unbounded list. Synapse's clients see far fewer.
 */
export const MAX_REMOTE_DEVICES_PER_USER = 1_000;
/** Resyncs one server's updates may start: a burst of 10, then one every 10 seconds. */
export const DEVICE_LIST_RESYNCS_PER_ORIGIN = { per_second: 0.1, burst_count: 10 };
/** Resyncs running at once, over every server; past it an update only marks the keys stale. */
const MAX_CONCURRENT_RESYNCS = 20;
/** How long a resync waits for the other server. */
const RESYNC_TIMEOUT_MS = 30_000;
/** A device display name longer than this from another server is left out. */
const MAX_REMOTE_DISPLAY_NAME_LENGTH = 1_000;

/** One device's part of a change of a local user's device list, as `m.device_list_update` says it. */
interface DeviceUpdate {
  deviceId: string;
  deleted: boolean;
  keys?: JsonObject;
}

interface SigningKeys {
  master_keys: Record<string, JsonObject>;
  self_signing_keys: Record<string, JsonObject>;
  user_signing_keys: Record<string, JsonObject>;
}

export interface Edu {
  edu_type: string;
  content: JsonObject;
}

/** How long a query or claim waits for other servers by default (the spec's `timeout`). */
const DEFAULT_REMOTE_TIMEOUT_MS = 10_000;

export class KeysService {
  /** Cross-signing keys and signatures; their changes are device-list changes too. */
  readonly crossSigning: CrossSigningService;
  /**
   * Other servers' users' keys, as their server last answered: kept until an
   * `m.device_list_update` or `m.signing_key_update` for the user says they changed, and for a
   * few minutes at most (an update can be lost while no room is shared).
   */
  private readonly remoteCache = new BoundedCache<string, RemoteUserKeys>(MAX_CACHED_REMOTE_USERS);
  /**
   * The newest device-list change's position: a sync with a token at or past it has nothing to
   * ask (most syncs). Raised inside the transaction that records a change, before it commits, so a
   * reader whose token covers the change always sees it raised.
   */
  private latestChange: number | undefined;
  /** Devices' one-time key counts and unused fallback key types, read by every sync of the device. */
  private readonly counts = new BoundedCache<string, { counts: Record<string, number>; fallbackTypes: string[] }>(MAX_CACHED_DEVICE_COUNTS);
  /** Inbound `m.device_list_update`s of one remote user are applied one at a time, in order. */
  private readonly inbound = new KeyedQueue<string>();
  /** Remote users being resynced; `true` when another update came meanwhile (one more resync). */
  private readonly resyncing = new Map<string, boolean>();

  constructor(
    private readonly storage: Storage,
    private readonly stream: StreamCounter,
    private readonly notifier: Notifier,
    private readonly cache: RoomCache,
    private readonly serverName: string,
    private readonly remote?: RemoteKeys | undefined,
  ) {
    this.crossSigning = new CrossSigningService(storage, {
      keysChanged: (userId, edus) => this.recordChange(userId, edus),
      toldOnly: (toldUserId, userIds) => this.recordChangesToldTo(toldUserId, userIds),
      devicesSigned: (userId, deviceIds) => this.devicesChanged(userId, deviceIds),
    });
  }

  /** A change of the user's keys: recorded at a stream position, and everyone concerned told. */
  private async recordChange(userId: string, edus: readonly Edu[]): Promise<void> {
    await writeAtNextPosition(this.storage, this.stream, (stores, position, effects) => this.recordDeviceListChange(stores, userId, position, effects));
    await this.tellOthers(userId, edus);
  }

  /**
   * Changes only `toldUserId` is told of, at one stream position: that the keys of `userIds`
   * changed (their own new user-signing key, or their signatures of others' master keys, which
   * nobody else sees). No other server hears of them.
   */
  private async recordChangesToldTo(toldUserId: string, userIds: readonly string[]): Promise<void> {
    if (userIds.length === 0) return;
    await writeAtNextPosition(this.storage, this.stream, async (stores, position, effects) => {
      for (const userId of new Set(userIds)) await this.recordDeviceListChange(stores, userId, position, effects, toldUserId);
    });
    this.notifier.notify([toldUserId]);
  }

  /** `POST /keys/upload`: the device's own keys; answers how many one-time keys it has left. */
  async upload(device: Device, body: { device_keys?: unknown; one_time_keys?: unknown; fallback_keys?: unknown }): Promise<{ one_time_key_counts: Record<string, number> }> {
    const { userId, deviceId } = device;
    // The device's keys as stored: what signs its other keys, unless this upload brings new ones.
    const stored = (await this.storage.e2e.deviceKeys(userId, [deviceId]))[0]?.key_json;
    let identity = stored === undefined ? new Map<string, KeyObject>() : signingKeysOf(parseStoredJson<JsonObject>(stored, {}), deviceId);
    let newDeviceKeys: string | undefined;
    if (body.device_keys !== undefined && body.device_keys !== null) {
      const keys = checkedDeviceKeys(body.device_keys, device);
      identity = signingKeysOf(keys, deviceId);
      if (!hasValidSignature(keys, userId, identity)) throw new MatrixError('M_INVALID_PARAM', 'device_keys must be signed with the device’s own ed25519 key', { status: 400 });
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
      await this.localDevicesChanged(userId, async (stores) => {
        await stores.e2e.setDeviceKeys(userId, deviceId, newDeviceKeys!);
        await this.storeKeys(stores, device, oneTime, fallback);
        return [{ deviceId, deleted: false, keys: JSON.parse(newDeviceKeys!) as JsonObject }];
      });
    } else if (oneTime.length > 0 || fallback.length > 0) {
      await this.storage.transaction((stores) => this.storeKeys(stores, device, oneTime, fallback));
    }
    this.countsChanged(userId, deviceId);
    return { one_time_key_counts: await this.oneTimeKeyCounts(userId, deviceId) };
  }

  /** `POST /keys/query`: the identity keys of the devices named (all of a user's for an empty list). */
  async query(viewer: string, body: { device_keys?: unknown; timeout?: unknown }): Promise<JsonObject> {
    const wanted = userMap(body.device_keys, 'device_keys');
    const deviceKeys: Record<string, JsonObject> = {};
    const failures: Record<string, JsonObject> = {};
    const signingKeys: SigningKeys = { master_keys: {}, self_signing_keys: {}, user_signing_keys: {} };
    const remote = new Map<string, Record<string, string[]>>();
    for (const [userId, devices] of Object.entries(wanted)) {
      if (!isUserId(userId)) continue;
      const deviceIds = Array.isArray(devices) ? devices.filter((d): d is string => typeof d === 'string') : [];
      if (serverOf(userId) === this.serverName) {
        deviceKeys[userId] = await this.localDeviceKeys(userId, deviceIds);
        await this.addSigningKeys(signingKeys, viewer, userId);
      } else {
        const cached = this.remoteCache.get(userId);
        if (cached && cached.until > Date.now()) {
          deviceKeys[userId] = deviceIds.length > 0 ? Object.fromEntries(Object.entries(cached.devices).filter(([id]) => deviceIds.includes(id))) : cached.devices;
          if (cached.master) signingKeys.master_keys[userId] = cached.master;
          if (cached.selfSigning) signingKeys.self_signing_keys[userId] = cached.selfSigning;
          continue;
        }
        // All of the user's devices are asked for, so that the answer can be kept whole.
        const forServer = remote.get(serverOf(userId)) ?? {};
        forServer[userId] = [];
        remote.set(serverOf(userId), forServer);
      }
    }
    await Promise.all(
      [...remote].map(async ([server, users]) => {
        const generation = this.remoteCache.generation;
        try {
          const answer = await this.askRemote((remote, timeout) => remote.query(server, users, timeout), body.timeout);
          const theirs = (answer.device_keys ?? {}) as Record<string, unknown>;
          for (const userId of Object.keys(users)) {
            const entry: RemoteUserKeys = { devices: checkedRemoteDevices(userId, theirs[userId]), until: Date.now() + REMOTE_KEYS_TTL_MS };
            // Their public cross-signing keys, when they are that user's.
            const master = ((answer.master_keys ?? {}) as Record<string, unknown>)[userId];
            const selfSigning = ((answer.self_signing_keys ?? {}) as Record<string, unknown>)[userId];
            if (typeof master === 'object' && master !== null && (master as JsonObject).user_id === userId) entry.master = master as JsonObject;
            if (typeof selfSigning === 'object' && selfSigning !== null && (selfSigning as JsonObject).user_id === userId) entry.selfSigning = selfSigning as JsonObject;
            this.remoteCache.setIfUnchanged(userId, entry, generation);
            const wantedIds = ((wanted[userId] as unknown[] | undefined) ?? []).filter((d): d is string => typeof d === 'string');
            deviceKeys[userId] = wantedIds.length > 0 ? Object.fromEntries(Object.entries(entry.devices).filter(([id]) => wantedIds.includes(id))) : entry.devices;
            if (entry.master) signingKeys.master_keys[userId] = entry.master;
            if (entry.selfSigning) signingKeys.self_signing_keys[userId] = entry.selfSigning;
          }
        } catch (err) {
          failures[server] = failureOf(err);
        }
      }),
    );
    return { device_keys: deviceKeys, failures, ...signingKeys };
  }

  /** Federation's `POST /user/keys/query`: the keys of this server's users only. */
  async queryForServer(body: { device_keys?: unknown }): Promise<JsonObject> {
    const deviceKeys: Record<string, JsonObject> = {};
    const signingKeys: SigningKeys = { master_keys: {}, self_signing_keys: {}, user_signing_keys: {} };
    for (const [userId, devices] of Object.entries(userMap(body.device_keys, 'device_keys'))) {
      if (!isUserId(userId) || serverOf(userId) !== this.serverName) continue;
      deviceKeys[userId] = await this.localDeviceKeys(userId, Array.isArray(devices) ? devices.filter((d): d is string => typeof d === 'string') : []);
      await this.addSigningKeys(signingKeys, '', userId);
    }
    return { device_keys: deviceKeys, master_keys: signingKeys.master_keys, self_signing_keys: signingKeys.self_signing_keys };
  }

  private async addSigningKeys(into: SigningKeys, viewer: string, userId: string): Promise<void> {
    const keys = await this.crossSigning.keysFor(viewer, userId);
    if (keys.master) into.master_keys[userId] = keys.master;
    if (keys.self_signing) into.self_signing_keys[userId] = keys.self_signing;
    if (keys.user_signing) into.user_signing_keys[userId] = keys.user_signing;
  }

  /** Federation's `GET /user/devices/{userId}`: every device of a user of this server, with its keys. */
  async devicesForServer(userId: string): Promise<JsonObject> {
    const keys = await this.localDeviceKeys(userId, []);
    const devices = (await this.storage.sessions.listDevices(userId)).map((device) => ({
      device_id: device.device_id,
      ...(keys[device.device_id] ? { keys: withoutUnsigned(keys[device.device_id] as JsonObject) } : {}),
      ...(device.display_name ? { device_display_name: device.display_name } : {}),
    }));
    const signing = await this.crossSigning.keysFor('', userId);
    return {
      user_id: userId,
      // The last update sent: the next one names it as prev_id, so the asker can apply it.
      stream_id: (await this.storage.e2e.deviceListStreamId(userId)) ?? 0,
      devices,
      ...(signing.master ? { master_key: signing.master } : {}),
      ...(signing.self_signing ? { self_signing_key: signing.self_signing } : {}),
    };
  }

  /**
   * An `m.signing_key_update` EDU: a user of `origin` changed cross-signing keys; those sharing a
   * room are told, and the keys are asked for again.
   */
  async receiveSigningKeyUpdate(origin: string, content: JsonObject): Promise<void> {
    const userId = content.user_id;
    if (typeof userId !== 'string' || !isUserId(userId) || serverOf(userId) !== origin) return;
    if (!(await this.sharedWithLocalUsers(userId))) return;
    await this.remoteKeysChanged(userId);
  }

  /**
   * An `m.device_list_update` EDU: a user of `origin` changed devices. Applied in order: one whose
   * `prev_id` is the last `stream_id` applied here marks the user's keys stale; one already seen is
   * dropped; any other (an update was lost, or the user is new to us) brings a resync, the user's
   * whole device list fetched from their server. Updates about users who share no room with ours
   * are dropped (nobody here needs them), and the user is forgotten, so a later one resyncs.
   */
  async receiveDeviceListUpdate(origin: string, content: JsonObject): Promise<void> {
    const userId = content.user_id;
    const streamId = content.stream_id;
    if (typeof userId !== 'string' || !isUserId(userId) || serverOf(userId) !== origin) return;
    if (typeof streamId !== 'number' || !Number.isSafeInteger(streamId) || streamId < 0) return;
    const prevIds = Array.isArray(content.prev_id) ? content.prev_id : [];
    await this.inbound.run(userId, async () => {
      if (!(await this.sharedWithLocalUsers(userId))) {
        await this.storage.e2e.forgetDeviceListStreamId(userId);
        return;
      }
      const applied = await this.storage.e2e.deviceListStreamId(userId);
      if (applied !== undefined && streamId <= applied) return;
      if (applied !== undefined && prevIds.every((prev) => prev === applied)) {
        await this.remoteKeysChanged(userId, streamId);
        return;
      }
      this.resyncInBackground(origin, userId, streamId);
    });
  }

  /** Whether a user of this server shares a room with `userId`. */
  private async sharedWithLocalUsers(userId: string): Promise<boolean> {
    for (const other of await this.cache.roommates(userId)) if (serverOf(other) === this.serverName) return true;
    return false;
  }

  /**
   * A remote user's keys changed: what was kept of them is stale (the next query asks their
   * server, unless `fresh` is what a resync just fetched), the change is recorded at a stream
   * position, with the `stream_id` applied, and their roommates here are woken.
   */
  private async remoteKeysChanged(userId: string, streamId?: number, fresh?: RemoteUserKeys): Promise<void> {
    if (fresh) this.remoteCache.set(userId, fresh);
    else this.remoteCache.delete(userId);
    await writeAtNextPosition(this.storage, this.stream, async (stores, position, effects) => {
      if (streamId !== undefined) await stores.e2e.setDeviceListStreamId(userId, streamId);
      await this.recordDeviceListChange(stores, userId, position, effects);
    });
    // Their roommates here (waking a remote user's "sync" would do nothing).
    const users = [...(await this.cache.roommates(userId))].filter((other) => serverOf(other) === this.serverName);
    if (users.length > 0) this.notifier.notify(users);
  }

  /**
   * Fetches a remote user's whole device list (`GET /user/devices/{userId}`), after it ends the
   * request that brought the update. At most one resync per user at a time (an update during one
   * brings one more after it), at most MAX_CONCURRENT_RESYNCS in all, and as the per-server limit
   * allows; an update that cannot resync now still marks the keys stale and leaves the user
   * unsynced, so that the next update tries again.
   */
  private resyncInBackground(origin: string, userId: string, streamId: number): void {
    if (this.resyncing.has(userId)) {
      this.resyncing.set(userId, true);
      return;
    }
    const fetchDevices = this.remote?.devices;
    if (!fetchDevices || this.resyncing.size >= MAX_CONCURRENT_RESYNCS || this.remote?.mayResync?.(origin) === false) {
      void this.unsynced(userId).catch(() => undefined);
      return;
    }
    this.resyncing.set(userId, false);
    void (async () => {
      try {
        for (let again = true; again; ) {
          await this.resync(origin, userId, streamId);
          again = this.resyncing.get(userId) === true;
          this.resyncing.set(userId, false);
        }
      } finally {
        this.resyncing.delete(userId);
      }
    })().catch(() => undefined);
  }

  /** The resync itself; a failure leaves the user unsynced and their keys stale. */
  private async resync(origin: string, userId: string, streamId: number): Promise<void> {
    let answer: JsonObject;
    try {
      answer = await this.remote!.devices!(origin, userId, RESYNC_TIMEOUT_MS);
      if (answer.user_id !== userId) throw new Error('answer for another user');
    } catch {
      await this.unsynced(userId);
      return;
    }
    const listed = Array.isArray(answer.devices) ? answer.devices.slice(0, MAX_REMOTE_DEVICES_PER_USER) : [];
    const devices: JsonObject = {};
    for (const device of listed) {
      if (typeof device !== 'object' || device === null || Array.isArray(device)) continue;
      const { device_id: deviceId, keys, device_display_name: name } = device as JsonObject;
      if (typeof deviceId !== 'string' || typeof keys !== 'object' || keys === null || Array.isArray(keys)) continue;
      const unsigned = typeof name === 'string' && name.length <= MAX_REMOTE_DISPLAY_NAME_LENGTH ? { unsigned: { device_display_name: name } } : {};
      devices[deviceId] = { ...(keys as JsonObject), ...unsigned };
    }
    const entry: RemoteUserKeys = { devices: checkedRemoteDevices(userId, devices), until: Date.now() + REMOTE_KEYS_TTL_MS };
    if (isKeyOf(answer.master_key, userId)) entry.master = answer.master_key as JsonObject;
    if (isKeyOf(answer.self_signing_key, userId)) entry.selfSigning = answer.self_signing_key as JsonObject;
    const theirs = answer.stream_id;
    await this.remoteKeysChanged(userId, typeof theirs === 'number' && Number.isSafeInteger(theirs) && theirs >= 0 ? Math.max(theirs, streamId) : streamId, entry);
  }

  /** A remote user whose updates could not be applied: keys stale, and the next update resyncs. */
  private async unsynced(userId: string): Promise<void> {
    await this.storage.e2e.forgetDeviceListStreamId(userId);
    await this.remoteKeysChanged(userId);
  }

  private async localDeviceKeys(userId: string, deviceIds: readonly string[]): Promise<JsonObject> {
    const names = new Map((await this.storage.sessions.listDevices(userId)).map((d) => [d.device_id, d.display_name]));
    const forUser: JsonObject = {};
    for (const row of await this.storage.e2e.deviceKeys(userId, deviceIds.length > 0 ? deviceIds : undefined)) {
      const keys = parseStoredJson<JsonObject>(row.key_json, {});
      const name = names.get(row.device_id);
      forUser[row.device_id] = { ...keys, unsigned: name ? { device_display_name: name } : {} };
    }
    return forUser;
  }

  /** Asks other servers through `remote`, with the client's `timeout` (capped) or the default. */
  private async askRemote(ask: (remote: RemoteKeys, timeoutMs: number) => Promise<JsonObject>, timeout: unknown): Promise<JsonObject> {
    if (!this.remote) throw new MatrixError('M_UNRECOGNIZED', 'This server does not federate');
    return ask(this.remote, typeof timeout === 'number' && timeout > 0 ? Math.min(timeout, 60_000) : DEFAULT_REMOTE_TIMEOUT_MS);
  }

  /** `POST /keys/claim`: one one-time key per device named, or its fallback key when none is left. */
  async claim(body: { one_time_keys?: unknown; timeout?: unknown }): Promise<JsonObject> {
    const failures: Record<string, JsonObject> = {};
    const remote = new Map<string, Record<string, Record<string, string>>>();
    const local: Record<string, unknown> = {};
    for (const [userId, devices] of Object.entries(userMap(body.one_time_keys, 'one_time_keys'))) {
      if (!isUserId(userId) || typeof devices !== 'object' || devices === null) continue;
      if (serverOf(userId) === this.serverName) {
        local[userId] = devices;
        continue;
      }
      const forServer = remote.get(serverOf(userId)) ?? {};
      forServer[userId] = Object.fromEntries(Object.entries(devices as Record<string, unknown>).filter((entry): entry is [string, string] => typeof entry[1] === 'string'));
      remote.set(serverOf(userId), forServer);
    }
    const oneTimeKeys = await this.claimLocal(local);
    await Promise.all(
      [...remote].map(async ([server, users]) => {
        try {
          const answer = await this.askRemote((remote, timeout) => remote.claim(server, users, timeout), body.timeout);
          const theirs = (answer.one_time_keys ?? {}) as Record<string, unknown>;
          for (const userId of Object.keys(users)) {
            const keys = theirs[userId];
            if (typeof keys === 'object' && keys !== null && !Array.isArray(keys)) oneTimeKeys[userId] = keys as Record<string, JsonObject>;
          }
        } catch (err) {
          failures[server] = failureOf(err);
        }
      }),
    );
    return { one_time_keys: oneTimeKeys, failures };
  }

  /** Federation's `POST /user/keys/claim`: keys of this server's users only. */
  async claimForServer(body: { one_time_keys?: unknown }): Promise<JsonObject> {
    const local = Object.fromEntries(Object.entries(userMap(body.one_time_keys, 'one_time_keys')).filter(([userId]) => isUserId(userId) && serverOf(userId) === this.serverName));
    return { one_time_keys: await this.claimLocal(local) };
  }

  private async claimLocal(wanted: Record<string, unknown>): Promise<Record<string, Record<string, JsonObject>>> {
    const claims: Array<{ userId: string; deviceId: string; algorithm: string }> = [];
    for (const [userId, devices] of Object.entries(wanted)) {
      if (typeof devices !== 'object' || devices === null) continue;
      for (const [deviceId, algorithm] of Object.entries(devices as Record<string, unknown>)) {
        if (typeof algorithm === 'string') claims.push({ userId, deviceId, algorithm });
      }
    }
    if (claims.length > MAX_CLAIMED_KEYS) throw new MatrixError('M_LIMIT_EXCEEDED', `At most ${MAX_CLAIMED_KEYS} keys per claim`, { status: 400 });
    const byUser = new Map<string, Array<{ deviceId: string; algorithm: string }>>();
    for (const { userId, deviceId, algorithm } of claims) {
      const devices = byUser.get(userId) ?? [];
      devices.push({ deviceId, algorithm });
      byUser.set(userId, devices);
    }
    const oneTimeKeys: Record<string, Record<string, JsonObject>> = {};
    const claimed: Array<[string, string]> = [];
    // One transaction: two claims at once never get the same key.
    await this.storage.transaction(async (stores) => {
      for (const [userId, devices] of byUser) {
        const taken = await stores.e2e.claimOneTimeKeys(userId, devices);
        const without = new Set(devices.map((d) => d.deviceId));
        for (const key of taken) without.delete(key.deviceId);
        const fallbacks = await stores.e2e.useFallbackKeys(userId, devices.filter((d) => without.has(d.deviceId)));
        for (const key of [...taken, ...fallbacks]) {
          claimed.push([userId, key.deviceId]);
          const forUser = (oneTimeKeys[userId] ??= {});
          forUser[key.deviceId] = { [`${key.algorithm}:${key.keyId}`]: parseStoredJson<JsonObject | string>(key.keyJson, '') as JsonObject };
        }
      }
    });
    for (const [userId, deviceId] of claimed) this.countsChanged(userId, deviceId);
    return oneTimeKeys;
  }

  /** Records that `userId`'s keys changed, told to everyone concerned or, with `toldUserId`, to that user only. */
  private async recordDeviceListChange(stores: Stores, userId: string, position: number, effects: StreamEffects, toldUserId?: string): Promise<void> {
    if (toldUserId === undefined) {
      effects.users.add(userId);
      effects.roommatesOf.add(userId);
    } else {
      effects.users.add(toldUserId);
    }
    await stores.e2e.recordDeviceListChange(userId, position, toldUserId);
    this.latestChange = Math.max(this.latestChange ?? 0, position);
  }

  /**
   * Users sharing a room with `userId` (and the user) whose device lists changed in (after, upTo],
   * the users whose changes were told to `userId` alone then (those whose master keys they signed,
   * shared room or not, as Synapse), and, of `joined` (users who joined a room of the user then,
   * or whose room the user joined), those who share a room now: their devices are new to the user
   * (as Synapse says them).
   */
  async changedFor(userId: string, after: number, upTo: number, joined: Iterable<string> = []): Promise<string[]> {
    if (after >= upTo) return [];
    /** Shown whatever rooms are shared: told to the user alone. */
    const shown = new Set<string>();
    /** Shown if the user is them or shares a room with them now. */
    const ifShared = new Set<string>();
    for (const other of joined) if (other !== userId) ifShared.add(other);
    if (this.latestChange === undefined) {
      const stored = await this.storage.e2e.maxStreamOrdering();
      this.latestChange = Math.max(this.latestChange ?? 0, stored);
    }
    let roommates: ReadonlySet<string> | undefined;
    if (after < this.latestChange) {
      // Only the user's own changes, their roommates' and those told to them can be shown: read
      // those (an index range each), unless they are so many that the window is cheaper.
      roommates = await this.cache.roommates(userId);
      const changes = roommates.size < CHANGES_BY_USER_MAX
        ? await this.storage.e2e.deviceListChangesOf([userId, ...roommates], userId, after, upTo)
        : await this.storage.e2e.deviceListChanges(after, upTo);
      for (const change of changes) {
        if (change.toldUserId === undefined) ifShared.add(change.userId);
        else if (change.toldUserId === userId) shown.add(change.userId);
      }
    }
    if (ifShared.size > 0) {
      roommates ??= await this.cache.roommates(userId);
      for (const other of ifShared) if (other === userId || roommates.has(other)) shown.add(other);
    }
    return [...shown].sort();
  }

  /** `/keys/changes`' `changed`: as sync's, the users who joined a room of the user between the tokens too. */
  async changesBetween(userId: string, after: number, upTo: number): Promise<string[]> {
    if (after >= upTo) return [];
    const rooms = [...(await this.cache.roomsOf(userId)).keys()];
    const joined = new Set<string>();
    for (const row of await this.storage.rooms.membershipChanges(rooms, after, upTo)) {
      if (row.state_key === null || parseStoredJson<JsonObject>(row.content, {}).membership !== 'join') continue;
      if (row.state_key !== userId) joined.add(row.state_key);
      else for (const member of (await this.cache.room(row.room_id))?.joinedUsers() ?? []) joined.add(member);
    }
    return this.changedFor(userId, after, upTo, joined);
  }

  /**
   * `/keys/changes`' `left`: users who left (or were banned from) a room of the user between the
   * tokens, and the members of rooms the user left then, who share no room with the user now.
   */
  async leftBetween(userId: string, after: number, upTo: number): Promise<string[]> {
    if (after >= upTo) return [];
    const rooms = [...(await this.cache.roomsOf(userId)).keys()];
    const candidates = new Set<string>();
    for (const row of await this.storage.rooms.membershipChanges(rooms, after, upTo)) {
      const membership = parseStoredJson<JsonObject>(row.content, {}).membership;
      if (row.state_key === null || (membership !== 'leave' && membership !== 'ban')) continue;
      if (row.state_key !== userId) candidates.add(row.state_key);
      else for (const member of (await this.cache.room(row.room_id))?.joinedUsers() ?? []) candidates.add(member);
    }
    return this.leftOf(userId, candidates);
  }

  /** Of `candidates`, those who no longer share any room with `userId` (sync's `device_lists.left`). */
  async leftOf(userId: string, candidates: ReadonlySet<string>): Promise<string[]> {
    if (candidates.size === 0) return [];
    const shared = await this.cache.roommates(userId);
    return [...candidates].filter((other) => other !== userId && !shared.has(other)).sort();
  }

  /** For sync: the device's one-time key counts and unused fallback key types. */
  async countsFor(device: Device): Promise<{ counts: Record<string, number>; fallbackTypes: string[] }> {
    const key = `${device.userId}\u0000${device.deviceId}`;
    const kept = this.counts.get(key);
    if (kept) return kept;
    const generation = this.counts.generation;
    const read = {
      counts: await this.oneTimeKeyCounts(device.userId, device.deviceId),
      fallbackTypes: await this.storage.e2e.unusedFallbackKeyTypes(device.userId, device.deviceId),
    };
    this.counts.setIfUnchanged(key, read, generation);
    return read;
  }

  /** A device's keys were uploaded or claimed: its counts are read afresh. */
  private countsChanged(userId: string, deviceId: string): void {
    this.counts.delete(`${userId}\u0000${deviceId}`);
    this.onCountsChanged?.(userId);
  }

  /** Told when a device's one-time key counts change (other processes drop what they cached). */
  onCountsChanged: ((userId: string) => void) | undefined;

  /** Another process's changes were not all heard of: everything cached is read again. */
  forgetAll(): void {
    this.remoteCache.invalidate();
    this.forgetCounts();
    this.deviceListsChangedElsewhere();
  }

  /** Another process heard that a remote user's devices changed: their keys are asked for again. */
  forgetRemoteKeys(userId: string): void {
    this.remoteCache.delete(userId);
  }

  /** Another process uploaded or claimed keys: the counts, not kept per user, are all read again. */
  forgetCounts(): void {
    this.counts.invalidate();
  }

  /** Another process recorded a device-list change: the newest position is read again when needed. */
  deviceListsChangedElsewhere(): void {
    this.latestChange = undefined;
  }

  /**
   * Devices of the user were deleted (`deviceIds`, and any other whose keys are left): their keys
   * go, and everyone sharing a room is told.
   */
  async devicesRemoved(userId: string, deviceIds: readonly string[] = []): Promise<void> {
    await this.localDevicesChanged(userId, async (stores) => {
      const removed = new Set([...deviceIds, ...(await stores.e2e.deleteKeysOfRemovedDevices(userId))]);
      return [...removed].map((deviceId) => ({ deviceId, deleted: true }));
    });
  }

  /** A device of the user was made (a login) or renamed: everyone sharing a room is told. */
  async deviceChanged(userId: string, deviceId: string): Promise<void> {
    await this.devicesChanged(userId, [deviceId]);
  }

  /** Devices of the user changed (made, renamed, signed): everyone sharing a room is told, with their keys. */
  private async devicesChanged(userId: string, deviceIds: readonly string[]): Promise<void> {
    await this.localDevicesChanged(userId, async (stores) => {
      const keys = new Map((await stores.e2e.deviceKeys(userId, deviceIds)).map((row) => [row.device_id, row.key_json]));
      return deviceIds.map((deviceId) => {
        const json = keys.get(deviceId);
        return { deviceId, deleted: false, ...(json !== undefined ? { keys: parseStoredJson<JsonObject>(json, {}) } : {}) };
      });
    });
  }

  /**
   * A change of a local user's device list: `write` makes it and says which devices it touched,
   * in the transaction that records it at a stream position. The other servers sharing a room get
   * one `m.device_list_update` per device, with that position as `stream_id` and, as `prev_id`,
   * the `stream_id` of the update sent before (so that they can tell when one was lost).
   */
  private async localDevicesChanged(userId: string, write: (stores: Stores) => Promise<DeviceUpdate[]>): Promise<void> {
    let position = 0;
    let prev: number | undefined;
    let updates: DeviceUpdate[] = [];
    await writeAtNextPosition(this.storage, this.stream, async (stores, at, effects) => {
      position = at;
      updates = await write(stores);
      if (updates.length === 0) return;
      await this.recordDeviceListChange(stores, userId, at, effects);
      prev = await stores.e2e.deviceListStreamId(userId);
      await stores.e2e.setDeviceListStreamId(userId, at);
    });
    if (updates.length === 0) return;
    const names = new Map((await this.storage.sessions.listDevices(userId)).map((d) => [d.device_id, d.display_name]));
    await this.tellOthers(
      userId,
      updates.map(({ deviceId, deleted, keys }) => {
        const name = deleted ? null : names.get(deviceId);
        return deviceListUpdate({
          user_id: userId,
          device_id: deviceId,
          stream_id: position,
          prev_id: prev === undefined ? [] : [prev],
          deleted,
          ...(keys ? { keys } : {}),
          ...(name ? { device_display_name: name } : {}),
        });
      }),
    );
  }

  private async storeKeys(stores: Stores, device: Device, oneTime: readonly KeyToStore[], fallback: readonly KeyToStore[]): Promise<void> {
    await stores.e2e.addOneTimeKeys(device.userId, device.deviceId, oneTime);
    for (const key of fallback) await stores.e2e.setFallbackKey(device.userId, device.deviceId, key);
  }

  private async oneTimeKeyCounts(userId: string, deviceId: string): Promise<Record<string, number>> {
    // Clients read a missing signed_curve25519 as "unknown"; Synapse always says 0.
    return { signed_curve25519: 0, ...(await this.storage.e2e.oneTimeKeyCounts(userId, deviceId)) };
  }

  /**
   * Wakes the syncs of everyone who shares a room with the user, and the user's own; the other
   * servers in those rooms (those of the roommates) get the updates as EDUs.
   */
  private async tellOthers(userId: string, edus: readonly Edu[]): Promise<void> {
    const roommates = await this.cache.roommates(userId);
    this.notifier.notify(roommates);
    const servers = new Set([...roommates].map(serverOf).filter((server) => server !== this.serverName));
    if (servers.size > 0 && edus.length > 0) this.remote?.sendEdus([...servers], edus);
  }
}

interface KeyToStore {
  algorithm: string;
  keyId: string;
  keyJson: string;
}

function checkedDeviceKeys(value: unknown, device: Device): JsonObject {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new MatrixError('M_BAD_JSON', 'device_keys must be an object', { status: 400 });
  assertSignable(value, 'device_keys');
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
      assertSignable(key, `${field}: ${name}`);
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

/** A cross-signing key of another server's answer that says it is the user's. */
function isKeyOf(value: unknown, userId: string): boolean {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && (value as JsonObject).user_id === userId;
}

function deviceListUpdate(content: JsonObject): Edu {
  return { edu_type: 'm.device_list_update', content };
}

function userMap(value: unknown, field: string): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new MatrixError('M_BAD_JSON', `${field} must be an object of user ids`, { status: 400 });
  const entries = Object.keys(value);
  if (entries.length > MAX_QUERIED_USERS) throw new MatrixError('M_LIMIT_EXCEEDED', `At most ${MAX_QUERIED_USERS} users per request`, { status: 400 });
  return value as Record<string, unknown>;
}

/**
 * Another server's answer for one of its users: only devices whose keys name that user and device
 * and carry the device's own signature (a server cannot slip in keys its user's device never made).
 */
function checkedRemoteDevices(userId: string, devices: unknown): JsonObject {
  const checked: JsonObject = {};
  if (typeof devices !== 'object' || devices === null || Array.isArray(devices)) return checked;
  for (const [deviceId, keys] of Object.entries(devices as Record<string, unknown>)) {
    if (Object.keys(checked).length >= MAX_REMOTE_DEVICES_PER_USER) break;
    if (typeof keys !== 'object' || keys === null || Array.isArray(keys)) continue;
    const object = keys as JsonObject;
    if (object.user_id !== userId || object.device_id !== deviceId) continue;
    try {
      if (hasValidSignature(object, userId, signingKeysOf(object, deviceId))) checked[deviceId] = object;
    } catch {
      // No usable ed25519 key: left out.
    }
  }
  return checked;
}

function failureOf(err: unknown): JsonObject {
  const status = (err as { status?: unknown }).status;
  return { status: typeof status === 'number' ? status : 503, message: err instanceof Error ? err.message : String(err) };
}

function withoutUnsigned(keys: JsonObject): JsonObject {
  const { unsigned: _unsigned, ...rest } = keys;
  return rest;
}
