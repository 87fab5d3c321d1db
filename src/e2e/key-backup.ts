/**
 * Server-side key backup (the spec's "Server-side key backups"): a user's devices store their
 * room keys encrypted to a backup key the server never sees, under a backup version, and read
 * them back on a new device. Each session keeps its best copy: a verified one over an unverified
 * one, then the one that decrypts from an earlier message, then the one forwarded fewer times.
 * Writes go to the current (newest) version only; `etag` moves with every change of its keys.
 */
import { MatrixError } from '../core/errors.js';
import { KeyedQueue } from '../core/keyed-queue.js';
import { parseStoredJson } from '../core/json.js';
import type { JsonObject } from '../rooms/events.js';
import type { BackupVersionRow, RoomKeyRow, Storage } from '../storage/index.js';

/** Keys one backup version may hold: a very busy user's years of rooms, bounded for the disk. */
export const MAX_KEYS_PER_BACKUP = 200_000;
/** One backed-up key's `session_data` at most (they are a few hundred bytes). */
const MAX_SESSION_DATA_BYTES = 16_384;

export interface KeyBackupData {
  first_message_index: number;
  forwarded_count: number;
  is_verified: boolean;
  session_data: JsonObject;
}

export class KeyBackupService {
  /** One change at a time per user: count, compare and write must not interleave. */
  private readonly queue = new KeyedQueue<string>();

  constructor(private readonly storage: Storage) {}

  async createVersion(userId: string, body: { algorithm?: unknown; auth_data?: unknown }): Promise<{ version: string }> {
    const { algorithm, authData } = checkedVersionBody(body);
    return this.queue.run(userId, async () => ({ version: String(await this.storage.e2e.createBackupVersion(userId, algorithm, authData)) }));
  }

  /** `GET /room_keys/version[/{version}]`. */
  async version(userId: string, version?: string): Promise<JsonObject> {
    const row = await this.storage.e2e.backupVersion(userId, version === undefined ? undefined : versionNumber(version));
    if (!row) throw new MatrixError('M_NOT_FOUND', version === undefined ? 'No current backup version' : `Unknown backup version ${version}`);
    return this.describe(userId, row);
  }

  async updateVersion(userId: string, version: string, body: { algorithm?: unknown; auth_data?: unknown; version?: unknown }): Promise<void> {
    const number = versionNumber(version);
    const { algorithm, authData } = checkedVersionBody(body);
    if (body.version !== undefined && body.version !== version) throw new MatrixError('M_INVALID_PARAM', 'The version in the body does not match the one in the path', { status: 400 });
    await this.queue.run(userId, async () => {
      const row = await this.storage.e2e.backupVersion(userId, number);
      if (!row) throw new MatrixError('M_NOT_FOUND', `Unknown backup version ${version}`);
      if (row.algorithm !== algorithm) throw new MatrixError('M_INVALID_PARAM', 'The algorithm of a backup version cannot change', { status: 400 });
      await this.storage.e2e.updateBackupAuthData(userId, number, authData);
    });
  }

  async deleteVersion(userId: string, version: string): Promise<void> {
    const number = versionNumber(version);
    await this.queue.run(userId, async () => {
      if (!(await this.storage.transaction((stores) => stores.e2e.deleteBackupVersion(userId, number)))) throw new MatrixError('M_NOT_FOUND', `Unknown backup version ${version}`);
    });
  }

  /** `PUT /room_keys/keys[/{roomId}[/{sessionId}]]`: `rooms` holds what the path did not name. */
  async putKeys(userId: string, version: string | undefined, rooms: Record<string, Record<string, unknown>>): Promise<{ etag: string; count: number }> {
    const number = versionNumber(version);
    const keys = Object.entries(rooms).flatMap(([roomId, sessions]) => Object.entries(sessions).map(([sessionId, data]) => ({ roomId, sessionId, data: checkedKey(data) })));
    return this.queue.run(userId, async () => {
      const current = await this.storage.e2e.backupVersion(userId);
      if (!current || current.version !== number) {
        throw new MatrixError('M_WRONG_ROOM_KEYS_VERSION', 'Keys go to the current backup version only', { status: 403, extra: current ? { current_version: String(current.version) } : {} });
      }
      await this.storage.transaction(async (stores) => {
        let count = await stores.e2e.countRoomKeys(userId, number);
        let changed = false;
        for (const { roomId, sessionId, data } of keys) {
          const [existing] = await stores.e2e.roomKeys(userId, number, roomId, sessionId);
          if (existing && !isBetter(data, existing)) continue;
          if (!existing && ++count > MAX_KEYS_PER_BACKUP) throw new MatrixError('M_LIMIT_EXCEEDED', `A backup version holds at most ${MAX_KEYS_PER_BACKUP} keys`, { status: 400 });
          await stores.e2e.putRoomKey(userId, number, rowOf(roomId, sessionId, data));
          changed = true;
        }
        if (changed) await stores.e2e.bumpBackupEtag(userId, number);
      });
      return this.etagAndCount(userId, number);
    });
  }

  /** `GET /room_keys/keys[/{roomId}[/{sessionId}]]`. */
  async getKeys(userId: string, version: string | undefined, roomId?: string, sessionId?: string): Promise<JsonObject> {
    const number = versionNumber(version);
    if (!(await this.storage.e2e.backupVersion(userId, number))) throw new MatrixError('M_NOT_FOUND', `Unknown backup version ${version}`);
    const rows = await this.storage.e2e.roomKeys(userId, number, roomId, sessionId);
    if (sessionId !== undefined) {
      if (rows.length === 0) throw new MatrixError('M_NOT_FOUND', 'No room key found');
      return dataOf(rows[0]!) as unknown as JsonObject;
    }
    const rooms: Record<string, { sessions: Record<string, KeyBackupData> }> = {};
    for (const row of rows) (rooms[row.room_id] ??= { sessions: {} }).sessions[row.session_id] = dataOf(row);
    if (roomId !== undefined) return { sessions: rooms[roomId]?.sessions ?? {} };
    return { rooms };
  }

  /** `DELETE /room_keys/keys[/{roomId}[/{sessionId}]]`. */
  async deleteKeys(userId: string, version: string | undefined, roomId?: string, sessionId?: string): Promise<{ etag: string; count: number }> {
    const number = versionNumber(version);
    return this.queue.run(userId, async () => {
      if (!(await this.storage.e2e.backupVersion(userId, number))) throw new MatrixError('M_NOT_FOUND', `Unknown backup version ${version}`);
      await this.storage.transaction(async (stores) => {
        if ((await stores.e2e.deleteRoomKeys(userId, number, roomId, sessionId)) > 0) await stores.e2e.bumpBackupEtag(userId, number);
      });
      return this.etagAndCount(userId, number);
    });
  }

  private async describe(userId: string, row: BackupVersionRow): Promise<JsonObject> {
    return {
      version: String(row.version),
      algorithm: row.algorithm,
      auth_data: parseStoredJson<JsonObject>(row.auth_data, {}),
      count: await this.storage.e2e.countRoomKeys(userId, row.version),
      etag: String(row.etag),
    };
  }

  private async etagAndCount(userId: string, version: number): Promise<{ etag: string; count: number }> {
    const row = await this.storage.e2e.backupVersion(userId, version);
    return { etag: String(row?.etag ?? 0), count: await this.storage.e2e.countRoomKeys(userId, version) };
  }

}

function checkedVersionBody(body: { algorithm?: unknown; auth_data?: unknown }): { algorithm: string; authData: string } {
  if (typeof body.algorithm !== 'string' || body.algorithm === '') throw new MatrixError('M_MISSING_PARAM', 'algorithm is required', { status: 400 });
  if (typeof body.auth_data !== 'object' || body.auth_data === null || Array.isArray(body.auth_data)) throw new MatrixError('M_MISSING_PARAM', 'auth_data must be an object', { status: 400 });
  return { algorithm: body.algorithm, authData: JSON.stringify(body.auth_data) };
}

/** A version in a path or query: the decimal numbers this server hands out. */
function versionNumber(version: string | undefined): number {
  if (version === undefined) throw new MatrixError('M_MISSING_PARAM', 'The version query parameter is required', { status: 400 });
  // Another server's versions look different; here, an unknown version is simply not found.
  if (!/^[1-9][0-9]{0,14}$/.test(version)) throw new MatrixError('M_NOT_FOUND', `Unknown backup version ${version}`);
  return Number(version);
}

function checkedKey(value: unknown): KeyBackupData {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new MatrixError('M_BAD_JSON', 'Each key must be an object', { status: 400 });
  const key = value as JsonObject;
  const { first_message_index: index, forwarded_count: forwarded, is_verified: verified, session_data: data } = key;
  if (!Number.isSafeInteger(index) || (index as number) < 0 || !Number.isSafeInteger(forwarded) || (forwarded as number) < 0 || typeof verified !== 'boolean') {
    throw new MatrixError('M_BAD_JSON', 'first_message_index and forwarded_count must be whole numbers, is_verified true or false', { status: 400 });
  }
  if (typeof data !== 'object' || data === null || Array.isArray(data)) throw new MatrixError('M_BAD_JSON', 'session_data must be an object', { status: 400 });
  if (JSON.stringify(data).length > MAX_SESSION_DATA_BYTES) throw new MatrixError('M_TOO_LARGE', 'session_data is too large', { status: 413 });
  return { first_message_index: index as number, forwarded_count: forwarded as number, is_verified: verified, session_data: data as JsonObject };
}

/** The spec's rule for replacing a backed-up session. */
function isBetter(candidate: KeyBackupData, existing: RoomKeyRow): boolean {
  const existingVerified = existing.is_verified === 1;
  if (candidate.is_verified !== existingVerified) return candidate.is_verified;
  if (candidate.first_message_index !== existing.first_message_index) return candidate.first_message_index < existing.first_message_index;
  return candidate.forwarded_count < existing.forwarded_count;
}

function rowOf(roomId: string, sessionId: string, data: KeyBackupData): RoomKeyRow {
  return {
    room_id: roomId,
    session_id: sessionId,
    first_message_index: data.first_message_index,
    forwarded_count: data.forwarded_count,
    is_verified: data.is_verified ? 1 : 0,
    session_data: JSON.stringify(data.session_data),
  };
}

function dataOf(row: RoomKeyRow): KeyBackupData {
  return {
    first_message_index: row.first_message_index,
    forwarded_count: row.forwarded_count,
    is_verified: row.is_verified === 1,
    session_data: parseStoredJson<JsonObject>(row.session_data, {}),
  };
}
