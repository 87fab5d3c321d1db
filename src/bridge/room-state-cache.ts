/**
 * What the appservice bridge knows of its rooms' state without asking the main homeserver: each
 * room's encryption and members, kept by the events the homeserver pushes in its transactions
 * (they carry every event of the rooms the bridge is in). Without it every post cost a request
 * for the room's `m.room.encryption` and, in an encrypted room, one for its members, before the send.
 *
 * - Encryption: once a room is encrypted it stays so (`m.room.encryption` cannot be removed), so a
 *   positive answer is kept for good; a negative one until an `m.room.encryption` arrives (which
 *   then is kept), or until it is `maxAgeMs` old.
 * - Members (every membership but `leave`): kept per room, each `m.room.member` of a transaction
 *   applied to it, asked again once `maxAgeMs` old (a transaction the homeserver dropped must not
 *   leave the bridge wrong for long).
 * - At most `maxRooms` rooms (the oldest go first).
 *
 * Pure: the adapter asks the homeserver and hands the answers in (`rememberEncryption`,
 * `rememberMembers`), only answers, never errors. A read that started before a transaction
 * changed the state (`version` taken before it) is not kept: it may predate the change.
 */
import { BoundedCache } from '../core/bounded-cache.js';
import type { Clock } from '../core/clock.js';
import type { JsonObject } from '../rooms/events.js';

export const ROOM_STATE_CACHE_ROOMS = 10_000;
/** How old an answer that may change (not encrypted, the members) may be before it is asked again. */
export const ROOM_STATE_MAX_AGE_MS = 5 * 60_000;

interface RoomState {
  /** The room's `m.room.encryption` content (kept for good), or undefined: not encrypted as of `at`. */
  encryption?: { content: JsonObject | undefined; at: number } | undefined;
  /** Each member's membership (`join`, `invite`, `knock`, `ban`; no `leave`), as of `at` plus the events since. */
  members?: { memberships: Map<string, string>; at: number } | undefined;
}

/** What the cache says of a room's encryption: known (encrypted with `content`, or not), or unknown. */
export type KnownEncryption = { content: JsonObject | undefined } | undefined;

export class RoomStateCache {
  private readonly rooms: BoundedCache<string, RoomState>;
  /** Bumped by every state change a transaction brings (any room): reads begun before are not kept. */
  private changes = 0;

  constructor(
    private readonly clock: Clock,
    private readonly maxAgeMs = ROOM_STATE_MAX_AGE_MS,
    maxRooms = ROOM_STATE_CACHE_ROOMS,
  ) {
    this.rooms = new BoundedCache(maxRooms);
  }

  /** How many rooms are held. */
  get size(): number {
    return this.rooms.size;
  }

  /** Take before asking the homeserver; give it back with the answer. */
  get version(): number {
    return this.changes;
  }

  encryption(roomId: string): KnownEncryption {
    const known = this.rooms.get(roomId)?.encryption;
    if (!known) return undefined;
    if (known.content !== undefined || this.fresh(known.at)) return { content: known.content };
    return undefined;
  }

  /** The room's memberships other than `leave`, or undefined when not known (or too old). */
  members(roomId: string): ReadonlyMap<string, string> | undefined {
    const known = this.rooms.get(roomId)?.members;
    return known && this.fresh(known.at) ? known.memberships : undefined;
  }

  rememberEncryption(roomId: string, content: JsonObject | undefined, version: number): void {
    if (version !== this.changes) return;
    const state = this.rooms.get(roomId) ?? {};
    // A room known to be encrypted stays so, whatever a slower read says.
    if (state.encryption?.content !== undefined && content === undefined) return;
    this.rooms.set(roomId, { ...state, encryption: { content, at: this.clock.now() } });
  }

  rememberMembers(roomId: string, memberships: ReadonlyMap<string, string>, version: number): void {
    if (version !== this.changes) return;
    const state = this.rooms.get(roomId) ?? {};
    const kept = new Map([...memberships].filter(([, membership]) => membership !== 'leave'));
    this.rooms.set(roomId, { ...state, members: { memberships: kept, at: this.clock.now() } });
  }

  /** A new room the bridge made: its state is what it asked for. */
  rememberNewRoom(roomId: string, encryption: JsonObject | undefined, memberships: ReadonlyMap<string, string>): void {
    const now = this.clock.now();
    this.rooms.set(roomId, { encryption: { content: encryption, at: now }, members: { memberships: new Map(memberships), at: now } });
  }

  /**
   * A client event the homeserver pushed (or a membership the bridge made itself): state it
   * changes is applied to what is known.
   */
  observe(event: JsonObject): void {
    const roomId = event.room_id;
    const stateKey = event.state_key;
    if (typeof roomId !== 'string' || typeof stateKey !== 'string') return;
    const content = (event.content ?? {}) as JsonObject;
    if (event.type === 'm.room.encryption' && stateKey === '') {
      this.changes++;
      const state = this.rooms.get(roomId) ?? {};
      if (typeof content.algorithm === 'string') this.rooms.set(roomId, { ...state, encryption: { content, at: this.clock.now() } });
      // Malformed: the homeserver is asked what the room holds now.
      else if (state.encryption) this.rooms.set(roomId, { ...state, encryption: undefined });
    } else if (event.type === 'm.room.member') {
      this.changes++;
      const state = this.rooms.get(roomId);
      if (!state?.members) return;
      const membership = content.membership;
      if (typeof membership !== 'string') this.rooms.set(roomId, { ...state, members: undefined });
      else if (membership === 'leave') state.members.memberships.delete(stateKey);
      else state.members.memberships.set(stateKey, membership);
    }
  }

  /** Forgets a room (the bridge left it, or cannot see it any more). */
  forget(roomId: string): void {
    this.changes++;
    this.rooms.delete(roomId);
  }

  private fresh(at: number): boolean {
    return this.clock.now() - at < this.maxAgeMs;
  }
}
