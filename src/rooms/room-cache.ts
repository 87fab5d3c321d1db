/**
 * Room snapshots and each user's room list, kept in memory and loaded on first use. The event
 * writer updates both right after each commit. A load that overlaps a commit to the same room or
 * user is thrown away and repeated (the generation check), so a stale read never lands in the cache.
 *
 * Memory follows the working set, not history: the snapshots held are bounded by the state events
 * they carry (`caches.room_state_events`), the room lists by the users they belong to
 * (`caches.user_room_lists`). Past a bound, the entries used longest ago are dropped (a tenth more
 * than needed, so dropping is rare) and reloaded from the database when next needed. A room with
 * a write in flight is pinned: the writer works on its snapshot between the submit and the commit.
 */
import type { Storage } from '../storage/index.js';
import { eventFromRow } from './events.js';
import { RoomSnapshot } from './room-snapshot.js';

export interface UserRoom {
  membership: string;
  /** Stream position of the user's latest membership event in the room. */
  stream: number;
  forgotten: boolean;
}

export interface RoomCacheLimits {
  /** State events (plus recent events) held across all cached rooms. */
  roomStateEvents: number;
  /** Users whose room lists are held. */
  userRoomLists: number;
}

interface CachedRoom {
  snapshot: RoomSnapshot;
  /** The snapshot's weight when last measured (see RoomSnapshot.weight). */
  weight: number;
  lastUsed: number;
}

interface CachedUser {
  rooms: Map<string, UserRoom>;
  lastUsed: number;
}

/** After a bound is passed, entries are dropped until this fraction of it is left. */
const EVICT_DOWN_TO = 0.9;

export class RoomCache {
  private readonly rooms = new Map<string, CachedRoom>();
  private readonly roomGenerations = new Map<string, number>();
  private readonly userRooms = new Map<string, CachedUser>();
  private readonly userGenerations = new Map<string, number>();
  /** Rooms with writes in flight, and how many. */
  private readonly pins = new Map<string, number>();
  private totalWeight = 0;
  /** A use counter: cheaper on the hot paths than keeping a Map in recency order. */
  private uses = 0;

  /** Moved by `forgetAll`: a load that began before it is thrown away. */
  private epoch = 0;

  constructor(
    private readonly storage: Storage,
    private readonly limits: RoomCacheLimits = { roomStateEvents: 200_000, userRoomLists: 50_000 },
  ) {}

  /** The room's snapshot if it is loaded. */
  peek(roomId: string): RoomSnapshot | undefined {
    const cached = this.rooms.get(roomId);
    if (!cached) return undefined;
    cached.lastUsed = ++this.uses;
    return cached.snapshot;
  }

  /** The room's snapshot, loading it if needed; undefined when no such room exists. */
  async room(roomId: string): Promise<RoomSnapshot | undefined> {
    for (;;) {
      const cached = this.peek(roomId);
      if (cached) return cached;
      const generation = this.roomGenerations.get(roomId) ?? 0;
      const epoch = this.epoch;
      const row = await this.storage.rooms.getRoom(roomId);
      if (!row) return undefined;
      const [stateRows, latestEvent, latestReceipt, stateGroupDepth] = await Promise.all([
        this.storage.rooms.currentStateEvents(roomId),
        this.storage.rooms.latestStreamOfRoom(roomId),
        this.storage.userData.latestReceiptOfRoom(roomId),
        row.state_group === null ? 0 : this.storage.rooms.stateGroupDepth(Number(row.state_group)),
      ]);
      if ((this.roomGenerations.get(roomId) ?? 0) !== generation || this.epoch !== epoch) continue;
      const head = {
        extremities: JSON.parse(row.extremities) as string[],
        depth: Number(row.depth),
        stateGroup: row.state_group === null ? undefined : Number(row.state_group),
        stateGroupDepth,
      };
      const snapshot = new RoomSnapshot(roomId, row.room_version, row.creator, stateRows.map(eventFromRow), head, row.legacy === 1);
      snapshot.latestStream = Math.max(latestEvent, latestReceipt);
      // Events written from now on are remembered; older ones are read from disk.
      snapshot.recentFloor = snapshot.latestStream;
      snapshot.latestReceiptStream = latestReceipt;
      snapshot.stateResetStream = Number(row.state_reset_stream);
      const raced = this.peek(roomId);
      if (raced) return raced;
      this.hold(snapshot);
      return snapshot;
    }
  }

  addRoom(snapshot: RoomSnapshot): void {
    this.drop(snapshot.roomId);
    this.bumpRoom(snapshot.roomId);
    this.hold(snapshot);
  }

  /** Drops a room's snapshot (after a failed write) so the next use reloads it from the database. */
  forgetRoom(roomId: string): void {
    this.drop(roomId);
    this.bumpRoom(roomId);
  }

  /**
   * Something a snapshot marks (a receipt) was committed: a load under way may have read the
   * database before it, so it must start again.
   */
  roomChanged(roomId: string): void {
    this.bumpRoom(roomId);
  }

  /** The writer changed a snapshot it holds: its weight is measured again. */
  reweigh(roomId: string): void {
    const cached = this.rooms.get(roomId);
    if (!cached) return;
    const weight = cached.snapshot.weight();
    this.totalWeight += weight - cached.weight;
    cached.weight = weight;
    this.evictRoomsIfOver();
  }

  /** Keeps a room in memory while a write to it is in flight; each pin needs its unpin. */
  pin(roomId: string): void {
    this.pins.set(roomId, (this.pins.get(roomId) ?? 0) + 1);
  }

  unpin(roomId: string): void {
    const count = (this.pins.get(roomId) ?? 0) - 1;
    if (count > 0) this.pins.set(roomId, count);
    else this.pins.delete(roomId);
  }

  /** Rooms and weight held now (for tests and metrics). */
  get held(): { rooms: number; weight: number; users: number } {
    return { rooms: this.rooms.size, weight: this.totalWeight, users: this.userRooms.size };
  }

  private hold(snapshot: RoomSnapshot): void {
    const weight = snapshot.weight();
    this.rooms.set(snapshot.roomId, { snapshot, weight, lastUsed: ++this.uses });
    this.totalWeight += weight;
    this.evictRoomsIfOver();
  }

  private drop(roomId: string): void {
    const cached = this.rooms.get(roomId);
    if (!cached) return;
    this.rooms.delete(roomId);
    this.totalWeight -= cached.weight;
  }

  private bumpRoom(roomId: string): void {
    this.roomGenerations.set(roomId, (this.roomGenerations.get(roomId) ?? 0) + 1);
  }

  private evictRoomsIfOver(): void {
    if (this.totalWeight <= this.limits.roomStateEvents) return;
    const target = this.limits.roomStateEvents * EVICT_DOWN_TO;
    // The room used last is kept even if it alone is over the bound: it is being used.
    const candidates = [...this.rooms].filter(([roomId]) => !this.pins.has(roomId)).sort((a, b) => a[1].lastUsed - b[1].lastUsed);
    candidates.pop();
    for (const [roomId] of candidates) {
      if (this.totalWeight <= target) break;
      this.drop(roomId);
    }
    // Generations of rooms no longer held are kept: a load under way must still see a bump. They
    // are small (one number per room ever loaded in this process).
  }

  /** Everyone (the user included) joined to a room the user is joined to: who shares a room with them. */
  async roommates(userId: string): Promise<Set<string>> {
    const users = new Set<string>([userId]);
    for (const [roomId, entry] of await this.roomsOf(userId)) {
      if (entry.membership !== 'join') continue;
      const room = await this.room(roomId);
      for (const member of room?.joinedUsers() ?? []) users.add(member);
    }
    return users;
  }

  /** Every room the user has a membership in, by room id. */
  async roomsOf(userId: string): Promise<ReadonlyMap<string, UserRoom>> {
    for (;;) {
      const cached = this.userRooms.get(userId);
      if (cached) {
        cached.lastUsed = ++this.uses;
        return cached.rooms;
      }
      const generation = this.userGenerations.get(userId) ?? 0;
      const epoch = this.epoch;
      const rows = await this.storage.rooms.membershipsOfUser(userId);
      if ((this.userGenerations.get(userId) ?? 0) !== generation || this.epoch !== epoch) continue;
      const rooms = new Map<string, UserRoom>();
      for (const row of rows) {
        rooms.set(row.room_id, { membership: row.membership, stream: Number(row.stream_ordering), forgotten: row.forgotten === 1 });
      }
      const raced = this.userRooms.get(userId);
      if (raced) return raced.rooms;
      this.userRooms.set(userId, { rooms, lastUsed: ++this.uses });
      this.evictUsersIfOver();
      return rooms;
    }
  }

  /** The user's rooms if their list is in memory (never loads it). */
  peekRoomsOf(userId: string): ReadonlyMap<string, UserRoom> | undefined {
    return this.userRooms.get(userId)?.rooms;
  }

  setUserRoom(userId: string, roomId: string, entry: UserRoom): void {
    this.userGenerations.set(userId, (this.userGenerations.get(userId) ?? 0) + 1);
    this.userRooms.get(userId)?.rooms.set(roomId, entry);
  }

  /**
   * Drops every snapshot and room list (another process's changes were not all heard of), and
   * makes every load under way start again: it may have read what those changes changed, for a
   * room or user not held (whose generation nothing here bumps).
   */
  forgetAll(): void {
    this.epoch += 1;
    for (const roomId of [...this.rooms.keys()]) this.forgetRoom(roomId);
    for (const userId of [...this.userRooms.keys()]) this.forgetUser(userId);
  }

  forgetUser(userId: string): void {
    this.userGenerations.set(userId, (this.userGenerations.get(userId) ?? 0) + 1);
    this.userRooms.delete(userId);
  }

  private evictUsersIfOver(): void {
    if (this.userRooms.size <= this.limits.userRoomLists) return;
    const target = Math.floor(this.limits.userRoomLists * EVICT_DOWN_TO);
    const oldest = [...this.userRooms].sort((a, b) => a[1].lastUsed - b[1].lastUsed);
    for (const [userId] of oldest.slice(0, this.userRooms.size - target)) this.userRooms.delete(userId);
  }
}
