/**
 * State resolution v1 (room version 1, see resolveStateV1 below), v2 (room versions 2-11) and v2.1 (room version 12), from the spec's room
 * version pages: the state of a room where its DAG forks is the resolution of the states after
 * each fork. Pure: the caller loads every event the algorithm may read (the states' events and
 * their auth chains) and says how to check an event against a state (the room's auth rules).
 *
 * 1. Unconflicted state (same event for a key in every state) stands; the rest is conflicted.
 * 2. Full conflicted set: the conflicted events, the auth difference, and for v2.1 the
 *    conflicted state subgraph (auth paths between conflicted events).
 * 3. Power events of that set (and the conflicted parts of their auth chains), in reverse
 *    topological power order, pass iterative auth checks from the unconflicted state (v2.1: from
 *    nothing); the other events, in mainline order of the resulting power levels, pass them
 *    next; the unconflicted state is laid over the result.
 */
import { createHash } from 'node:crypto';
import type { StateEvent, StateLookup } from './auth-rules.js';

/** (type, state_key) as `${type}\u0000${stateKey}` → event id. */
export type StateMap = ReadonlyMap<string, string>;

export interface ResolvableEvent {
  event_id: string;
  type: string;
  state_key?: string;
  sender: string;
  content: Record<string, unknown>;
  origin_server_ts: number;
  auth_events: readonly string[];
  /** For the auth rules (a creator's first join follows the create event alone). */
  prev_events?: readonly string[];
  /** The event's depth: state resolution v1 orders by it (0 when unknown). */
  depth?: number;
}

export interface StateResolutionInput {
  algorithm: 'v1' | 'v2' | 'v2.1';
  stateSets: readonly StateMap[];
  /** Any event the algorithm may read; undefined for one we do not have (it is left out). */
  event(id: string): ResolvableEvent | undefined;
  /** Rejected events are never used as auth events in iterative auth checks. */
  isRejected(id: string): boolean;
  /** The power level of the event's sender according to its own auth events. */
  senderPowerLevel(event: ResolvableEvent): number;
  /** Whether the room's auth rules allow the event against the given state. */
  authorize(event: ResolvableEvent, state: StateLookup): boolean;
}

export function stateKey(type: string, key: string): string {
  return `${type}\u0000${key}`;
}

export function resolveState(input: StateResolutionInput): Map<string, string> {
  const { stateSets } = input;
  if (stateSets.length === 0) return new Map();
  if (stateSets.length === 1) return new Map(stateSets[0]);
  // v1 has its own definition of a conflict (different events for a key), see resolveStateV1.
  if (input.algorithm === 'v1') return resolveStateV1(input);
  const { unconflicted, conflicted } = splitConflicts(stateSets);
  if (conflicted.size === 0) return unconflicted;

  const chains = new AuthChains(input);
  const full = new Set<string>(conflicted);
  for (const id of authDifference(stateSets, chains)) full.add(id);
  if (input.algorithm === 'v2.1') for (const id of conflictedSubgraph(conflicted, chains)) full.add(id);
  // An event we do not have cannot take part.
  for (const id of full) if (!input.event(id)) full.delete(id);

  // Step 1: power events and the conflicted parts of their auth chains.
  const powerIds = new Set<string>();
  for (const id of full) {
    if (!isPowerEvent(input.event(id)!)) continue;
    powerIds.add(id);
    for (const ancestor of chains.of(id)) if (full.has(ancestor)) powerIds.add(ancestor);
  }
  const powerOrder = reverseTopologicalPowerOrder(powerIds, input);
  // Step 2.
  const partial = iterativeAuthChecks(input, input.algorithm === 'v2.1' ? new Map() : new Map(unconflicted), powerOrder);
  // Step 3: the rest, in mainline order of the partially resolved power levels.
  const others = [...full].filter((id) => !powerIds.has(id));
  const mainlineOrder = mainlineSort(others, partial.get(stateKey('m.room.power_levels', '')), input);
  // Step 4.
  const resolved = iterativeAuthChecks(input, partial, mainlineOrder);
  // Step 5.
  for (const [key, id] of unconflicted) resolved.set(key, id);
  return resolved;
}

/** v2: keys with the same event in every state, and the events of every other key (a key missing from some state is conflicted). */
function splitConflicts(stateSets: readonly StateMap[]): { unconflicted: Map<string, string>; conflicted: Set<string> } {
  const unconflicted = new Map<string, string>();
  const conflicted = new Set<string>();
  const keys = new Set<string>();
  for (const set of stateSets) for (const key of set.keys()) keys.add(key);
  for (const key of keys) {
    const first = stateSets[0]!.get(key);
    if (first !== undefined && stateSets.every((set) => set.get(key) === first)) {
      unconflicted.set(key, first);
      continue;
    }
    for (const set of stateSets) {
      const id = set.get(key);
      if (id !== undefined) conflicted.add(id);
    }
  }
  return { unconflicted, conflicted };
}

/** Auth chains, walked once per event and remembered (every event the walk reaches is known). */
class AuthChains {
  private readonly memo = new Map<string, ReadonlySet<string>>();

  constructor(private readonly input: StateResolutionInput) {}

  /** Every event reachable through auth_events from `id` (not `id` itself). */
  of(id: string): ReadonlySet<string> {
    const known = this.memo.get(id);
    if (known) return known;
    // Iterative post-order: an event's chain is its auth events and their chains.
    const stack: Array<{ id: string; expanded: boolean }> = [{ id, expanded: false }];
    while (stack.length > 0) {
      const top = stack[stack.length - 1]!;
      if (this.memo.has(top.id)) {
        stack.pop();
        continue;
      }
      const event = this.input.event(top.id);
      const parents = event ? event.auth_events.filter((parent) => this.input.event(parent) !== undefined) : [];
      if (!top.expanded) {
        top.expanded = true;
        for (const parent of parents) if (!this.memo.has(parent)) stack.push({ id: parent, expanded: false });
        continue;
      }
      stack.pop();
      const chain = new Set<string>();
      for (const parent of parents) {
        chain.add(parent);
        for (const ancestor of this.memo.get(parent) ?? []) chain.add(ancestor);
      }
      this.memo.set(top.id, chain);
    }
    return this.memo.get(id)!;
  }
}

/** Events in some but not all of the states' full auth chains. */
function authDifference(stateSets: readonly StateMap[], chains: AuthChains): Set<string> {
  const fullChains = stateSets.map((set) => {
    const chain = new Set<string>();
    for (const id of set.values()) for (const ancestor of chains.of(id)) chain.add(ancestor);
    return chain;
  });
  const difference = new Set<string>();
  for (const chain of fullChains) {
    for (const id of chain) if (!fullChains.every((other) => other.has(id))) difference.add(id);
  }
  return difference;
}

/** v2.1: every event on an auth path from one conflicted event to another, endpoints included. */
function conflictedSubgraph(conflicted: ReadonlySet<string>, chains: AuthChains): Set<string> {
  const subgraph = new Set<string>();
  const leadsToConflicted = new Map<string, boolean>();
  const leads = (id: string): boolean => {
    let known = leadsToConflicted.get(id);
    if (known === undefined) {
      const chain = chains.of(id);
      known = false;
      for (const target of conflicted) {
        if (chain.has(target)) {
          known = true;
          break;
        }
      }
      leadsToConflicted.set(id, known);
    }
    return known;
  };
  for (const start of conflicted) {
    for (const ancestor of chains.of(start)) {
      // On a path to a conflicted event: it is one, or one is in its own auth chain.
      if (conflicted.has(ancestor) || leads(ancestor)) {
        subgraph.add(ancestor);
        subgraph.add(start);
      }
    }
  }
  return subgraph;
}

function isPowerEvent(event: ResolvableEvent): boolean {
  if (event.state_key === undefined) return false;
  if (event.type === 'm.room.power_levels' || event.type === 'm.room.join_rules') return event.state_key === '';
  if (event.type === 'm.room.member') {
    const membership = event.content.membership;
    return (membership === 'leave' || membership === 'ban') && event.sender !== event.state_key;
  }
  return false;
}

/**
 * Kahn's algorithm over the auth DAG restricted to `ids`, taking at each step the smallest ready
 * event: higher sender power first, then older, then the smaller event id.
 */
function reverseTopologicalPowerOrder(ids: ReadonlySet<string>, input: StateResolutionInput): string[] {
  const power = new Map<string, number>();
  const waitingOn = new Map<string, number>();
  const children = new Map<string, string[]>();
  for (const id of ids) {
    const event = input.event(id)!;
    power.set(id, input.senderPowerLevel(event));
    const parents = event.auth_events.filter((parent) => ids.has(parent));
    waitingOn.set(id, new Set(parents).size);
    for (const parent of new Set(parents)) {
      const list = children.get(parent) ?? [];
      list.push(id);
      children.set(parent, list);
    }
  }
  const before = (a: string, b: string): boolean => {
    const pa = power.get(a)!;
    const pb = power.get(b)!;
    if (pa !== pb) return pa > pb;
    const ta = input.event(a)!.origin_server_ts;
    const tb = input.event(b)!.origin_server_ts;
    if (ta !== tb) return ta < tb;
    return a < b;
  };
  const ready = new Heap<string>(before);
  for (const [id, count] of waitingOn) if (count === 0) ready.push(id);
  const order: string[] = [];
  while (ready.size > 0) {
    const id = ready.pop()!;
    order.push(id);
    for (const child of children.get(id) ?? []) {
      const remaining = waitingOn.get(child)! - 1;
      waitingOn.set(child, remaining);
      if (remaining === 0) ready.push(child);
    }
  }
  return order;
}

/**
 * Events in mainline order of the power levels event `powerLevelsId`: those whose power levels
 * ancestry joins the mainline earlier (further from it) first, then older, then by event id.
 */
function mainlineSort(ids: readonly string[], powerLevelsId: string | undefined, input: StateResolutionInput): string[] {
  const mainline = new Map<string, number>();
  let current = powerLevelsId;
  const seen = new Set<string>();
  while (current !== undefined && !seen.has(current)) {
    seen.add(current);
    mainline.set(current, mainline.size);
    const event = input.event(current);
    current = event ? powerLevelsIn(event, input) : undefined;
  }
  const positionMemo = new Map<string, number>();
  const positionOf = (id: string): number => {
    // Walk the power levels events in the auth chain until one is on the mainline.
    const walked: string[] = [];
    let position = Infinity;
    let next = powerLevelsIn(input.event(id)!, input);
    const visited = new Set<string>();
    while (next !== undefined && !visited.has(next)) {
      visited.add(next);
      const memo = positionMemo.get(next);
      if (memo !== undefined) {
        position = memo;
        break;
      }
      const onMainline = mainline.get(next);
      if (onMainline !== undefined) {
        position = onMainline;
        break;
      }
      walked.push(next);
      const event = input.event(next);
      next = event ? powerLevelsIn(event, input) : undefined;
    }
    // A power levels event's own position is that of the first mainline event below it.
    for (const pl of walked) positionMemo.set(pl, position);
    return position;
  };
  const keyed = ids.map((id) => ({ id, position: positionOf(id), ts: input.event(id)!.origin_server_ts }));
  keyed.sort((a, b) => (a.position !== b.position ? b.position - a.position : a.ts !== b.ts ? a.ts - b.ts : a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  return keyed.map((entry) => entry.id);
}

function powerLevelsIn(event: ResolvableEvent, input: StateResolutionInput): string | undefined {
  for (const id of event.auth_events) {
    const authEvent = input.event(id);
    if (authEvent && authEvent.type === 'm.room.power_levels' && authEvent.state_key === '') return id;
  }
  return undefined;
}

/**
 * Applies each event in turn to the state when the auth rules allow it against that state; keys
 * the state lacks are taken from the event's own (non-rejected) auth events.
 */
function iterativeAuthChecks(input: StateResolutionInput, start: Map<string, string>, events: readonly string[]): Map<string, string> {
  const state = start;
  for (const id of events) {
    const event = input.event(id);
    if (!event || event.state_key === undefined) continue;
    const fromAuth = new Map<string, ResolvableEvent>();
    for (const authId of event.auth_events) {
      const authEvent = input.event(authId);
      if (authEvent && authEvent.state_key !== undefined && !input.isRejected(authId)) fromAuth.set(stateKey(authEvent.type, authEvent.state_key), authEvent);
    }
    const lookup: StateLookup = (type, key) => {
      const k = stateKey(type, key);
      const inState = state.get(k);
      const found = inState !== undefined ? input.event(inState) : fromAuth.get(k);
      return found ? viewOf(found) : undefined;
    };
    if (input.authorize(event, lookup)) state.set(stateKey(event.type, event.state_key), id);
  }
  return state;
}

function viewOf(event: ResolvableEvent): StateEvent {
  return { event_id: event.event_id, type: event.type, state_key: event.state_key ?? '', sender: event.sender, content: event.content };
}

/** A binary heap ordered by `before` (the smallest first). */
class Heap<T> {
  private readonly items: T[] = [];

  constructor(private readonly before: (a: T, b: T) => boolean) {}

  get size(): number {
    return this.items.length;
  }

  push(item: T): void {
    const items = this.items;
    items.push(item);
    let i = items.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.before(items[i]!, items[parent]!)) break;
      [items[i], items[parent]] = [items[parent]!, items[i]!];
      i = parent;
    }
  }

  pop(): T | undefined {
    const items = this.items;
    if (items.length === 0) return undefined;
    const top = items[0];
    const last = items.pop()!;
    if (items.length > 0) {
      items[0] = last;
      let i = 0;
      for (;;) {
        const left = 2 * i + 1;
        const right = left + 1;
        let smallest = i;
        if (left < items.length && this.before(items[left]!, items[smallest]!)) smallest = left;
        if (right < items.length && this.before(items[right]!, items[smallest]!)) smallest = right;
        if (smallest === i) break;
        [items[i], items[smallest]] = [items[smallest]!, items[i]!];
        i = smallest;
      }
    }
    return top;
  }
}

/**
 * State resolution v1 (rooms/v1, "State resolution"), the original algorithm. A key is conflicted
 * only when the states have *different* events for it: a key found in some states only, or with
 * the same event wherever it is found, is unconflicted and in the resolved state R from the start
 * (as the spec says, and as Synapse's `_seperate` does). Then, one phase after the other,
 * m.room.power_levels, then m.room.join_rules, then the m.room.member keys: sort a key's events by
 * ascending depth, then descending sha1(event_id), take the first, and take each next one while
 * the auth rules allow it (stopping at the first refused). Every other conflicted key gets its
 * event of highest depth, then lowest sha1(event_id), that the auth rules allow (if none is
 * allowed, the lowest ranked, as Synapse does, so the key keeps a value).
 *
 * The state each check runs against: the spec does not say whether R changes while a phase goes
 * through its keys, and an answer that did would depend on the order of the keys (user ids, for
 * the member phase). We follow Synapse: every key of a phase is checked against R as it stood
 * when the phase began, with only that key replaced by the last event its own chain accepted; R
 * takes a phase's results once the whole phase is done.
 *
 * A conflicted key of whose events we have just one takes that one (Synapse treats it as
 * unconflicted, but only after choosing the state the checks run against, so it is not in R); a
 * conflicted key of whose events we have none is left out.
 */
function resolveStateV1(input: StateResolutionInput): Map<string, string> {
  const { unconflicted, conflicted } = separateV1(input.stateSets);
  const resolved = new Map(unconflicted);
  if (conflicted.size === 0) return resolved;
  const byKey = new Map<string, ResolvableEvent[]>();
  for (const [key, ids] of conflicted) {
    const events = [...ids].flatMap((id) => input.event(id) ?? []);
    if (events.length === 1) resolved.set(key, events[0]!.event_id);
    else if (events.length > 1) byKey.set(key, events);
  }

  const sha1 = (id: string): string => createHash('sha1').update(id).digest('hex');
  const depth = (event: ResolvableEvent): number => event.depth ?? 0;
  /** Whether the auth rules allow `event` in `base` with `key` replaced by `current`. */
  const allowedIn = (event: ResolvableEvent, base: StateMap, key: string, current: string | undefined): boolean =>
    input.authorize(event, (type, stateKeyOf) => {
      const k = stateKey(type, stateKeyOf);
      const id = k === key ? current : base.get(k);
      const found = id === undefined ? undefined : input.event(id);
      return found ? viewOf(found) : undefined;
    });
  /** Power levels, join rules, members: ascending, each next event while allowed. */
  const resolveAuthKey = (key: string, base: StateMap): string => {
    const events = byKey.get(key)!.sort((a, b) => depth(a) - depth(b) || compareStrings(sha1(b.event_id), sha1(a.event_id)));
    let accepted = events[0]!.event_id;
    for (const event of events.slice(1)) {
      if (!allowedIn(event, base, key, accepted)) break;
      accepted = event.event_id;
    }
    return accepted;
  };
  /** Other state: the deepest event allowed. */
  const resolveOtherKey = (key: string, base: StateMap): string => {
    const events = byKey.get(key)!.sort((a, b) => depth(b) - depth(a) || compareStrings(sha1(a.event_id), sha1(b.event_id)));
    const chosen = events.find((event) => allowedIn(event, base, key, base.get(key))) ?? events[events.length - 1]!;
    return chosen.event_id;
  };

  // R: the unconflicted state, then each phase's results once the phase is over.
  const r = new Map(unconflicted);
  const typeOf = (key: string): string => key.slice(0, key.indexOf('\u0000'));
  const phases: Array<{ keys: string[]; resolve: (key: string, base: StateMap) => string }> = [
    { keys: [...byKey.keys()].filter((key) => key === stateKey('m.room.power_levels', '')), resolve: resolveAuthKey },
    // Join rules and members by type, whatever the state key, as Synapse does.
    { keys: [...byKey.keys()].filter((key) => typeOf(key) === 'm.room.join_rules'), resolve: resolveAuthKey },
    { keys: [...byKey.keys()].filter((key) => typeOf(key) === 'm.room.member'), resolve: resolveAuthKey },
  ];
  const done = new Set(phases.flatMap((phase) => phase.keys));
  phases.push({ keys: [...byKey.keys()].filter((key) => !done.has(key)), resolve: resolveOtherKey });
  for (const phase of phases) {
    const base: StateMap = new Map(r);
    const results = phase.keys.map((key) => [key, phase.resolve(key, base)] as const);
    for (const [key, id] of results) {
      r.set(key, id);
      resolved.set(key, id);
    }
  }
  return resolved;
}

/** v1: keys with one event wherever they are found (unconflicted), and the events of keys with several. */
function separateV1(stateSets: readonly StateMap[]): { unconflicted: Map<string, string>; conflicted: Map<string, Set<string>> } {
  const seen = new Map<string, Set<string>>();
  for (const set of stateSets) {
    for (const [key, id] of set) {
      const ids = seen.get(key);
      if (ids) ids.add(id);
      else seen.set(key, new Set([id]));
    }
  }
  const unconflicted = new Map<string, string>();
  const conflicted = new Map<string, Set<string>>();
  for (const [key, ids] of seen) {
    if (ids.size === 1) unconflicted.set(key, ids.values().next().value!);
    else conflicted.set(key, ids);
  }
  return { unconflicted, conflicted };
}

function compareStrings(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
