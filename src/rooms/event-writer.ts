/**
 * The only way events get written. Requests made in the same event-loop turn share one
 * transaction (group commit): with `synchronous=FULL` the fsync, not the insert, is what a commit
 * costs, so ten concurrent sends cost about one fsync instead of ten.
 *
 * Each request's `prepare` runs inside the transaction against the latest in-memory state, in
 * submission order, so auth checks see every earlier event, including those of the same batch.
 * Positions are taken in the same place; after the commit the stream moves, caches are updated
 * and the users concerned are woken.
 */
import type { Clock } from '../core/clock.js';
import { MatrixError } from '../core/errors.js';
import type { RoomRow, Storage, Stores } from '../storage/index.js';
import type { Notifier } from '../sync/notifier.js';
import type { StreamCounter } from '../sync/stream.js';
import { checkEventAuth } from './auth-rules.js';
import { assertEventSize, newEventId, rowFromEvent, type JsonObject, type StoredEvent } from './events.js';
import type { RoomCache } from './room-cache.js';
import { RoomSnapshot } from './room-snapshot.js';

export interface EventDraft {
  type: string;
  stateKey?: string | undefined;
  sender: string;
  content: JsonObject;
  /** For m.room.redaction: the target and the content it keeps. */
  redaction?: { eventId: string; redactedContent: JsonObject } | undefined;
  /** Set for requests with a transaction id; `scope` names the endpoint and its path (room, type). */
  txn?: { deviceId: string; scope: string; txnId: string } | undefined;
}

export interface WriteRequest {
  roomId: string;
  /** Set when the request creates the room; its events start from empty state. */
  newRoom?: RoomRow | undefined;
  /**
   * Runs at write time against the room's latest state and returns the events to write; throws a
   * MatrixError to refuse. Every draft is also checked by the room auth rules.
   */
  prepare(room: RoomSnapshot): EventDraft[];
}

interface Pending {
  request: WriteRequest;
  resolve(events: StoredEvent[]): void;
  reject(error: unknown): void;
}

interface Prepared {
  pending: Pending;
  room: RoomSnapshot;
  events: StoredEvent[];
  drafts: EventDraft[];
}

export class EventWriter {
  private queue: Pending[] = [];
  private flushing = false;
  private scheduled = false;

  constructor(
    private readonly storage: Storage,
    private readonly cache: RoomCache,
    private readonly stream: StreamCounter,
    private readonly notifier: Notifier,
    private readonly clock: Clock,
  ) {}

  /** Writes the request's events; resolves once they are committed. */
  async submit(request: WriteRequest): Promise<StoredEvent[]> {
    if (request.newRoom) return this.enqueue(request);
    // The snapshot must be in memory before the batch runs, since prepare cannot wait, and stay
    // there until the events are committed (the room cache drops rooms nobody is using).
    this.cache.pin(request.roomId);
    try {
      if (!(await this.cache.room(request.roomId))) {
        throw new MatrixError('M_FORBIDDEN', `Unknown room ${request.roomId}`, { status: 403 });
      }
      return await this.enqueue(request);
    } finally {
      this.cache.unpin(request.roomId);
    }
  }

  private enqueue(request: WriteRequest): Promise<StoredEvent[]> {
    return new Promise((resolve, reject) => {
      this.queue.push({ request, resolve, reject });
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.scheduled || this.flushing) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      void this.flush();
    });
  }

  private async flush(): Promise<void> {
    const batch = this.queue;
    this.queue = [];
    if (batch.length === 0) return;
    this.flushing = true;
    const prepared: Prepared[] = [];
    const touchedRooms = new Set<string>();
    let maxStream = 0;
    try {
      await this.storage.transaction(async (stores) => {
        // Synchronous up to the first write: positions are taken while holding the connection.
        for (const pending of batch) {
          const result = this.prepareOne(pending, touchedRooms);
          if (result) prepared.push(result);
        }
        for (const item of prepared) {
          for (const event of item.events) maxStream = Math.max(maxStream, event.stream);
          await this.write(stores, item);
        }
      });
    } catch (err) {
      for (const roomId of touchedRooms) this.cache.forgetRoom(roomId);
      for (const item of prepared) {
        for (const event of item.events) if (event.type === 'm.room.member') this.cache.forgetUser(event.stateKey ?? '');
      }
      // Every request of the batch is settled, including those the failure came before (a
      // rejection after a refusal is a no-op): a caller must never wait forever.
      for (const pending of batch) pending.reject(err);
      this.flushing = false;
      if (this.queue.length > 0) this.schedule();
      return;
    }
    this.stream.commit(maxStream);
    for (const roomId of touchedRooms) this.cache.reweigh(roomId);
    const wake = new Set<string>();
    for (const item of prepared) {
      if (item.pending.request.newRoom) this.cache.addRoom(item.room);
      for (const event of item.events) {
        if (event.type === 'm.room.member' && event.stateKey !== undefined) {
          const membership = event.content.membership;
          this.cache.setUserRoom(event.stateKey, event.roomId, {
            membership: typeof membership === 'string' ? membership : 'leave',
            stream: event.stream,
            forgotten: false,
          });
          wake.add(event.stateKey);
        }
      }
      // A user who asked not to be woken by their own messages is skipped for a request that is
      // only that: a message (not state, which changes what they see) they sent.
      const quietSender = item.events.length > 0 && item.events.every((event) => event.stateKey === undefined && event.sender === item.events[0]!.sender)
        ? item.events[0]!.sender
        : undefined;
      for (const userId of item.room.interestedUsers()) {
        if (userId === quietSender && this.notifier.ignoresOwnMessages(userId)) continue;
        wake.add(userId);
      }
    }
    for (const item of prepared) item.pending.resolve(item.events);
    // Senders get their answers first; the syncs this wakes are built in the next turn. No wake-up
    // is lost in between: a sync that looks now already sees the commit.
    setImmediate(() => this.notifier.notify(wake));
    this.flushing = false;
    if (this.queue.length > 0) this.schedule();
  }

  /** Checks and builds one request's events, applying them to the room's snapshot. */
  private prepareOne(pending: Pending, touchedRooms: Set<string>): Prepared | undefined {
    const { request } = pending;
    const room = request.newRoom
      ? new RoomSnapshot(request.roomId, request.newRoom.room_version, request.newRoom.creator)
      : this.cache.peek(request.roomId);
    if (!room) {
      pending.reject(new MatrixError('M_FORBIDDEN', `Unknown room ${request.roomId}`, { status: 403 }));
      return undefined;
    }
    let drafts: EventDraft[];
    try {
      drafts = request.prepare(room);
    } catch (err) {
      pending.reject(err);
      return undefined;
    }
    // A request of several events is checked on a copy, so refusing its third event leaves
    // nothing of the first two behind (a new room's snapshot is a copy already).
    const working = drafts.length > 1 && !request.newRoom ? room.clone() : room;
    const events: StoredEvent[] = [];
    const now = this.clock.now();
    for (const draft of drafts) {
      try {
        const event = this.build(working, draft, now);
        working.apply(event);
        if (draft.redaction) working.applyRedaction(draft.redaction.eventId, draft.redaction.redactedContent, event.eventId);
        events.push(event);
      } catch (err) {
        pending.reject(err);
        return undefined;
      }
    }
    if (working !== room) {
      for (const [index, event] of events.entries()) {
        room.apply(event);
        const redaction = drafts[index]?.redaction;
        if (redaction) room.applyRedaction(redaction.eventId, redaction.redactedContent, event.eventId);
      }
    }
    for (const event of events) room.remember(event);
    if (!request.newRoom && events.length > 0) touchedRooms.add(room.roomId);
    return { pending, room, events, drafts };
  }

  private build(room: RoomSnapshot, draft: EventDraft, now: number): StoredEvent {
    const auth = checkEventAuth(
      { type: draft.type, ...(draft.stateKey !== undefined ? { state_key: draft.stateKey } : {}), sender: draft.sender, content: draft.content },
      room.lookup,
    );
    if (!auth.allowed) throw new MatrixError('M_FORBIDDEN', auth.reason);
    const replaced = draft.stateKey === undefined ? undefined : room.get(draft.type, draft.stateKey);
    const event: StoredEvent = {
      stream: 0,
      eventId: newEventId(now),
      roomId: room.roomId,
      type: draft.type,
      stateKey: draft.stateKey,
      sender: draft.sender,
      originServerTs: now,
      content: draft.content,
      replacesState: replaced?.eventId,
      prevContent: replaced?.content,
      prevSender: replaced?.sender,
      redacts: draft.redaction?.eventId,
      redactedBy: undefined,
      historyVisibility: room.historyVisibility(),
      txnDeviceId: draft.txn?.deviceId,
      txnScope: draft.txn?.scope,
      txnId: draft.txn?.txnId,
    };
    assertEventSize(event, now);
    // Taken last, so a refused draft leaves no gap.
    event.stream = this.stream.next();
    return event;
  }

  private async write(stores: Stores, item: Prepared): Promise<void> {
    const { request } = item.pending;
    if (request.newRoom) await stores.rooms.insertRoom(request.newRoom);
    for (const [index, event] of item.events.entries()) {
      await stores.rooms.insertEvent(rowFromEvent(event));
      if (event.stateKey !== undefined) {
        await stores.rooms.setCurrentState(event.roomId, event.type, event.stateKey, event.eventId);
        if (event.type === 'm.room.member') {
          const membership = event.content.membership;
          await stores.rooms.setMembership({
            room_id: event.roomId,
            user_id: event.stateKey,
            membership: typeof membership === 'string' ? membership : 'leave',
            event_id: event.eventId,
            stream_ordering: event.stream,
          });
        }
      }
      const redaction = item.drafts[index]?.redaction;
      if (redaction) await stores.rooms.markRedacted(redaction.eventId, JSON.stringify(redaction.redactedContent), event.eventId);
    }
  }
}

