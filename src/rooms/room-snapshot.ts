/**
 * A room's current state held in memory: the state events by (type, state_key) and each user's
 * membership. The event writer is the only code that changes a snapshot, right after the event
 * is written, so the auth rules always check against the latest state without a query.
 */
import type { StateEvent, StateLookup } from './auth-rules.js';
import { stateKeyOf, toStrippedState, type StoredEvent } from './events.js';
import { knownRoomVersion, type RoomVersion } from './room-versions.js';

/** Where the room's DAG ends: what a new local event builds on. */
export interface RoomHead {
  /** The forward extremities: events with no child yet (a new event's prev_events). */
  extremities: string[];
  /** The deepest extremity's depth. */
  depth: number;
  /** The state group of the current state, and how many deltas it is past a snapshot. */
  stateGroup: number | undefined;
  stateGroupDepth: number;
}

/** Enough for a bot's incremental syncs; older timelines come from the database. */
const RECENT_EVENTS_KEPT = 64;

/** State shown before joining (invites, knocks): the spec's recommended set. */
export const STRIPPED_STATE_TYPES = ['m.room.create', 'm.room.join_rules', 'm.room.name', 'm.room.avatar', 'm.room.canonical_alias', 'm.room.encryption', 'm.room.topic'];

export class RoomSnapshot {
  private readonly state = new Map<string, StoredEvent>();
  private readonly memberships = new Map<string, string>();
  // Kept beside the map, so the hot paths (waking a room's users after every send, member
  // counts in every sync) cost the joined and invited users, not everyone who ever left.
  private readonly joined = new Set<string>();
  private readonly invited = new Set<string>();
  /** Joined members per server: the servers events must reach, without walking every member. */
  private readonly joinedPerServer = new Map<string, number>();
  /** Stream position of the newest event (or receipt) in the room. */
  latestStream = 0;
  /** Stream position of the newest receipt in the room: syncs skip the receipts query below it. */
  latestReceiptStream = 0;
  /**
   * The last position at which the room's state changed other than by a new state event (state
   * resolution over other servers' events): a sync from before it gets the whole state again.
   */
  stateResetStream = 0;
  /**
   * The room's newest events, oldest first: every event with a position above `recentFloor` is
   * here. An incremental sync (the bot's loop) reads its timeline from this instead of querying
   * the events it was just woken for.
   */
  private recent: StoredEvent[] = [];
  /** Position below which `recent` may be missing events; a snapshot loaded from disk starts full. */
  recentFloor = 0;
  /** The rules of the room's version. */
  readonly version: RoomVersion;
  head: RoomHead;

  constructor(
    readonly roomId: string,
    readonly roomVersion: string,
    readonly creator: string,
    stateEvents: Iterable<StoredEvent> = [],
    head: RoomHead = { extremities: [], depth: 0, stateGroup: undefined, stateGroupDepth: 0 },
    /** Made before events were PDUs: kept local. */
    readonly legacy = false,
  ) {
    this.version = knownRoomVersion(roomVersion);
    this.head = head;
    for (const event of stateEvents) this.apply(event);
  }

  get(type: string, stateKey = ''): StoredEvent | undefined {
    return this.state.get(stateKeyOf(type, stateKey));
  }

  /** The view the pure auth rules take. */
  readonly lookup: StateLookup = (type, stateKey) => {
    const event = this.get(type, stateKey);
    if (!event) return undefined;
    const view: StateEvent = { event_id: event.eventId, type: event.type, state_key: event.stateKey ?? '', sender: event.sender, content: event.content };
    return view;
  };

  membership(userId: string): string {
    return this.memberships.get(userId) ?? 'leave';
  }

  isJoined(userId: string): boolean {
    return this.memberships.get(userId) === 'join';
  }

  joinedUsers(): ReadonlySet<string> {
    return this.joined;
  }

  invitedUsers(): ReadonlySet<string> {
    return this.invited;
  }

  /** Users who should hear about new events: the joined and the invited. */
  interestedUsers(): string[] {
    return [...this.joined, ...this.invited];
  }

  stateEvents(): IterableIterator<StoredEvent> {
    return this.state.values();
  }

  /** What the snapshot costs to hold, in events: its state and its recent events. */
  weight(): number {
    return this.state.size + this.recent.length;
  }

  historyVisibility(): string {
    const value = this.get('m.room.history_visibility')?.content.history_visibility;
    return typeof value === 'string' ? value : 'shared';
  }

  apply(event: StoredEvent): void {
    if (event.stream > this.latestStream) this.latestStream = event.stream;
    if (event.stateKey === undefined) return;
    this.state.set(stateKeyOf(event.type, event.stateKey), event);
    if (event.type === 'm.room.member') {
      const membership = event.content.membership;
      this.setMembership(event.stateKey, typeof membership === 'string' ? membership : 'leave');
    }
  }

  /** Drops a key from the current state (state resolution can leave a key out). */
  removeState(type: string, stateKey: string): void {
    this.state.delete(stateKeyOf(type, stateKey));
    if (type === 'm.room.member') this.setMembership(stateKey, 'leave');
  }

  /** Keeps a newly written event among the recent ones (the writer calls this for each event). */
  remember(event: StoredEvent): void {
    this.recent.push(event);
    if (this.recent.length > RECENT_EVENTS_KEPT) this.recentFloor = this.recent.shift()!.stream;
  }

  /**
   * Another process wrote events that change nothing of the state (messages) up to `latest`:
   * the room moves to their head, and the recent events in memory stop short of theirs, so any
   * window reaching back past them is read from the database.
   */
  movedElsewhere(head: RoomHead, latest: number): void {
    this.head = head;
    if (latest > this.latestStream) this.latestStream = latest;
    this.recent = this.recent.filter((event) => event.stream > latest);
    if (latest > this.recentFloor) this.recentFloor = latest;
  }

  /**
   * The recent events with `after < stream <= upTo`, newest first, or undefined when some of
   * them may not be in memory.
   */
  recentEvents(after: number, upTo: number): StoredEvent[] | undefined {
    if (after < this.recentFloor) return undefined;
    const found: StoredEvent[] = [];
    for (let index = this.recent.length - 1; index >= 0; index--) {
      const event = this.recent[index]!;
      if (event.stream <= after) break;
      if (event.stream <= upTo) found.push(event);
    }
    return found;
  }

  /**
   * Applies a redaction to the current state: the redacted event's content, and the prev_content
   * of the event that replaced it.
   */
  applyRedaction(eventId: string, content: Record<string, unknown>, redactedBy: string): void {
    // The recent events change as their rows do (see RoomStore.markRedacted).
    for (const [index, event] of this.recent.entries()) {
      if (event.eventId === eventId) this.recent[index] = { ...event, content, redactedBy };
      else if (event.replacesState === eventId) this.recent[index] = { ...event, prevContent: content };
    }
    for (const [key, event] of this.state) {
      if (event.replacesState === eventId) this.state.set(key, { ...event, prevContent: content });
      if (event.eventId !== eventId) continue;
      this.state.set(key, { ...event, content, redactedBy });
      if (event.type === 'm.room.member') {
        const membership = content.membership;
        this.setMembership(event.stateKey ?? '', typeof membership === 'string' ? membership : 'leave');
      }
    }
  }

  /**
   * The state an invited (or knocking) user sees of the room before joining: the spec's
   * recommended set, stripped to type, state_key, sender and content.
   */
  strippedState(): Array<Record<string, unknown>> {
    return STRIPPED_STATE_TYPES.flatMap((type) => {
      const event = this.get(type);
      return event ? [toStrippedState(event)] : [];
    });
  }

  /** Servers with joined members (ours included when we are in the room). */
  joinedServers(): IterableIterator<string> {
    return this.joinedPerServer.keys();
  }

  /** Whether a user of `server` is joined now. */
  hasJoinedMember(server: string): boolean {
    return this.joinedPerServer.has(server);
  }

  /** Servers with joined members, those with the most first (the likeliest to hold the room's history). */
  serversByMembers(): string[] {
    return [...this.joinedPerServer].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).map(([server]) => server);
  }

  private setMembership(userId: string, membership: string): void {
    this.memberships.set(userId, membership);
    const wasJoined = this.joined.has(userId);
    if (membership === 'join' && !wasJoined) {
      const server = userId.slice(userId.indexOf(':') + 1);
      this.joinedPerServer.set(server, (this.joinedPerServer.get(server) ?? 0) + 1);
    } else if (membership !== 'join' && wasJoined) {
      const server = userId.slice(userId.indexOf(':') + 1);
      const left = (this.joinedPerServer.get(server) ?? 1) - 1;
      if (left > 0) this.joinedPerServer.set(server, left);
      else this.joinedPerServer.delete(server);
    }
    if (membership === 'join') this.joined.add(userId);
    else this.joined.delete(userId);
    if (membership === 'invite') this.invited.add(userId);
    else this.invited.delete(userId);
  }

  /** An independent copy, for checking several events before any of them counts. */
  clone(): RoomSnapshot {
    const copy = new RoomSnapshot(this.roomId, this.roomVersion, this.creator, this.state.values(), { ...this.head, extremities: [...this.head.extremities] }, this.legacy);
    copy.latestStream = this.latestStream;
    copy.latestReceiptStream = this.latestReceiptStream;
    return copy;
  }
}
