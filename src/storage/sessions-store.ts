/** Devices and the access and refresh tokens issued to them. Tokens are stored only as hashes. */
import { sql, type Insertable, type Kysely, type Selectable } from 'kysely';
import type { AccessTokensTable, Database, DevicesTable, RefreshTokensTable } from './schema.js';
import type { AccessTokenCache, AccessTokenRow } from './token-cache.js';

export type DeviceRow = Selectable<DevicesTable>;
export type { AccessTokenRow };
export type RefreshTokenRow = Selectable<RefreshTokensTable>;

export class SessionStore {
  /**
   * `tokenCache` is shared by every store of one database; stores bound to a transaction pass
   * `readThrough` false, since a transaction must read what is on disk.
   */
  constructor(
    private readonly db: Kysely<Database>,
    private readonly tokenCache?: AccessTokenCache,
    private readonly readThrough = true,
  ) {}

  async getDevice(userId: string, deviceId: string): Promise<DeviceRow | undefined> {
    return this.db
      .selectFrom('devices')
      .selectAll()
      .where('user_id', '=', userId)
      .where('device_id', '=', deviceId)
      .executeTakeFirst();
  }

  async listDevices(userId: string): Promise<DeviceRow[]> {
    return this.db.selectFrom('devices').selectAll().where('user_id', '=', userId).orderBy('created_ts').orderBy('device_id').execute();
  }

  /** Where and with what a device was last seen (nothing when the device is gone). */
  async recordDeviceSeen(userId: string, deviceId: string, seen: { ip: string; userAgent: string | null; ts: number }): Promise<void> {
    await this.db
      .updateTable('devices')
      .set({ last_seen_ip: seen.ip, last_seen_user_agent: seen.userAgent, last_seen_ts: seen.ts })
      .where('user_id', '=', userId)
      .where('device_id', '=', deviceId)
      .execute();
  }

  async renameDevice(userId: string, deviceId: string, displayName: string | null): Promise<boolean> {
    const result = await this.db.updateTable('devices').set({ display_name: displayName }).where('user_id', '=', userId).where('device_id', '=', deviceId).executeTakeFirst();
    return Number(result.numUpdatedRows) > 0;
  }

  /** Deletes every device (with its tokens) of a user but one. */
  async deleteDevicesExcept(userId: string, keptDeviceId: string): Promise<void> {
    this.tokenCache?.invalidate();
    await this.db.deleteFrom('access_tokens').where('user_id', '=', userId).where('device_id', '!=', keptDeviceId).execute();
    await this.db.deleteFrom('refresh_tokens').where('user_id', '=', userId).where('device_id', '!=', keptDeviceId).execute();
    await this.db.deleteFrom('devices').where('user_id', '=', userId).where('device_id', '!=', keptDeviceId).execute();
  }

  async insertDevice(device: DeviceRow): Promise<void> {
    await this.db.insertInto('devices').values(device).execute();
  }

  /** Deletes a device with every token issued to it. */
  async deleteDevice(userId: string, deviceId: string): Promise<void> {
    this.tokenCache?.invalidate();
    await this.deleteTokensOfDevice(userId, deviceId);
    await this.db.deleteFrom('devices').where('user_id', '=', userId).where('device_id', '=', deviceId).execute();
  }

  /** Deletes every device and token of a user. */
  async deleteAllDevices(userId: string): Promise<void> {
    this.tokenCache?.invalidate();
    await this.db.deleteFrom('access_tokens').where('user_id', '=', userId).execute();
    await this.db.deleteFrom('refresh_tokens').where('user_id', '=', userId).execute();
    await this.db.deleteFrom('devices').where('user_id', '=', userId).execute();
  }

  async deleteTokensOfDevice(userId: string, deviceId: string): Promise<void> {
    this.tokenCache?.invalidate();
    await this.db.deleteFrom('access_tokens').where('user_id', '=', userId).where('device_id', '=', deviceId).execute();
    await this.db.deleteFrom('refresh_tokens').where('user_id', '=', userId).where('device_id', '=', deviceId).execute();
  }

  async insertAccessToken(token: Insertable<AccessTokensTable>): Promise<number> {
    const row = await this.db.insertInto('access_tokens').values(token).returning('id').executeTakeFirstOrThrow();
    return row.id;
  }

  async findAccessToken(tokenHash: string): Promise<AccessTokenRow | undefined> {
    const cache = this.readThrough ? this.tokenCache : undefined;
    const cached = cache?.get(tokenHash);
    if (cached) return cached;
    const generation = cache?.generation ?? 0;
    const row = await this.db
      .selectFrom('access_tokens')
      .leftJoin('users', 'users.user_id', 'access_tokens.user_id')
      .selectAll('access_tokens')
      .select(sql<number>`coalesce(users.is_guest, 0)`.as('is_guest'))
      .where('token_hash', '=', tokenHash)
      .executeTakeFirst();
    // A refreshable token changes on first use (it retires its predecessors), so only settled rows are kept.
    if (row && cache && (row.refresh_token_id === null || row.used)) cache.put(tokenHash, row, generation);
    return row;
  }

  /** Marks a token used; false when the token no longer exists. */
  async markAccessTokenUsed(id: number): Promise<boolean> {
    this.tokenCache?.invalidate();
    const result = await this.db.updateTable('access_tokens').set({ used: 1 }).where('id', '=', id).executeTakeFirst();
    return Number(result.numUpdatedRows) > 0;
  }

  /** Deletes access and refresh tokens that expired before `beforeMs`; returns how many. */
  async deleteExpiredTokens(beforeMs: number): Promise<number> {
    this.tokenCache?.invalidate();
    const access = await this.db.deleteFrom('access_tokens').where('expires_ts', '<', beforeMs).executeTakeFirst();
    const refresh = await this.db.deleteFrom('refresh_tokens').where('expires_ts', '<', beforeMs).executeTakeFirst();
    return Number(access.numDeletedRows) + Number(refresh.numDeletedRows);
  }

  async insertRefreshToken(token: Insertable<RefreshTokensTable>): Promise<number> {
    const row = await this.db.insertInto('refresh_tokens').values(token).returning('id').executeTakeFirstOrThrow();
    return row.id;
  }

  async findRefreshToken(tokenHash: string): Promise<RefreshTokenRow | undefined> {
    return this.db.selectFrom('refresh_tokens').selectAll().where('token_hash', '=', tokenHash).executeTakeFirst();
  }

  async setNextRefreshToken(id: number, nextId: number): Promise<void> {
    await this.db.updateTable('refresh_tokens').set({ next_token_id: nextId }).where('id', '=', id).execute();
  }

  /** A user's guest flag changed: cached tokens carry the old one. */
  forgetCachedTokens(): void {
    this.tokenCache?.invalidate();
  }

  /** Revokes a refresh token and the access tokens issued with it. */
  async deleteRefreshTokenFamily(id: number): Promise<void> {
    this.tokenCache?.invalidate();
    await this.db.deleteFrom('access_tokens').where('refresh_token_id', '=', id).execute();
    await this.db.deleteFrom('refresh_tokens').where('id', '=', id).execute();
  }

  /** Ids of refresh tokens replaced by `nextId` (the predecessors to revoke once it is used). */
  async findPredecessorRefreshTokens(nextId: number): Promise<number[]> {
    const rows = await this.db.selectFrom('refresh_tokens').select('id').where('next_token_id', '=', nextId).execute();
    return rows.map((row) => row.id);
  }
}
