/**
 * Read receipts and read markers. Public receipts (`m.read`) are shown to the room; private ones
 * (`m.read.private`) only to their owner; `m.fully_read` is the user's room account data.
 */
import type { AccountDataService } from '../account-data/account-data-service.js';
import type { Clock } from '../core/clock.js';
import { MatrixError } from '../core/errors.js';
import type { Storage } from '../storage/index.js';
import type { Notifier } from '../sync/notifier.js';
import type { UnreadCounts } from '../sync/unread.js';
import { writeAtNextPosition, type StreamCounter } from '../sync/stream.js';
import type { RoomReader } from './room-reader.js';
import type { RoomSnapshot } from './room-snapshot.js';

export const RECEIPT_TYPES = ['m.read', 'm.read.private', 'm.fully_read'] as const;
export type ReceiptType = (typeof RECEIPT_TYPES)[number];

export class ReceiptService {
  constructor(
    private readonly storage: Storage,
    private readonly stream: StreamCounter,
    private readonly notifier: Notifier,
    private readonly reader: RoomReader,
    private readonly accountData: AccountDataService,
    private readonly clock: Clock,
    private readonly unread: UnreadCounts,
  ) {}

  private readonly publicReceiptListeners: Array<(roomId: string, userId: string, eventId: string, threadId: string | undefined, ts: number) => void> = [];

  /** Called after a local user's public receipt is stored (federation sends it on). */
  onPublicReceipt(listener: (roomId: string, userId: string, eventId: string, threadId: string | undefined, ts: number) => void): void {
    this.publicReceiptListeners.push(listener);
  }

  private readonly readReceiptListeners: Array<(roomId: string, userId: string) => void> = [];

  /** Called after a local user's read receipt (public or private) moved: push gateways get the new badge. */
  onReadReceipt(listener: (roomId: string, userId: string) => void): void {
    this.readReceiptListeners.push(listener);
  }

  async setReceipt(userId: string, roomId: string, type: ReceiptType, eventId: string, threadId: string | undefined): Promise<void> {
    const room = await this.reader.roomWhereJoined(roomId, userId);
    const event = await this.reader.getEvent(eventId);
    if (!event || event.roomId !== roomId) throw new MatrixError('M_NOT_FOUND', 'Event not found');
    if (type === 'm.fully_read') {
      if (threadId !== undefined) throw new MatrixError('M_INVALID_PARAM', 'thread_id is not allowed for m.fully_read');
      await this.accountData.write(userId, roomId, 'm.fully_read', { event_id: eventId });
      return;
    }
    // Read receipts only move forwards (as Synapse's): one for an earlier event than the user's
    // receipt is accepted and changes nothing. Checked in the write itself (two receipts may race).
    const ts = this.clock.now();
    const stored = await this.store(room, userId, type, eventId, event.stream, threadId, ts);
    if (stored && type === 'm.read') for (const listener of this.publicReceiptListeners) listener(roomId, userId, eventId, threadId, ts);
    if (stored) for (const listener of this.readReceiptListeners) listener(roomId, userId);
  }

  /** A public receipt of a user of another server (a federation EDU), for an event we have. */
  async setRemoteReceipt(room: RoomSnapshot, userId: string, eventId: string, threadId: string | undefined): Promise<void> {
    const event = await this.reader.getEvent(eventId);
    if (!event || event.roomId !== room.roomId) return;
    await this.store(room, userId, 'm.read', eventId, event.stream, threadId, this.clock.now());
  }

  /** Stores the receipt unless the user's marks a later event; says whether it did. */
  private async store(room: RoomSnapshot, userId: string, type: ReceiptType, eventId: string, eventStream: number, threadId: string | undefined, ts: number): Promise<boolean> {
    const roomId = room.roomId;
    let stored = false;
    await writeAtNextPosition(
      this.storage,
      this.stream,
      async (stores, position, effects) => {
        effects.receipts.push([roomId, userId]);
        const row = { room_id: roomId, user_id: userId, receipt_type: type, thread_id: threadId ?? '', event_id: eventId, ts, stream_ordering: position };
        stored = await stores.userData.setReceiptIfNewer(row, eventStream);
      },
      (position) => {
        // Before the position is readable, or a sync could read past the receipt and skip the room.
        // The room may have been reloaded meanwhile: mark the snapshot in use now.
        const current = this.reader.loadedRoom(roomId) ?? room;
        if (position > current.latestStream) current.latestStream = position;
        if (position > current.latestReceiptStream) current.latestReceiptStream = position;
        // A load of the room under way may have read its receipts before this one: it starts over.
        this.reader.roomChanged(roomId);
        this.unread.receiptMoved(roomId, userId);
      },
    );
    if (stored) this.notifier.notify(type === 'm.read.private' ? [userId] : [...room.interestedUsers(), ...this.notifier.peekersOf(roomId)]);
    return stored;
  }
}
