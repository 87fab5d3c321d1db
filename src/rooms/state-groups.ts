/**
 * Room state at any event, as state groups: the state after an event is a group, stored as a
 * delta of an earlier group with a full snapshot every MAX_STATE_GROUP_DELTAS groups. Local events
 * make their groups in the writer; events from other servers, whose state may be the resolution
 * of several forks, get theirs here. Full maps are cached (bounded by the entries they hold), so
 * walking a busy room's recent groups costs a delta each.
 */
import type { Storage } from '../storage/index.js';
import { stateKeyOf } from './events.js';

/** (type, state_key) as `${type}\u0000${stateKey}` → event id. */
export type StateMap = ReadonlyMap<string, string>;

/**
 * A state group is a delta of the one before; after this many deltas in a row the next is a full
 * snapshot, so reading any group's state takes at most this many steps.
 */
export const MAX_STATE_GROUP_DELTAS = 100;

/**
 * State group ids. With one process they are handed out like stream positions: in memory, from the
 * newest on disk. Processes sharing a database reserve blocks (`reserveBlock` gives a block's
 * first id) and `ensure` there are enough before taking them synchronously.
 */
export class StateGroupIds {
  private end: number;

  constructor(
    private last: number,
    private readonly reserveBlock?: { size: number; reserve: () => Promise<number> },
  ) {
    this.end = reserveBlock ? last : Number.POSITIVE_INFINITY;
  }

  /** Throws if none is left: `ensure` first. */
  next(): number {
    if (this.last >= this.end) throw new Error('no state group id reserved');
    return ++this.last;
  }

  /** Makes sure `count` ids can be taken without waiting. */
  async ensure(count: number): Promise<void> {
    if (!this.reserveBlock) return;
    while (this.end - this.last < count) {
      const first = await this.reserveBlock.reserve();
      // Blocks of other processes may lie between: what is left of this one is dropped.
      if (first !== this.end + 1) this.last = first - 1;
      this.end = first + this.reserveBlock.size - 1;
    }
  }
}

/** Entries held across cached maps before the least recently used maps go. */
const MAX_CACHED_ENTRIES = 500_000;

/** A state group's row, written with the batch of events that made it. */
export interface NewStateGroup {
  id: number;
  roomId: string;
  prevGroup: number | undefined;
  deltaDepth: number;
  entries: Array<[string, string, string | null]>;
}

export function splitStateKey(key: string): [string, string] {
  const at = key.indexOf('\u0000');
  return [key.slice(0, at), key.slice(at + 1)];
}

export class StateGroups {
  private readonly cache = new Map<number, StateMap>();
  private cachedEntries = 0;

  constructor(
    private readonly storage: Storage,
    private readonly ids: StateGroupIds,
  ) {}

  /** The full state of a group. */
  async stateOf(groupId: number): Promise<StateMap> {
    const cached = this.cache.get(groupId);
    if (cached) {
      this.cache.delete(groupId);
      this.cache.set(groupId, cached);
      return cached;
    }
    // Walk back to a snapshot or a cached group, then apply the deltas forwards.
    const chain: Array<Array<[string, string, string | null]>> = [];
    let base: StateMap | undefined;
    for (const link of await this.storage.rooms.stateGroupChain(groupId)) {
      const known = link.id === groupId ? undefined : this.cache.get(link.id);
      if (known) {
        base = known;
        break;
      }
      chain.push(link.entries);
    }
    const state = new Map(base ?? []);
    for (let i = chain.length - 1; i >= 0; i--) {
      for (const [type, stateKey, eventId] of chain[i]!) {
        if (eventId === null) state.delete(stateKeyOf(type, stateKey));
        else state.set(stateKeyOf(type, stateKey), eventId);
      }
    }
    this.remember(groupId, state);
    return state;
  }

  /**
   * Makes `state` a new group of `roomId`: a delta of `base` when given (and its chain is not too
   * long), else a snapshot. The group is known here at once (its state is cached); its row is for
   * the caller to write with the events that use it, so a batch that is checked and then dropped
   * (or fails) leaves nothing behind. Ids are never reused.
   */
  async prepare(roomId: string, state: StateMap, base?: { groupId: number; state: StateMap; deltaDepth: number }): Promise<{ groupId: number; deltaDepth: number; row: NewStateGroup }> {
    await this.ids.ensure(1);
    const id = this.ids.next();
    let entries: Array<[string, string, string | null]>;
    let prevGroup: number | undefined;
    let deltaDepth = 0;
    if (base && base.deltaDepth < MAX_STATE_GROUP_DELTAS) {
      entries = [];
      for (const [key, eventId] of state) if (base.state.get(key) !== eventId) entries.push([...splitStateKey(key), eventId]);
      for (const key of base.state.keys()) if (!state.has(key)) entries.push([...splitStateKey(key), null]);
      prevGroup = base.groupId;
      deltaDepth = base.deltaDepth + 1;
    } else {
      entries = [...state].map(([key, eventId]) => [...splitStateKey(key), eventId]);
    }
    this.remember(id, state);
    return { groupId: id, deltaDepth, row: { id, roomId, prevGroup, deltaDepth, entries } };
  }

  async deltaDepthOf(groupId: number): Promise<number> {
    return this.storage.rooms.stateGroupDepth(groupId);
  }

  private remember(groupId: number, state: StateMap): void {
    this.cache.set(groupId, state);
    this.cachedEntries += state.size;
    while (this.cachedEntries > MAX_CACHED_ENTRIES && this.cache.size > 1) {
      const [oldestId, oldest] = this.cache.entries().next().value as [number, StateMap];
      this.cache.delete(oldestId);
      this.cachedEntries -= oldest.size;
    }
  }
}
