/** End-to-end encryption keys and device-list changes (see migration 0021). */
import { sql, type Kysely, type Selectable } from 'kysely';
import type { Database, RoomKeysTable } from './schema.js';
import { newestPosition } from './stream-positions.js';

export interface StoredKey {
  algorithm: string;
  keyId: string;
  keyJson: string;
}

export interface BackupVersionRow {
  version: number;
  algorithm: string;
  auth_data: string;
  etag: number;
}

/** A backed-up room key as stored, without whose and which version it is. */
export type RoomKeyRow = Omit<Selectable<RoomKeysTable>, 'user_id' | 'version'>;

/** Users per query of `deviceListChangesOf` (the IN list). */
const USERS_PER_QUERY = 500;

export class E2eStore {
  constructor(private readonly db: Kysely<Database>) {}

  async deviceKeys(userId: string, deviceIds?: readonly string[]): Promise<Array<{ device_id: string; key_json: string }>> {
    let query = this.db.selectFrom('e2e_device_keys').select(['device_id', 'key_json']).where('user_id', '=', userId);
    if (deviceIds !== undefined) {
      if (deviceIds.length === 0) return [];
      query = query.where('device_id', 'in', deviceIds);
    }
    return query.execute();
  }

  async setDeviceKeys(userId: string, deviceId: string, keyJson: string): Promise<void> {
    await this.db
      .insertInto('e2e_device_keys')
      .values({ user_id: userId, device_id: deviceId, key_json: keyJson })
      .onConflict((c) => c.columns(['user_id', 'device_id']).doUpdateSet({ key_json: keyJson }))
      .execute();
  }

  async oneTimeKey(userId: string, deviceId: string, algorithm: string, keyId: string): Promise<string | undefined> {
    const row = await this.db
      .selectFrom('e2e_one_time_keys')
      .select('key_json')
      .where('user_id', '=', userId)
      .where('device_id', '=', deviceId)
      .where('algorithm', '=', algorithm)
      .where('key_id', '=', keyId)
      .executeTakeFirst();
    return row?.key_json;
  }

  async addOneTimeKeys(userId: string, deviceId: string, keys: readonly StoredKey[]): Promise<void> {
    for (let i = 0; i < keys.length; i += 200) {
      await this.db
        .insertInto('e2e_one_time_keys')
        .values(keys.slice(i, i + 200).map((key) => ({ user_id: userId, device_id: deviceId, algorithm: key.algorithm, key_id: key.keyId, key_json: key.keyJson })))
        .onConflict((c) => c.doNothing())
        .execute();
    }
  }

  /** One-time keys left per algorithm. */
  async oneTimeKeyCounts(userId: string, deviceId: string): Promise<Record<string, number>> {
    const rows = await this.db
      .selectFrom('e2e_one_time_keys')
      .select(['algorithm', (eb) => eb.fn.countAll<number>().as('n')])
      .where('user_id', '=', userId)
      .where('device_id', '=', deviceId)
      .groupBy('algorithm')
      .execute();
    return Object.fromEntries(rows.map((row) => [row.algorithm, Number(row.n)]));
  }

  /**
   * Takes (deletes) one one-time key of each device's algorithm, the oldest id first, for one
   * user's devices in one statement; the devices that had none are left out of the answer.
   */
  async claimOneTimeKeys(userId: string, wanted: ReadonlyArray<{ deviceId: string; algorithm: string }>): Promise<Array<StoredKey & { deviceId: string }>> {
    if (wanted.length === 0) return [];
    const pairs = sql.join(wanted.map(({ deviceId, algorithm }) => sql`(${deviceId}, ${algorithm})`));
    const { rows } = await sql<{ device_id: string; algorithm: string; key_id: string; key_json: string }>`
      DELETE FROM e2e_one_time_keys
      WHERE user_id = ${userId} AND (device_id, algorithm, key_id) IN (
        SELECT device_id, algorithm, MIN(key_id) FROM e2e_one_time_keys
        WHERE user_id = ${userId} AND (device_id, algorithm) IN (VALUES ${pairs})
        GROUP BY device_id, algorithm)
      RETURNING device_id, algorithm, key_id, key_json`.execute(this.db);
    return rows.map((row) => ({ deviceId: row.device_id, algorithm: row.algorithm, keyId: row.key_id, keyJson: row.key_json }));
  }

  async setFallbackKey(userId: string, deviceId: string, key: StoredKey): Promise<void> {
    await this.db
      .insertInto('e2e_fallback_keys')
      .values({ user_id: userId, device_id: deviceId, algorithm: key.algorithm, key_id: key.keyId, key_json: key.keyJson, used: 0 })
      .onConflict((c) => c.columns(['user_id', 'device_id', 'algorithm']).doUpdateSet({ key_id: key.keyId, key_json: key.keyJson, used: 0 }))
      .execute();
  }

  /** The fallback key of the algorithm, marked used (it stays until replaced). */
  /** Marks the fallback key of each device's algorithm used and returns it, for one user's devices. */
  async useFallbackKeys(userId: string, wanted: ReadonlyArray<{ deviceId: string; algorithm: string }>): Promise<Array<StoredKey & { deviceId: string }>> {
    if (wanted.length === 0) return [];
    const pairs = sql.join(wanted.map(({ deviceId, algorithm }) => sql`(${deviceId}, ${algorithm})`));
    // A used fallback key is handed out again (the spec's "may be reused"), so every row matches.
    const { rows } = await sql<{ device_id: string; algorithm: string; key_id: string; key_json: string }>`
      UPDATE e2e_fallback_keys SET used = 1
      WHERE user_id = ${userId} AND (device_id, algorithm) IN (VALUES ${pairs})
      RETURNING device_id, algorithm, key_id, key_json`.execute(this.db);
    return rows.map((row) => ({ deviceId: row.device_id, algorithm: row.algorithm, keyId: row.key_id, keyJson: row.key_json }));
  }

  /** Algorithms with a fallback key not yet used. */
  async unusedFallbackKeyTypes(userId: string, deviceId: string): Promise<string[]> {
    const rows = await this.db.selectFrom('e2e_fallback_keys').select('algorithm').where('user_id', '=', userId).where('device_id', '=', deviceId).where('used', '=', 0).execute();
    return rows.map((row) => row.algorithm).sort();
  }

  /** Deletes every key of the devices of a user that no longer exist; the ids of those that had device keys. */
  async deleteKeysOfRemovedDevices(userId: string): Promise<string[]> {
    const gone = (
      await this.db
        .selectFrom('e2e_device_keys')
        .select('device_id')
        .where('user_id', '=', userId)
        .where((eb) => eb.not(eb.exists(eb.selectFrom('devices').select('devices.device_id').whereRef('devices.user_id', '=', 'e2e_device_keys.user_id').whereRef('devices.device_id', '=', 'e2e_device_keys.device_id'))))
        .execute()
    ).map((row) => row.device_id);
    for (const table of ['e2e_device_keys', 'e2e_one_time_keys', 'e2e_fallback_keys'] as const) {
      await this.db
        .deleteFrom(table)
        .where('user_id', '=', userId)
        .where((eb) => eb.not(eb.exists(eb.selectFrom('devices').select('devices.device_id').whereRef('devices.user_id', '=', `${table}.user_id`).whereRef('devices.device_id', '=', `${table}.device_id`))))
        .execute();
    }
    return gone;
  }

  /**
   * `userId`'s keys changed at `position`: told to the user and everyone sharing a room, or, with
   * `toldUserId`, to that user only.
   */
  async recordDeviceListChange(userId: string, position: number, toldUserId?: string): Promise<void> {
    await this.db.insertInto('device_list_changes').values({ stream_ordering: position, user_id: userId, told_user_id: toldUserId ?? null }).execute();
  }

  /** Users whose device lists changed in (after, upTo], and the one user told of it, if only one is. */
  async deviceListChanges(after: number, upTo: number): Promise<Array<{ userId: string; toldUserId: string | undefined }>> {
    const rows = await this.changesIn(after, upTo).execute();
    return rows.map((row) => ({ userId: row.user_id, toldUserId: row.told_user_id ?? undefined }));
  }

  /**
   * Like `deviceListChanges`, only the changes of `users` and those told to `toldUserId`: one
   * index range per user (migration 0041) instead of every change in the window.
   */
  async deviceListChangesOf(users: readonly string[], toldUserId: string, after: number, upTo: number): Promise<Array<{ userId: string; toldUserId: string | undefined }>> {
    const found = new Map<string, { userId: string; toldUserId: string | undefined }>();
    const add = (rows: ReadonlyArray<{ user_id: string; told_user_id: string | null }>) => {
      for (const row of rows) found.set(`${row.user_id}\u0000${row.told_user_id ?? ''}`, { userId: row.user_id, toldUserId: row.told_user_id ?? undefined });
    };
    for (let start = 0; start < users.length; start += USERS_PER_QUERY) {
      const chunk = users.slice(start, start + USERS_PER_QUERY);
      add(await this.changesIn(after, upTo).where('user_id', 'in', chunk).execute());
    }
    add(await this.changesIn(after, upTo).where('told_user_id', '=', toldUserId).execute());
    return [...found.values()];
  }

  /** Who changed, and who was told, in (after, upTo]: each pair once. */
  private changesIn(after: number, upTo: number) {
    return this.db.selectFrom('device_list_changes').select(['user_id', 'told_user_id']).distinct().where('stream_ordering', '>', after).where('stream_ordering', '<=', upTo);
  }

  /** The last `m.device_list_update` stream_id sent (a user of ours) or applied (another server's). */
  async deviceListStreamId(userId: string): Promise<number | undefined> {
    const row = await this.db.selectFrom('device_list_stream_ids').select('stream_id').where('user_id', '=', userId).executeTakeFirst();
    return row === undefined ? undefined : Number(row.stream_id);
  }

  async setDeviceListStreamId(userId: string, streamId: number): Promise<void> {
    await this.db
      .insertInto('device_list_stream_ids')
      .values({ user_id: userId, stream_id: streamId })
      .onConflict((c) => c.column('user_id').doUpdateSet({ stream_id: streamId }))
      .execute();
  }

  /** Forgets a remote user's stream_id: the next update about them brings a full resync. */
  async forgetDeviceListStreamId(userId: string): Promise<void> {
    await this.db.deleteFrom('device_list_stream_ids').where('user_id', '=', userId).execute();
  }

  async maxStreamOrdering(): Promise<number> {
    return newestPosition(this.db, 'device_list_changes');
  }

  // ---- cross-signing ----

  /** The user's cross-signing keys by type (`master`, `self_signing`, `user_signing`). */
  async crossSigningKeys(userId: string): Promise<Record<string, string>> {
    const rows = await this.db.selectFrom('e2e_cross_signing_keys').select(['key_type', 'key_json']).where('user_id', '=', userId).execute();
    return Object.fromEntries(rows.map((row) => [row.key_type, row.key_json]));
  }

  async setCrossSigningKey(userId: string, keyType: string, keyJson: string): Promise<void> {
    await this.db
      .insertInto('e2e_cross_signing_keys')
      .values({ user_id: userId, key_type: keyType, key_json: keyJson })
      .onConflict((c) => c.columns(['user_id', 'key_type']).doUpdateSet({ key_json: keyJson }))
      .execute();
  }

  async addCrossSigningSignature(row: { signer_user_id: string; target_user_id: string; target_key_id: string; key_id: string; signature: string }): Promise<void> {
    await this.db
      .insertInto('e2e_cross_signing_signatures')
      .values(row)
      .onConflict((c) => c.columns(['signer_user_id', 'target_user_id', 'target_key_id', 'key_id']).doUpdateSet({ signature: row.signature }))
      .execute();
  }

  /** Signatures `signer` made of keys of `targetUserId`. */
  async crossSigningSignaturesBy(signer: string, targetUserId: string): Promise<Array<{ target_key_id: string; key_id: string; signature: string }>> {
    return this.db
      .selectFrom('e2e_cross_signing_signatures')
      .select(['target_key_id', 'key_id', 'signature'])
      .where('signer_user_id', '=', signer)
      .where('target_user_id', '=', targetUserId)
      .execute();
  }

  // ---- key backup ----

  /** A backup version of the user (the newest not deleted when `version` is undefined). */
  async backupVersion(userId: string, version?: number): Promise<BackupVersionRow | undefined> {
    let query = this.db.selectFrom('room_key_versions').select(['version', 'algorithm', 'auth_data', 'etag']).where('user_id', '=', userId).where('deleted', '=', 0);
    query = version === undefined ? query.orderBy('version', 'desc').limit(1) : query.where('version', '=', version);
    return query.executeTakeFirst();
  }

  /** A new version, numbered after every earlier one (deleted ones too). */
  async createBackupVersion(userId: string, algorithm: string, authData: string): Promise<number> {
    const row = await this.db.selectFrom('room_key_versions').select((eb) => eb.fn.max('version').as('max')).where('user_id', '=', userId).executeTakeFirst();
    const version = Number(row?.max ?? 0) + 1;
    await this.db.insertInto('room_key_versions').values({ user_id: userId, version, algorithm, auth_data: authData, etag: 0, deleted: 0 }).execute();
    return version;
  }

  async updateBackupAuthData(userId: string, version: number, authData: string): Promise<void> {
    await this.db.updateTable('room_key_versions').set({ auth_data: authData }).where('user_id', '=', userId).where('version', '=', version).execute();
  }

  async deleteBackupVersion(userId: string, version: number): Promise<boolean> {
    const result = await this.db.updateTable('room_key_versions').set({ deleted: 1 }).where('user_id', '=', userId).where('version', '=', version).where('deleted', '=', 0).executeTakeFirst();
    await this.db.deleteFrom('room_keys').where('user_id', '=', userId).where('version', '=', version).execute();
    return Number(result.numUpdatedRows) > 0;
  }

  async bumpBackupEtag(userId: string, version: number): Promise<void> {
    await this.db.updateTable('room_key_versions').set((eb) => ({ etag: eb('etag', '+', 1) })).where('user_id', '=', userId).where('version', '=', version).execute();
  }

  async countRoomKeys(userId: string, version: number): Promise<number> {
    const row = await this.db.selectFrom('room_keys').select((eb) => eb.fn.countAll<number>().as('n')).where('user_id', '=', userId).where('version', '=', version).executeTakeFirst();
    return Number(row?.n ?? 0);
  }

  async roomKeys(userId: string, version: number, roomId?: string, sessionId?: string): Promise<RoomKeyRow[]> {
    let query = this.db
      .selectFrom('room_keys')
      .select(['room_id', 'session_id', 'first_message_index', 'forwarded_count', 'is_verified', 'session_data'])
      .where('user_id', '=', userId)
      .where('version', '=', version);
    if (roomId !== undefined) query = query.where('room_id', '=', roomId);
    if (sessionId !== undefined) query = query.where('session_id', '=', sessionId);
    return query.orderBy('room_id').orderBy('session_id').execute();
  }

  async putRoomKey(userId: string, version: number, key: RoomKeyRow): Promise<void> {
    await this.db
      .insertInto('room_keys')
      .values({ user_id: userId, version, ...key })
      .onConflict((c) =>
        c.columns(['user_id', 'version', 'room_id', 'session_id']).doUpdateSet({
          first_message_index: key.first_message_index,
          forwarded_count: key.forwarded_count,
          is_verified: key.is_verified,
          session_data: key.session_data,
        }),
      )
      .execute();
  }

  async deleteRoomKeys(userId: string, version: number, roomId?: string, sessionId?: string): Promise<number> {
    let query = this.db.deleteFrom('room_keys').where('user_id', '=', userId).where('version', '=', version);
    if (roomId !== undefined) query = query.where('room_id', '=', roomId);
    if (sessionId !== undefined) query = query.where('session_id', '=', sessionId);
    return Number((await query.executeTakeFirst()).numDeletedRows);
  }
}
