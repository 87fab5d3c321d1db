/**
 * Account data: per-user JSON blobs, global or per room (`m.direct` is the one bots care about).
 * Each write takes a stream position, so the next sync echoes it (matrix-js-sdk waits for that).
 */
import { MatrixError } from '../core/errors.js';
import type { RoomCache } from '../rooms/room-cache.js';
import type { JsonObject } from '../rooms/events.js';
import { GLOBAL_ACCOUNT_DATA, type Storage } from '../storage/index.js';
import type { Notifier } from '../sync/notifier.js';
import { writeAtNextPosition, type StreamCounter } from '../sync/stream.js';
import { parseStoredJson } from '../core/json.js';
import { BoundedCache } from '../core/bounded-cache.js';

/** Types that have their own endpoints and may not be written here (as in Synapse). */
const SERVER_MANAGED_TYPES = new Set(['m.push_rules']);
/** Room tags live in the room's `m.tag` account data, where sync shows them. */
const TAG_TYPE = 'm.tag';
const DIRECT_TYPE = 'm.direct';
const IGNORED_USERS_TYPE = 'm.ignored_user_list';
const MAX_CACHED_IGNORE_LISTS = 50_000;
const MAX_TAG_BYTES = 255;
const MAX_TAGS_PER_ROOM = 100;

export class AccountDataService {
  /**
   * The newest account-data position per user, so a sync with nothing new skips the query.
   * Positions only grow, so a write may set it without the user being loaded, and a load merges.
   */
  private readonly latest = new Map<string, number>();

  constructor(
    private readonly storage: Storage,
    private readonly stream: StreamCounter,
    private readonly notifier: Notifier,
    private readonly cache: RoomCache,
  ) {}

  async get(userId: string, roomId: string | undefined, type: string): Promise<JsonObject> {
    const content = await this.storage.userData.getAccountData(userId, roomId ?? GLOBAL_ACCOUNT_DATA, type);
    if (content === undefined) throw new MatrixError('M_NOT_FOUND', 'Account data not found');
    return parseStoredJson<JsonObject>(content, {});
  }

  async set(userId: string, roomId: string | undefined, type: string, content: JsonObject): Promise<void> {
    if (SERVER_MANAGED_TYPES.has(type)) {
      throw new MatrixError('M_BAD_JSON', `Cannot set ${type} through this API`);
    }
    if (roomId !== undefined) {
      if (type === 'm.fully_read') throw new MatrixError('M_BAD_JSON', 'Cannot set m.fully_read through this API; use /read_markers');
      if (!(await this.cache.roomsOf(userId)).has(roomId)) {
        throw new MatrixError('M_FORBIDDEN', `User ${userId} is not in room ${roomId}`);
      }
    }
    await this.write(userId, roomId ?? GLOBAL_ACCOUNT_DATA, type, content);
  }

  /** Everything kept is read again (another process's changes were not all heard of). */
  forgetAll(): void {
    this.latest.clear();
    this.ignored.invalidate();
  }

  /** Another process wrote the user's account data: what is kept of it here is read again. */
  forget(userId: string): void {
    this.latest.delete(userId);
    this.ignored.delete(userId);
  }

  /** Writes without the client-facing checks (read markers store `m.fully_read` here). */
  async write(userId: string, roomId: string, type: string, content: JsonObject): Promise<void> {
    const text = JSON.stringify(content);
    if (type === IGNORED_USERS_TYPE) this.ignored.invalidate();
    await writeAtNextPosition(
      this.storage,
      this.stream,
      (stores, position, effects) => {
        effects.users.add(userId);
        return stores.userData.setAccountData({ user_id: userId, room_id: roomId, type, content: text, stream_ordering: position });
      },
      (position) => this.latest.set(userId, Math.max(this.latest.get(userId) ?? 0, position)),
    );
    this.notifier.notify([userId]);
  }

  /**
   * Whom the user ignores (`m.ignored_user_list`): their messages and invites are hidden from the
   * user's sync and history. Kept in memory per user (bounded), dropped when the list is written.
   */
  async ignoredUsers(userId: string): Promise<ReadonlySet<string>> {
    const known = this.ignored.get(userId);
    if (known) return known;
    const generation = this.ignored.generation;
    const stored = await this.storage.userData.getAccountData(userId, GLOBAL_ACCOUNT_DATA, IGNORED_USERS_TYPE);
    const content = stored === undefined ? {} : parseStoredJson<JsonObject>(stored, {});
    const list = content.ignored_users;
    const users: ReadonlySet<string> = new Set(typeof list === 'object' && list !== null && !Array.isArray(list) ? Object.keys(list) : []);
    this.ignored.setIfUnchanged(userId, users, generation);
    return users;
  }

  private readonly ignored = new BoundedCache<string, ReadonlySet<string>>(MAX_CACHED_IGNORE_LISTS);

  /** A room's tags for a user (`m.tag` room account data): `{"tags": {name: {order?}}}`. */
  async tags(userId: string, roomId: string): Promise<{ tags: Record<string, JsonObject> }> {
    const stored = await this.storage.userData.getAccountData(userId, roomId, TAG_TYPE);
    const content = stored === undefined ? {} : parseStoredJson<JsonObject>(stored, {});
    const tags = typeof content.tags === 'object' && content.tags !== null && !Array.isArray(content.tags) ? (content.tags as Record<string, JsonObject>) : {};
    return { tags };
  }

  /**
   * The user joined `newRoomId`, the upgrade of `oldRoomId`: the old room's tags go on the new one,
   * and a direct chat (`m.direct`) stays one, as Synapse carries them over. Nothing is written when
   * there is nothing to carry.
   */
  async copyToUpgradedRoom(userId: string, oldRoomId: string, newRoomId: string): Promise<void> {
    const { tags } = await this.tags(userId, oldRoomId);
    if (Object.keys(tags).length > 0) await this.write(userId, newRoomId, TAG_TYPE, { tags });
    const stored = await this.storage.userData.getAccountData(userId, GLOBAL_ACCOUNT_DATA, DIRECT_TYPE);
    if (stored === undefined) return;
    const direct = parseStoredJson<JsonObject>(stored, {});
    let changed = false;
    for (const [partner, rooms] of Object.entries(direct)) {
      if (Array.isArray(rooms) && rooms.includes(oldRoomId) && !rooms.includes(newRoomId)) {
        direct[partner] = [...rooms, newRoomId];
        changed = true;
      }
    }
    if (changed) await this.write(userId, GLOBAL_ACCOUNT_DATA, DIRECT_TYPE, direct);
  }

  /** Adds (or replaces) one tag; the room's other tags stay. */
  async addTag(userId: string, roomId: string, tag: string, content: JsonObject): Promise<void> {
    if (Buffer.byteLength(tag) > MAX_TAG_BYTES) throw new MatrixError('M_INVALID_PARAM', `Tag names are at most ${MAX_TAG_BYTES} bytes`, { status: 400 });
    if (!(await this.cache.roomsOf(userId)).has(roomId)) throw new MatrixError('M_FORBIDDEN', `User ${userId} is not in room ${roomId}`);
    await this.updateTags(userId, roomId, (tags) => {
      if (!(tag in tags) && Object.keys(tags).length >= MAX_TAGS_PER_ROOM) throw new MatrixError('M_LIMIT_EXCEEDED', `A room may carry at most ${MAX_TAGS_PER_ROOM} tags`, { status: 400 });
      tags[tag] = content;
    });
  }

  /** Removes one tag; removing a tag the room does not have is not an error (as in Synapse). */
  async removeTag(userId: string, roomId: string, tag: string): Promise<void> {
    await this.updateTags(userId, roomId, (tags) => {
      delete tags[tag];
    });
  }

  /** Read, change, write, one change at a time per user and room: concurrent tag edits never lose one. */
  private async updateTags(userId: string, roomId: string, change: (tags: Record<string, JsonObject>) => void): Promise<void> {
    const key = `${userId}\u0000${roomId}`;
    const previous = this.tagUpdates.get(key) ?? Promise.resolve();
    const next = previous.then(async () => {
      const { tags } = await this.tags(userId, roomId);
      change(tags);
      await this.write(userId, roomId, TAG_TYPE, { tags });
    });
    const settled = next.catch(() => undefined);
    this.tagUpdates.set(key, settled);
    void settled.then(() => {
      if (this.tagUpdates.get(key) === settled) this.tagUpdates.delete(key);
    });
    await next;
  }

  private readonly tagUpdates = new Map<string, Promise<void>>();

  /** The stream position of the user's newest account-data change (0 when none). */
  async latestPosition(userId: string): Promise<number> {
    const known = this.latest.get(userId);
    if (known !== undefined) return known;
    const stored = await this.storage.userData.latestAccountDataOf(userId);
    const merged = Math.max(this.latest.get(userId) ?? 0, stored);
    this.latest.set(userId, merged);
    return merged;
  }
}
