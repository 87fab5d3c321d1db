/** End-to-end encryption keys and device-list changes (see migration 0021). */
import type { Kysely } from 'kysely';
import type { Database } from './schema.js';
import { newestPosition } from './stream-positions.js';

export interface StoredKey {
  algorithm: string;
  keyId: string;
  keyJson: string;
}

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

  /** Takes (deletes) one one-time key of the algorithm, the oldest id first. */
  async claimOneTimeKey(userId: string, deviceId: string, algorithm: string): Promise<StoredKey | undefined> {
    const row = await this.db
      .selectFrom('e2e_one_time_keys')
      .select(['key_id', 'key_json'])
      .where('user_id', '=', userId)
      .where('device_id', '=', deviceId)
      .where('algorithm', '=', algorithm)
      .orderBy('key_id')
      .limit(1)
      .executeTakeFirst();
    if (!row) return undefined;
    await this.db
      .deleteFrom('e2e_one_time_keys')
      .where('user_id', '=', userId)
      .where('device_id', '=', deviceId)
      .where('algorithm', '=', algorithm)
      .where('key_id', '=', row.key_id)
      .execute();
    return { algorithm, keyId: row.key_id, keyJson: row.key_json };
  }

  async setFallbackKey(userId: string, deviceId: string, key: StoredKey): Promise<void> {
    await this.db
      .insertInto('e2e_fallback_keys')
      .values({ user_id: userId, device_id: deviceId, algorithm: key.algorithm, key_id: key.keyId, key_json: key.keyJson, used: 0 })
      .onConflict((c) => c.columns(['user_id', 'device_id', 'algorithm']).doUpdateSet({ key_id: key.keyId, key_json: key.keyJson, used: 0 }))
      .execute();
  }

  /** The fallback key of the algorithm, marked used (it stays until replaced). */
  async useFallbackKey(userId: string, deviceId: string, algorithm: string): Promise<StoredKey | undefined> {
    const row = await this.db
      .selectFrom('e2e_fallback_keys')
      .select(['key_id', 'key_json'])
      .where('user_id', '=', userId)
      .where('device_id', '=', deviceId)
      .where('algorithm', '=', algorithm)
      .executeTakeFirst();
    if (!row) return undefined;
    await this.db.updateTable('e2e_fallback_keys').set({ used: 1 }).where('user_id', '=', userId).where('device_id', '=', deviceId).where('algorithm', '=', algorithm).execute();
    return { algorithm, keyId: row.key_id, keyJson: row.key_json };
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

  /** The position of the user's latest device-list change (0 if none). */
  async latestDeviceListChange(userId: string): Promise<number> {
    return newestPosition(this.db, 'device_list_changes', { column: 'user_id', value: userId });
  }

  async recordDeviceListChange(userId: string, position: number): Promise<void> {
    await this.db.insertInto('device_list_changes').values({ stream_ordering: position, user_id: userId }).execute();
  }

  /** Users whose device lists changed in (after, upTo]. */
  async deviceListChanges(after: number, upTo: number): Promise<string[]> {
    const rows = await this.db.selectFrom('device_list_changes').select('user_id').distinct().where('stream_ordering', '>', after).where('stream_ordering', '<=', upTo).execute();
    return rows.map((row) => row.user_id);
  }

  async maxStreamOrdering(): Promise<number> {
    return newestPosition(this.db, 'device_list_changes');
  }
}
