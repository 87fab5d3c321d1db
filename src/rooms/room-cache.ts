/**
 * Room snapshots and each user's room list, kept in memory and loaded on first use. The event
 * writer updates both right after each commit. A load that overlaps a commit to the same room or
 * user is thrown away and repeated (the generation check), so a stale read never lands in the cache.
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

export class RoomCache {
  private readonly rooms = new Map<string, RoomSnapshot>();
  private readonly roomGenerations = new Map<string, number>();
  private readonly userRooms = new Map<string, Map<string, UserRoom>>();
  private readonly userGenerations = new Map<string, number>();

  constructor(private readonly storage: Storage) {}

  /** The room's snapshot if it is loaded. */
  peek(roomId: string): RoomSnapshot | undefined {
    return this.rooms.get(roomId);
  }

  /** The room's snapshot, loading it if needed; undefined when no such room exists. */
  async room(roomId: string): Promise<RoomSnapshot | undefined> {
    for (;;) {
      const cached = this.rooms.get(roomId);
      if (cached) return cached;
      const generation = this.roomGenerations.get(roomId) ?? 0;
      const row = await this.storage.rooms.getRoom(roomId);
      if (!row) return undefined;
      const [stateRows, latestEvent, latestReceipt] = await Promise.all([
        this.storage.rooms.currentStateEvents(roomId),
        this.storage.rooms.latestStreamOfRoom(roomId),
        this.storage.userData.latestReceiptOfRoom(roomId),
      ]);
      if ((this.roomGenerations.get(roomId) ?? 0) !== generation) continue;
      const snapshot = new RoomSnapshot(roomId, row.room_version, row.creator, stateRows.map(eventFromRow));
      snapshot.latestStream = Math.max(latestEvent, latestReceipt);
      // Events written from now on are remembered; older ones are read from disk.
      snapshot.recentFloor = snapshot.latestStream;
      snapshot.latestReceiptStream = latestReceipt;
      const raced = this.rooms.get(roomId);
      if (raced) return raced;
      this.rooms.set(roomId, snapshot);
      return snapshot;
    }
  }

  addRoom(snapshot: RoomSnapshot): void {
    this.rooms.set(snapshot.roomId, snapshot);
    this.bumpRoom(snapshot.roomId);
  }

  /** Drops a room's snapshot (after a failed write) so the next use reloads it from the database. */
  forgetRoom(roomId: string): void {
    this.rooms.delete(roomId);
    this.bumpRoom(roomId);
  }

  private bumpRoom(roomId: string): void {
    this.roomGenerations.set(roomId, (this.roomGenerations.get(roomId) ?? 0) + 1);
  }

  /** Every room the user has a membership in, by room id. */
  async roomsOf(userId: string): Promise<ReadonlyMap<string, UserRoom>> {
    for (;;) {
      const cached = this.userRooms.get(userId);
      if (cached) return cached;
      const generation = this.userGenerations.get(userId) ?? 0;
      const rows = await this.storage.rooms.membershipsOfUser(userId);
      if ((this.userGenerations.get(userId) ?? 0) !== generation) continue;
      const rooms = new Map<string, UserRoom>();
      for (const row of rows) {
        rooms.set(row.room_id, { membership: row.membership, stream: Number(row.stream_ordering), forgotten: row.forgotten === 1 });
      }
      const raced = this.userRooms.get(userId);
      if (raced) return raced;
      this.userRooms.set(userId, rooms);
      return rooms;
    }
  }

  setUserRoom(userId: string, roomId: string, entry: UserRoom): void {
    this.userGenerations.set(userId, (this.userGenerations.get(userId) ?? 0) + 1);
    this.userRooms.get(userId)?.set(roomId, entry);
  }

  forgetUser(userId: string): void {
    this.userGenerations.set(userId, (this.userGenerations.get(userId) ?? 0) + 1);
    this.userRooms.delete(userId);
  }
}
