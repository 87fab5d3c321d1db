/**
 * The room DAG as stored: events by id, auth chains, the state after and before events, and
 * state resolution over stored events. What the inbound federation pipeline and the federation
 * endpoints (state, state_ids, event_auth) read. Pure reads: writes go through the event writer.
 */
import type { Storage } from '../storage/index.js';
import { eventFromRow, stateKeyOf, type StoredEvent } from './events.js';
import { checkEventAuth, effectivePowerLevels, userPowerLevel, type StateLookup } from './auth-rules.js';
import type { RoomVersion } from './room-versions.js';
import { resolveState, type ResolvableEvent } from './state-resolution.js';
import type { StateGroups, StateMap } from './state-groups.js';

/** Events kept in memory by id (the auth events and state every check reads again). */
const MAX_CACHED_EVENTS = 20_000;

export class EventGraph {
  private readonly cache = new Map<string, StoredEvent>();

  constructor(
    private readonly storage: Storage,
    readonly stateGroups: StateGroups,
  ) {}

  /** Stored events by id (missing ones are left out). */
  async events(eventIds: Iterable<string>): Promise<Map<string, StoredEvent>> {
    const found = new Map<string, StoredEvent>();
    const missing: string[] = [];
    for (const eventId of eventIds) {
      const cached = this.cache.get(eventId);
      if (cached) found.set(eventId, cached);
      else missing.push(eventId);
    }
    if (missing.length > 0) {
      for (const row of await this.storage.rooms.getEvents(missing)) {
        const event = eventFromRow(row);
        found.set(event.eventId, event);
        this.remember(event);
      }
    }
    return found;
  }

  /** Shown redactions of the room naming any of `eventIds` (stored before their targets arrived). */
  async redactionsTargeting(roomId: string, eventIds: readonly string[]): Promise<StoredEvent[]> {
    return (await this.storage.rooms.redactionsTargeting(roomId, eventIds)).map(eventFromRow);
  }

  async event(eventId: string): Promise<StoredEvent | undefined> {
    return (await this.events([eventId])).get(eventId);
  }

  /** An event was redacted (or otherwise changed): the next read takes it from the database. */
  forget(eventId: string): void {
    this.cache.delete(eventId);
  }

  /** Drops every kept event (another process's redactions were not all heard of). */
  forgetAll(): void {
    this.cache.clear();
  }

  /** Ids of the events missing from the store, among `eventIds`. */
  async missing(eventIds: readonly string[]): Promise<string[]> {
    const found = await this.events(eventIds);
    return eventIds.filter((eventId) => !found.has(eventId));
  }

  /**
   * The auth chain of events: every event reachable through auth_events (not the events
   * themselves), walked breadth first in batches. Events not stored are named in `missing`.
   */
  async authChain(eventIds: readonly string[]): Promise<{ events: Map<string, StoredEvent>; missing: Set<string> }> {
    const chain = new Map<string, StoredEvent>();
    const missing = new Set<string>();
    const start = await this.events(eventIds);
    let frontier = new Set<string>();
    for (const event of start.values()) for (const id of event.authEvents ?? []) frontier.add(id);
    while (frontier.size > 0) {
      const wanted = [...frontier].filter((id) => !chain.has(id) && !missing.has(id));
      frontier = new Set();
      const found = await this.events(wanted);
      for (const id of wanted) {
        const event = found.get(id);
        if (!event) {
          missing.add(id);
          continue;
        }
        chain.set(id, event);
        for (const next of event.authEvents ?? []) if (!chain.has(next)) frontier.add(next);
      }
    }
    return { events: chain, missing };
  }

  /** The state after an event (from its state group); undefined when the event has none. */
  async stateAfter(event: StoredEvent): Promise<StateMap | undefined> {
    if (event.stateGroup === undefined) return undefined;
    return this.stateGroups.stateOf(event.stateGroup);
  }

  /** The state before an event: the state after it with its own key put back. */
  async stateBefore(event: StoredEvent): Promise<StateMap | undefined> {
    const after = await this.stateAfter(event);
    if (!after || event.stateKey === undefined || event.rejected !== undefined) return after;
    const before = new Map(after);
    const key = stateKeyOf(event.type, event.stateKey);
    if (before.get(key) === event.eventId) {
      if (event.replacesState !== undefined) before.set(key, event.replacesState);
      else before.delete(key);
    }
    return before;
  }

  /**
   * The resolution of several states by the room version's algorithm. Every event the algorithm
   * may need (the states' events and their auth chains) is loaded first, so the pure algorithm
   * never waits.
   */
  async resolve(version: RoomVersion, roomId: string, states: readonly StateMap[], unstored: (eventId: string) => StoredEvent | undefined = () => undefined): Promise<Map<string, string>> {
    if (states.length === 0) return new Map();
    if (states.length === 1 || states.every((state) => sameState(state, states[0]!))) return new Map(states[0]!);
    // Every event the algorithm may need: the states' events and their auth chains, whether
    // stored or still on their way (`unstored`: a batch being checked).
    const all = new Map<string, StoredEvent>();
    let frontier = new Set<string>();
    for (const state of states) for (const id of state.values()) frontier.add(id);
    while (frontier.size > 0) {
      const ids = [...frontier].filter((id) => !all.has(id));
      frontier = new Set();
      const stored = await this.events(ids.filter((id) => unstored(id) === undefined));
      for (const id of ids) {
        const event = unstored(id) ?? stored.get(id);
        if (!event) continue;
        all.set(id, event);
        for (const next of event.authEvents ?? []) if (!all.has(next)) frontier.add(next);
      }
    }
    const createId = version.roomIdFromCreateEvent ? `$${roomId.slice(1)}` : undefined;
    const resolvable = (event: StoredEvent): ResolvableEvent => ({
      event_id: event.eventId,
      type: event.type,
      ...(event.stateKey !== undefined ? { state_key: event.stateKey } : {}),
      sender: event.sender,
      content: event.content,
      origin_server_ts: event.originServerTs,
      auth_events: event.authEvents ?? [],
      prev_events: event.prevEvents ?? [],
      depth: event.depth,
    });
    const lookupIn = (eventIds: readonly string[]): StateLookup => {
      const byKey = new Map<string, StoredEvent>();
      for (const id of eventIds) {
        const event = all.get(id);
        if (event?.stateKey !== undefined && event.rejected === undefined) byKey.set(stateKeyOf(event.type, event.stateKey), event);
      }
      if (createId && !byKey.has(stateKeyOf('m.room.create', ''))) {
        const create = all.get(createId);
        if (create) byKey.set(stateKeyOf('m.room.create', ''), create);
      }
      return (type, stateKey) => stateEventView(byKey.get(stateKeyOf(type, stateKey)));
    };
    return resolveState({
      algorithm: version.stateResolution,
      stateSets: states,
      event: (id) => {
        const event = all.get(id);
        return event ? resolvable(event) : undefined;
      },
      isRejected: (id) => all.get(id)?.rejected !== undefined,
      senderPowerLevel: (event) => {
        const lookup = lookupIn(event.auth_events);
        return userPowerLevel(effectivePowerLevels(lookup, version), event.sender);
      },
      authorize: (event, state) => {
        const withCreate: StateLookup = (type, stateKey) => {
          const found = state(type, stateKey);
          if (found || type !== 'm.room.create' || !createId) return found ? { ...found, state_key: found.state_key ?? '' } : undefined;
          return stateEventView(all.get(createId));
        };
        const result = checkEventAuth(
          {
            type: event.type,
            ...(event.state_key !== undefined ? { state_key: event.state_key } : {}),
            sender: event.sender,
            content: event.content,
            ...(event.prev_events ? { prev_events: event.prev_events } : {}),
          },
          withCreate,
          version,
          // The join_authorised_via_users_server signature was checked when the event arrived.
          { isSignedBy: () => true },
        );
        return result.allowed;
      },
    });
  }

  private remember(event: StoredEvent): void {
    if (this.cache.size >= MAX_CACHED_EVENTS) this.cache.delete(this.cache.keys().next().value!);
    this.cache.set(event.eventId, event);
  }
}

function stateEventView(event: StoredEvent | undefined) {
  if (!event || event.stateKey === undefined) return undefined;
  return { event_id: event.eventId, type: event.type, state_key: event.stateKey, sender: event.sender, content: event.content };
}

function sameState(a: StateMap, b: StateMap): boolean {
  if (a.size !== b.size) return false;
  for (const [key, value] of a) if (b.get(key) !== value) return false;
  return true;
}
