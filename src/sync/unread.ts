/**
 * Unread counts per (room, user), kept between syncs. A bot that never sends read receipts would
 * otherwise have up to a thousand messages counted by a query on every sync of a busy room; with
 * the counts kept, an incremental sync only adds the new timeline events it already holds. A new
 * read receipt, a rejoin or a gap (a limited or filtered timeline) means a fresh count.
 */
import type { StoredEvent } from '../rooms/events.js';
import type { RoomSnapshot } from '../rooms/room-snapshot.js';
import type { Storage } from '../storage/index.js';

/** Counting stops here; clients show "99+" long before. */
export const UNREAD_COUNT_CAP = 1000;

const NOTIFYING_TYPES = new Set(['m.room.message', 'm.room.encrypted', 'm.sticker']);

interface Counted {
  /** The user's membership event position the count started from. */
  floor: number;
  /** Position the count is correct at. */
  upTo: number;
  notifications: number;
  highlights: number;
}

export interface UnreadCountsResult {
  notification_count: number;
  highlight_count: number;
}

export class UnreadCounts {
  private readonly counted = new Map<string, Counted>();
  /** Moves with each receipt, so a count that raced with one is not kept. */
  private readonly receiptGenerations = new Map<string, number>();

  constructor(private readonly storage: Storage) {}

  /** The user's read receipt moved: the next sync counts afresh. */
  receiptMoved(roomId: string, userId: string): void {
    const key = `${roomId}\u0000${userId}`;
    this.counted.delete(key);
    this.receiptGenerations.set(key, (this.receiptGenerations.get(key) ?? 0) + 1);
  }

  /**
   * Counts at `upTo`. `newEvents`, when given, are all the events in `(after, upTo]` (an
   * unfiltered, unlimited incremental timeline), so a count kept at `after` can be carried forward.
   */
  async countsAt(room: RoomSnapshot, userId: string, upTo: number, newEvents?: { after: number; events: StoredEvent[] }): Promise<UnreadCountsResult> {
    const key = `${room.roomId}\u0000${userId}`;
    const floor = room.get('m.room.member', userId)?.stream ?? 0;
    const kept = this.counted.get(key);
    const generation = this.receiptGenerations.get(key) ?? 0;
    let next: Counted;
    if (kept && newEvents && kept.floor === floor && kept.upTo === newEvents.after) {
      next = { ...kept, upTo };
      for (const event of newEvents.events) {
        if (!NOTIFYING_TYPES.has(event.type) || event.sender === userId || event.redactedBy) continue;
        next.notifications = Math.min(UNREAD_COUNT_CAP, next.notifications + 1);
        if (JSON.stringify(event.content).includes(userId)) next.highlights = Math.min(UNREAD_COUNT_CAP, next.highlights + 1);
      }
    } else {
      const counts = await this.storage.rooms.countUnread(room.roomId, userId, floor, upTo, UNREAD_COUNT_CAP);
      next = { floor, upTo, ...counts };
    }
    if ((this.receiptGenerations.get(key) ?? 0) === generation) this.counted.set(key, next);
    return { notification_count: next.notifications, highlight_count: next.highlights };
  }
}
