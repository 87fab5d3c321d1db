/**
 * Unread counts per (room, user), kept between syncs: the events since the user's read receipt
 * that the user's push rules say notify (`notification_count`) and highlight (`highlight_count`).
 * A bot that never sends read receipts would otherwise have up to a thousand events evaluated on
 * every sync of a busy room; with the counts kept, an incremental sync only evaluates the new
 * timeline events it already holds. A new read receipt, a rejoin or a gap (a limited or filtered
 * timeline) means a fresh count, and so does a change to the user's push rules, so the counts
 * always say what the rules the user has now say.
 */
import { parseStoredJson } from '../core/json.js';
import { evaluatePush, type CompiledRuleset, type PushableEvent, type PushOutcome, type PushRoomContext } from '../push/evaluator.js';
import { effectivePowerLevels, userPowerLevel } from '../rooms/auth-rules.js';
import type { StoredEvent } from '../rooms/events.js';
import type { RoomSnapshot } from '../rooms/room-snapshot.js';
import type { Storage } from '../storage/index.js';

/** Counting looks at most this many events back from the newest; clients show "99+" long before. */
export const UNREAD_COUNT_CAP = 1000;

/** The user's push rules, compiled (the push rules service keeps them). */
export type RulesOf = (userId: string) => Promise<CompiledRuleset>;

interface Counted {
  /** Where the user's current stay in the room began; the count starts there at the earliest. */
  floor: number;
  /** The member event the floor was found for. */
  memberEventId: string | undefined;
  /** Position the count is correct at. */
  upTo: number;
  /** The push rules it was counted by: when the user changes them, the count is made afresh. */
  rules: CompiledRuleset;
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

  constructor(
    private readonly storage: Storage,
    private readonly rulesOf: RulesOf,
  ) {}

  /** Every count is made afresh (another process's receipts were not all heard of). */
  forgetAll(): void {
    for (const key of this.counted.keys()) this.receiptGenerations.set(key, (this.receiptGenerations.get(key) ?? 0) + 1);
    this.counted.clear();
  }

  /** The user's read receipt moved: the next sync counts afresh. */
  receiptMoved(roomId: string, userId: string): void {
    const key = `${roomId}\u0000${userId}`;
    this.counted.delete(key);
    this.receiptGenerations.set(key, (this.receiptGenerations.get(key) ?? 0) + 1);
  }

  /**
   * Counts at `upTo`. `newEvents`, when given, are all the events in `(after, upTo]` (an
   * unfiltered, unlimited incremental timeline), so a count kept at `after` can be carried forward.
   * Events from `ignored` users never count.
   */
  async countsAt(room: RoomSnapshot, userId: string, upTo: number, ignored: ReadonlySet<string>, newEvents?: { after: number; events: StoredEvent[] }): Promise<UnreadCountsResult> {
    const key = `${room.roomId}\u0000${userId}`;
    // Read before anything that can yield: a receipt moving meanwhile must discard this count.
    const generation = this.receiptGenerations.get(key) ?? 0;
    const rules = await this.rulesOf(userId);
    const counted = this.counted.get(key);
    const kept = counted?.rules === rules ? counted : undefined;
    const { floor, memberEventId } = await this.joinedSince(room, userId, kept);
    let next: Counted;
    // What happened in the room since the kept count: from memory when the room still holds it
    // (a bot syncing many rooms counts one room while the others move the token on), else from
    // this sync's timeline when that holds every new event.
    const since = kept && kept.floor === floor ? this.eventsSince(room, kept.upTo, upTo) ?? (newEvents && kept.upTo === newEvents.after ? newEvents.events : undefined) : undefined;
    // A redaction may remove a counted message: count afresh then.
    const redacts = since?.some((event) => event.type === 'm.room.redaction') ?? false;
    // Built on the first event to evaluate: most carried counts have none.
    let evaluator: RoomEvaluator | undefined;
    const evaluate = (event: PushableEvent) => (evaluator ??= new RoomEvaluator(room, userId, rules, ignored)).evaluate(event);
    if (kept && since && !redacts) {
      next = { ...kept, upTo, memberEventId };
      for (const event of since) {
        if (event.redactedBy) continue;
        const outcome = evaluate({ type: event.type, sender: event.sender, room_id: room.roomId, state_key: event.stateKey, content: event.content });
        if (outcome.notify) next.notifications = Math.min(UNREAD_COUNT_CAP, next.notifications + 1);
        if (outcome.highlight) next.highlights = Math.min(UNREAD_COUNT_CAP, next.highlights + 1);
      }
    } else {
      next = { floor, memberEventId, upTo, rules, notifications: 0, highlights: 0 };
      for (const row of await this.storage.rooms.unreadCandidates(room.roomId, userId, floor, upTo, UNREAD_COUNT_CAP)) {
        const content = parseStoredJson<Record<string, unknown>>(row.content, {});
        const outcome = evaluate({ type: row.type, sender: row.sender, room_id: room.roomId, state_key: row.state_key ?? undefined, content });
        if (outcome.notify) next.notifications++;
        if (outcome.highlight) next.highlights++;
      }
    }
    if ((this.receiptGenerations.get(key) ?? 0) === generation) this.counted.set(key, next);
    return { notification_count: next.notifications, highlight_count: next.highlights };
  }

  /** The room's events in `(after, upTo]` if memory has them all (none at all when nothing moved). */
  private eventsSince(room: RoomSnapshot, after: number, upTo: number): StoredEvent[] | undefined {
    // A count kept at a newer position than this sync's (two syncs at once): count afresh.
    if (after > upTo) return undefined;
    if (after === upTo || room.latestStream <= after) return [];
    return room.recentEvents(after, upTo)?.reverse();
  }

  /**
   * Where the user's current stay in the room began, so a display name change (a new member event)
   * does not mark everything read. Carried from the kept count when the member event is the same or
   * follows it; otherwise read from the database.
   */
  private async joinedSince(room: RoomSnapshot, userId: string, kept: Counted | undefined): Promise<{ floor: number; memberEventId: string | undefined }> {
    const member = room.get('m.room.member', userId);
    if (!member) return { floor: 0, memberEventId: undefined };
    if (kept?.memberEventId === member.eventId) return { floor: kept.floor, memberEventId: member.eventId };
    // Not a profile change: the stay begins with this event.
    if (member.prevContent?.membership !== 'join') return { floor: member.stream, memberEventId: member.eventId };
    if (kept && member.replacesState === kept.memberEventId) return { floor: kept.floor, memberEventId: member.eventId };
    return { floor: await this.storage.rooms.currentJoinStart(room.roomId, userId), memberEventId: member.eventId };
  }

}

const SILENT: PushOutcome = { notify: false, highlight: false };

/**
 * Evaluates a room's events for one user, with what the push conditions ask of the room read from
 * its current state (Synapse reads the state at each event; for counting unread events since the
 * last receipt, the current state is close enough and costs nothing).
 */
export class RoomEvaluator {
  /** One object for the room; only the sender's level changes from event to event. */
  private readonly context: PushRoomContext;
  private readonly levels: ReturnType<typeof effectivePowerLevels>;

  constructor(
    room: RoomSnapshot,
    private readonly userId: string,
    private readonly rules: CompiledRuleset,
    private readonly ignored: ReadonlySet<string>,
  ) {
    this.levels = effectivePowerLevels(room.lookup, room.version);
    const displayName = room.get('m.room.member', userId)?.content.displayname;
    this.context = {
      memberCount: room.joinedUsers().size,
      displayName: typeof displayName === 'string' ? displayName : undefined,
      notificationLevels: this.levels.notifications,
      senderPowerLevel: 0,
    };
  }

  evaluate(event: PushableEvent): PushOutcome {
    if (event.sender === this.userId || this.ignored.has(event.sender)) return SILENT;
    this.context.senderPowerLevel = userPowerLevel(this.levels, event.sender);
    return evaluatePush(this.rules, event, this.context);
  }
}
