/**
 * Events from other servers into a room we are in: steps 4 to 6 of "Checks performed on receipt
 * of a PDU" (the federation layer did 1 to 3: format, signatures, hashes). For each event, in
 * order: its auth events (fetched when missing) must allow it; the state before it (the state
 * after its prev_events, resolved when they fork; fetched from the sender when we lack them) must
 * allow it, or it is rejected; the room's current state must allow it, or it is soft failed. Then
 * the whole batch is written at once: the events, their state groups, the room's new forward
 * extremities and its new current state (the resolution of the extremities' states).
 *
 * One batch per room at a time. Local sends may move the room's head meanwhile; the writer then
 * says so (HeadMoved) and only the last step, the new head and current state, is done again.
 */
import { checkAuthEventsSelection, checkEventAuth, effectivePowerLevels, redactionApplies, type StateLookup } from './auth-rules.js';
import { redactedContent } from './redaction.js';
import { stateKeyOf, type JsonObject, type StoredEvent } from './events.js';
import type { EventGraph } from './event-graph.js';
import { HeadMoved, type EventWriter, type RemoteBatch } from './event-writer.js';
import type { Pdu } from './pdu.js';
import type { RoomCache } from './room-cache.js';
import { RoomSnapshot, type RoomHead } from './room-snapshot.js';
import type { RoomVersion } from './room-versions.js';
import { splitStateKey, type StateGroups, type StateMap } from './state-groups.js';

/** A PDU whose format, signatures and hashes the federation layer has checked. */
export interface VerifiedPdu {
  eventId: string;
  /** The PDU as it will be stored (its redacted form when its content hash failed). */
  pdu: Pdu;
  /** Servers whose signatures on it are valid (for join_authorised_via_users_server). */
  signers?: ReadonlySet<string> | undefined;
}

/** What the room side may ask the sending server (implemented by the federation layer). */
export interface RemoteEventSource {
  /** Events by id, checked (format, signatures, hashes); missing ones are left out. */
  events(roomId: string, eventIds: readonly string[]): Promise<VerifiedPdu[]>;
  /** Events between what we have (`earliest`) and `latest`, checked: the gap before an event. */
  missingEvents(roomId: string, earliest: readonly string[], latest: readonly string[], limit: number): Promise<VerifiedPdu[]>;
  /** The state before an event, as ids (with its auth chain), for a gap we cannot fill. */
  stateIdsBefore(roomId: string, eventId: string): Promise<{ stateIds: string[]; authChainIds: string[] }>;
  /** The same as whole events, checked: one request instead of one per event we lack. */
  stateBefore(roomId: string, eventId: string): Promise<VerifiedPdu[]>;
}

/** Past this many events missing at a gap, they are fetched in one /state answer, not one by one. */
const FETCH_ONE_BY_ONE_LIMIT = 50;

/** A room could not be joined with what the resident server answered. */
export class JoinRefused extends Error {
  override name = 'JoinRefused';
}

export interface IngestResult {
  /** Per event id: undefined when accepted, else why it was rejected (or 'soft failed'). */
  outcomes: Map<string, string | undefined>;
}

/** How many events a gap is filled with from /get_missing_events before asking for the state instead. */
const MISSING_EVENTS_LIMIT = 20;
/** Auth events fetched for one event at most (an auth chain we lack is a new room we should not be in). */
const MAX_AUTH_FETCH = 200;

interface Pending {
  event: StoredEvent;
  /** The state after it (for events still to be written). */
  stateAfter: StateMap;
  /** Where that state is stored: a group, and how many deltas past its snapshot. */
  group: { groupId: number; deltaDepth: number } | undefined;
  /**
   * Outliers (auth chains, state from a join) and history (events before a join) have no state
   * of their own here; nothing is built on them in this batch.
   */
  stateless: boolean;
}

interface AdmitOptions {
  /** Known for auth and state only: checked against its auth events, never shown. */
  outlier: boolean;
  /** History from before a join: checked against its auth events, shown in the timeline. */
  history?: boolean | undefined;
  /** The state before it, as the sender gave it (a gap we could not fill, a join). */
  knownStateBefore?: readonly string[] | undefined;
  /** A join's own event: the room's current state here is not the room's yet. */
  skipCurrentState?: boolean | undefined;
}

/** A room joined through another server: what its send_join answered, checked. */
export interface JoinedRoom {
  roomId: string;
  version: RoomVersion;
  join: VerifiedPdu;
  /** The room's state before the join. */
  state: readonly VerifiedPdu[];
  authChain: readonly VerifiedPdu[];
  /** Events before the join (backfill), shown as the room's history. */
  history: readonly VerifiedPdu[];
}

interface Batch {
  pending: Map<string, Pending>;
  order: StoredEvent[];
}

export class RemoteEvents {
  private readonly locks = new Map<string, Promise<unknown>>();

  constructor(
    private readonly graph: EventGraph,
    private readonly stateGroups: StateGroups,
    private readonly cache: RoomCache,
    private readonly writer: EventWriter,
  ) {}

  /**
   * Checks and stores events of a room (one batch at a time per room). `fanOut`: the events came
   * to this server to be passed on (send_join, send_leave), so the sender sends them on.
   */
  ingest(roomId: string, pdus: readonly VerifiedPdu[], source: RemoteEventSource, options: { fanOut?: boolean } = {}): Promise<IngestResult> {
    return this.locked(roomId, () => this.ingestNow(roomId, pdus, source, options.fanOut ?? false));
  }

  /**
   * Stores a room joined through another server: its auth chain and state as outliers (each
   * checked against its own auth events), its history, and the join on top of the state it was
   * given; the state after the join becomes the room's current state. Throws when the join
   * itself does not pass. A room we knew before (and left) has its state replaced.
   */
  joinRoom(joined: JoinedRoom, source: RemoteEventSource): Promise<StoredEvent> {
    return this.locked(joined.roomId, () => this.joinRoomNow(joined, source));
  }

  private async joinRoomNow(joined: JoinedRoom, source: RemoteEventSource): Promise<StoredEvent> {
    const { roomId, version } = joined;
    const known = await this.cache.room(roomId);
    const create = [...joined.state, ...joined.authChain].find((event) => event.pdu.type === 'm.room.create' && event.pdu.state_key === '');
    if (!create) throw new JoinRefused('the room state has no m.room.create event');
    if (known && known.version.id !== version.id) throw new JoinRefused(`the room is version ${known.version.id} here, ${version.id} there`);
    const room = known ?? new RoomSnapshot(roomId, version.id, create.pdu.sender);
    const batch: Batch = { pending: new Map(), order: [] };
    const byDepth = (a: VerifiedPdu, b: VerifiedPdu) => a.pdu.depth - b.pdu.depth || (a.eventId < b.eventId ? -1 : 1);
    const outliers = new Map<string, VerifiedPdu>();
    for (const event of [...joined.authChain, ...joined.state]) outliers.set(event.eventId, event);
    for (const event of [...outliers.values()].sort(byDepth)) {
      if (batch.pending.has(event.eventId) || (await this.isStored(event.eventId))) continue;
      await this.admit(room, version, event, batch, source, { outlier: true });
    }
    const stateIds: string[] = [];
    for (const event of joined.state) {
      const admitted = batch.pending.get(event.eventId)?.event ?? (await this.graph.event(event.eventId));
      if (admitted && admitted.rejected === undefined && admitted.stateKey !== undefined) stateIds.push(event.eventId);
    }
    for (const event of [...joined.history].sort(byDepth)) {
      if (batch.pending.has(event.eventId) || event.eventId === joined.join.eventId || (await this.isStored(event.eventId))) continue;
      await this.admit(room, version, event, batch, source, { outlier: false, history: true });
    }
    const outcome = await this.admit(room, version, joined.join, batch, source, { outlier: false, knownStateBefore: stateIds, skipCurrentState: true });
    if (outcome !== undefined) throw new JoinRefused(`the join event does not pass: ${outcome}`);
    const join = batch.pending.get(joined.join.eventId)!;
    // History is shown under the visibility the room has now (its own state is not known here).
    for (const event of batch.order) if (!event.outlier) event.historyVisibility = join.event.historyVisibility;
    const current = await this.eventsOfIds([...join.stateAfter.values()], batch.pending);
    const removed: Array<[string, string]> = [];
    if (known) for (const event of known.stateEvents()) if (!join.stateAfter.has(stateKeyOf(event.type, event.stateKey ?? ''))) removed.push([event.type, event.stateKey ?? '']);
    const head: RoomHead = { extremities: [join.event.eventId], depth: join.event.depth, stateGroup: join.group?.groupId, stateGroupDepth: join.group?.deltaDepth ?? 0 };
    await this.writer.submit({
      roomId,
      newRoom: known ? undefined : { room_id: roomId, room_version: version.id, creator: create.pdu.sender, is_public: 0, created_ts: create.pdu.origin_server_ts },
      prepare: () => [],
      remote: () => ({ events: batch.order, currentState: current, removedState: removed, head }),
    });
    for (const event of batch.order) this.graph.forget(event.eventId);
    return join.event;
  }

  private async locked<T>(roomId: string, work: () => Promise<T>): Promise<T> {
    const previous = this.locks.get(roomId) ?? Promise.resolve();
    const run = previous.then(work, work);
    const settled = run.then(
      () => undefined,
      () => undefined,
    );
    this.locks.set(roomId, settled);
    try {
      return await run;
    } finally {
      if (this.locks.get(roomId) === settled) this.locks.delete(roomId);
    }
  }

  private async ingestNow(roomId: string, pdus: readonly VerifiedPdu[], source: RemoteEventSource, fanOut: boolean): Promise<IngestResult> {
    const room = await this.cache.room(roomId);
    if (!room) throw new Error(`unknown room ${roomId}`);
    const version = room.version;
    const batch: Batch = { pending: new Map(), order: [] };
    const { pending, order } = batch;
    const outcomes = new Map<string, string | undefined>();
    // Deepest last, so parents come before children (a gap may still sit between them).
    const sorted = [...pdus].sort((a, b) => a.pdu.depth - b.pdu.depth || (a.eventId < b.eventId ? -1 : 1));
    for (const incoming of sorted) {
      if (pending.has(incoming.eventId) || (await this.isStored(incoming.eventId))) {
        outcomes.set(incoming.eventId, undefined);
        continue;
      }
      await this.fillGap(roomId, version, incoming, batch, source);
      const outcome = await this.admit(room, version, incoming, batch, source, { outlier: false });
      outcomes.set(incoming.eventId, outcome);
    }
    if (order.length > 0) await this.write(room, order, pending, fanOut);
    return { outcomes };
  }

  private async isStored(eventId: string): Promise<boolean> {
    return (await this.graph.event(eventId)) !== undefined;
  }

  /**
   * Brings in prev_events we lack: first what the sender says lies between (get_missing_events),
   * admitted like any event; if a gap remains, the state before each missing prev (state_ids),
   * whose events are stored as outliers, so the event's own state can be computed.
   */
  private async fillGap(roomId: string, version: RoomVersion, incoming: VerifiedPdu, batch: Batch, source: RemoteEventSource): Promise<void> {
    const { pending } = batch;
    const missing = await this.unknown(incoming.pdu.prev_events, pending);
    if (missing.length === 0) return;
    const room = this.cache.peek(roomId);
    const earliest = room?.head.extremities ?? [];
    const fetched = await source.missingEvents(roomId, earliest, [incoming.eventId], MISSING_EVENTS_LIMIT).catch(() => []);
    for (const event of fetched.sort((a, b) => a.pdu.depth - b.pdu.depth)) {
      if (pending.has(event.eventId) || (await this.isStored(event.eventId))) continue;
      // Only events whose own prevs are known can be placed; the rest is left to state_ids below.
      if ((await this.unknown(event.pdu.prev_events, pending)).length > 0) continue;
      if (room) await this.admit(room, version, event, batch, source, { outlier: false });
    }
    for (const prevId of await this.unknown(incoming.pdu.prev_events, pending)) {
      const { stateIds, authChainIds } = await source.stateIdsBefore(roomId, prevId);
      const events = await this.fetchEvents(roomId, [...new Set([...authChainIds, ...stateIds, prevId])], prevId, batch, source);
      // Outliers: their auth is checked against their own auth events only.
      for (const event of events.sort((a, b) => a.pdu.depth - b.pdu.depth)) {
        if (!pending.has(event.eventId) && room) await this.admit(room, version, event, batch, source, { outlier: event.eventId !== prevId, knownStateBefore: event.eventId === prevId ? stateIds : undefined });
      }
    }
  }

  /**
   * The events among `wanted` we lack, from the sender: one by one when few, else in one /state
   * answer (the state before `at`) plus the few it does not hold.
   */
  private async fetchEvents(roomId: string, wanted: readonly string[], at: string, batch: Batch, source: RemoteEventSource): Promise<VerifiedPdu[]> {
    const missingIds = await this.unknown(wanted, batch.pending);
    if (missingIds.length <= FETCH_ONE_BY_ONE_LIMIT) return source.events(roomId, missingIds);
    const missing = new Set(missingIds);
    const bulk = (await source.stateBefore(roomId, at)).filter((event) => missing.has(event.eventId));
    const found = new Set(bulk.map((event) => event.eventId));
    return [...bulk, ...(await source.events(roomId, missingIds.filter((id) => !found.has(id)).slice(0, FETCH_ONE_BY_ONE_LIMIT)))];
  }

  /**
   * The state after a prev we hold without state of its own (an outlier, or history from before
   * a join): the state before it as its sender says, fetched and stored as outliers, plus itself.
   */
  private async stateAfterStateless(room: RoomSnapshot, version: RoomVersion, prev: StoredEvent, batch: Batch, source: RemoteEventSource): Promise<StateMap | undefined> {
    const { stateIds, authChainIds } = await source.stateIdsBefore(room.roomId, prev.eventId).catch(() => ({ stateIds: [], authChainIds: [] }));
    if (stateIds.length === 0) return undefined;
    const events = await this.fetchEvents(room.roomId, [...new Set([...authChainIds, ...stateIds])], prev.eventId, batch, source);
    for (const event of events.sort((a, b) => a.pdu.depth - b.pdu.depth)) {
      if (!batch.pending.has(event.eventId)) await this.admit(room, version, event, batch, source, { outlier: true });
    }
    const state = new Map<string, string>();
    for (const event of await this.eventsOfIds(stateIds, batch.pending)) if (event.stateKey !== undefined && event.rejected === undefined) state.set(stateKeyOf(event.type, event.stateKey), event.eventId);
    if (prev.stateKey !== undefined && prev.rejected === undefined) state.set(stateKeyOf(prev.type, prev.stateKey), prev.eventId);
    return state;
  }

  private async unknown(eventIds: readonly string[], pending: Map<string, Pending>): Promise<string[]> {
    const notPending = eventIds.filter((id) => !pending.has(id));
    return notPending.length === 0 ? [] : this.graph.missing(notPending);
  }

  /**
   * Checks one event (steps 4-6) and adds it to the batch; returns why it was rejected or soft
   * failed, or undefined when accepted.
   */
  private async admit(
    room: RoomSnapshot,
    version: RoomVersion,
    incoming: VerifiedPdu,
    batch: Batch,
    source: RemoteEventSource,
    options: AdmitOptions,
  ): Promise<string | undefined> {
    const { pending, order } = batch;
    const { pdu, eventId } = incoming;
    const stateless = options.outlier || options.history === true;
    const signed = { isSignedBy: (server: string) => incoming.signers === undefined || incoming.signers.has(server) };
    // Step 4: its auth events, fetched when we lack them, must allow it.
    const authEvents = await this.authEventsOf(room.roomId, version, pdu, batch, source, room);
    let rejected: string | undefined;
    const selection = checkAuthEventsSelection(
      proposedOf(pdu),
      authEvents.map((event) => ({ type: event.type, state_key: event.stateKey ?? '', sender: event.sender, content: event.content, room_id: event.roomId, rejected: event.rejected !== undefined })),
      version,
      room.roomId,
    );
    if (!selection.allowed) rejected = selection.reason;
    if (rejected === undefined) {
      const byAuth = checkEventAuth(proposedOf(pdu), lookupOf(authEvents, version, room.roomId, pending, await this.createEvent(room, pending)), version, signed);
      if (!byAuth.allowed) rejected = `not allowed by its auth events: ${byAuth.reason}`;
    }

    // Step 5: the state before it (outliers and history have none here: their auth events stand in).
    const before = stateless ? { state: new Map<string, string>(), group: undefined } : await this.stateBefore(room, version, pdu, batch, source, options.knownStateBefore);
    const beforeEvents = stateless ? new Map(authEvents.map((event) => [event.eventId, event])) : await this.eventsOfState(before.state, pending);
    if (rejected === undefined && !stateless) {
      const byState = checkEventAuth(proposedOf(pdu), lookupFromState(beforeEvents, version, room.roomId, await this.createEvent(room, pending)), version, signed);
      if (!byState.allowed) rejected = `not allowed by the state before it: ${byState.reason}`;
    }

    // Step 6: the current state; failing it is a soft failure.
    let softFailed = false;
    if (rejected === undefined && !stateless && !options.skipCurrentState) {
      const byCurrent = checkEventAuth(proposedOf(pdu), room.lookup, version, signed);
      softFailed = !byCurrent.allowed;
    }

    const key = pdu.state_key === undefined ? undefined : stateKeyOf(pdu.type, pdu.state_key);
    const replaced = key === undefined ? undefined : before.state.get(key);
    const replacedEvent = replaced === undefined ? undefined : beforeEvents.get(replaced);
    const event: StoredEvent = {
      stream: 0,
      eventId,
      roomId: room.roomId,
      type: pdu.type,
      stateKey: pdu.state_key,
      sender: pdu.sender,
      originServerTs: pdu.origin_server_ts,
      content: pdu.content,
      replacesState: replaced,
      prevContent: replacedEvent?.content,
      prevSender: replacedEvent?.sender,
      redacts: typeof pdu.redacts === 'string' ? pdu.redacts : typeof pdu.content.redacts === 'string' ? pdu.content.redacts : undefined,
      redactedBy: undefined,
      historyVisibility: historyVisibilityIn(beforeEvents),
      txnDeviceId: undefined,
      txnScope: undefined,
      txnId: undefined,
      depth: pdu.depth,
      prevEvents: pdu.prev_events,
      authEvents: pdu.auth_events,
      pduExtra: extraKeys(pdu),
      stateGroup: undefined,
      outlier: options.outlier,
      rejected,
      softFailed,
    };
    if (stateless) {
      // What a replaced state event was is unknown without the state before it.
      event.replacesState = undefined;
      event.prevContent = undefined;
      event.prevSender = undefined;
      pending.set(eventId, { event, stateAfter: new Map(), group: undefined, stateless: true });
      order.push(event);
      return rejected;
    }
    // The state after it: its own key set, unless rejected.
    let stateAfter: StateMap = before.state;
    let group = before.group;
    if (key !== undefined && rejected === undefined) {
      const after = new Map(before.state);
      after.set(key, eventId);
      stateAfter = after;
      group = undefined;
    }
    if (!group) {
      const base = before.group ? { groupId: before.group.groupId, state: before.state, deltaDepth: before.group.deltaDepth } : undefined;
      group = await this.stateGroups.store(room.roomId, stateAfter, base);
    }
    event.stateGroup = group.groupId;
    pending.set(eventId, { event, stateAfter, group, stateless: false });
    order.push(event);
    if (rejected !== undefined) return rejected;
    return softFailed ? 'soft failed: not allowed by the current state of the room' : undefined;
  }

  /** The event's auth events, from the batch, the store, or the sender (admitted as outliers). */
  private async authEventsOf(roomId: string, version: RoomVersion, pdu: Pdu, batch: Batch, source: RemoteEventSource, room: RoomSnapshot): Promise<StoredEvent[]> {
    const { pending } = batch;
    const missing = await this.unknown(pdu.auth_events, pending);
    if (missing.length > 0) {
      const fetched = await this.fetchAuthChain(roomId, missing, pending, source);
      for (const event of fetched) {
        if (!pending.has(event.eventId) && !(await this.isStored(event.eventId))) await this.admit(room, version, event, batch, source, { outlier: true });
      }
    }
    const found = await this.graph.events(pdu.auth_events.filter((id) => !pending.has(id)));
    return pdu.auth_events.flatMap((id) => {
      const event = pending.get(id)?.event ?? found.get(id);
      return event ? [event] : [];
    });
  }

  /** Missing auth events and theirs, oldest first, at most MAX_AUTH_FETCH. */
  private async fetchAuthChain(roomId: string, eventIds: string[], pending: Map<string, Pending>, source: RemoteEventSource): Promise<VerifiedPdu[]> {
    const collected = new Map<string, VerifiedPdu>();
    let wanted = eventIds;
    while (wanted.length > 0 && collected.size < MAX_AUTH_FETCH) {
      const events = await source.events(roomId, wanted.slice(0, MAX_AUTH_FETCH - collected.size));
      if (events.length === 0) break;
      for (const event of events) collected.set(event.eventId, event);
      const next = new Set<string>();
      for (const event of events) for (const id of event.pdu.auth_events) if (!collected.has(id)) next.add(id);
      wanted = await this.unknown([...next], pending);
    }
    return [...collected.values()].sort((a, b) => a.pdu.depth - b.pdu.depth);
  }

  /** The state before an event: from the sender (a gap), one prev's state, or the resolution of several. */
  private async stateBefore(
    room: RoomSnapshot,
    version: RoomVersion,
    pdu: Pdu,
    batch: Batch,
    source: RemoteEventSource,
    known: readonly string[] | undefined,
  ): Promise<{ state: StateMap; group: { groupId: number; deltaDepth: number } | undefined }> {
    const { pending } = batch;
    if (known) {
      const events = await this.eventsOfIds(known, pending);
      const state = new Map<string, string>();
      for (const event of events) if (event.stateKey !== undefined) state.set(stateKeyOf(event.type, event.stateKey), event.eventId);
      return { state, group: undefined };
    }
    const afters: Array<{ state: StateMap; group: { groupId: number; deltaDepth: number } | undefined }> = [];
    for (const prevId of pdu.prev_events) {
      const inBatch = pending.get(prevId);
      if (inBatch && !inBatch.stateless) {
        afters.push({ state: inBatch.stateAfter, group: inBatch.group });
        continue;
      }
      const prev = inBatch?.event ?? (await this.graph.event(prevId));
      if (prev?.stateGroup !== undefined) {
        afters.push({ state: await this.stateGroups.stateOf(prev.stateGroup), group: { groupId: prev.stateGroup, deltaDepth: await this.stateGroups.deltaDepthOf(prev.stateGroup) } });
      } else if (prev) {
        const state = await this.stateAfterStateless(room, version, prev, batch, source);
        if (state) afters.push({ state, group: undefined });
      }
    }
    // A create event, or an event whose prevs we could not get: nothing (it fails auth if it needs state).
    if (afters.length === 0) return { state: new Map(), group: undefined };
    if (afters.length === 1) return afters[0]!;
    const resolved = await this.graph.resolve(version, room.roomId, afters.map((after) => after.state), this.lookupPending(pending));
    return { state: resolved, group: undefined };
  }

  private lookupPending(pending: Map<string, Pending>): (id: string) => StoredEvent | undefined {
    return (id) => pending.get(id)?.event;
  }

  private async eventsOfState(state: StateMap, pending: Map<string, Pending>): Promise<Map<string, StoredEvent>> {
    const events = await this.eventsOfIds([...state.values()], pending);
    return new Map(events.map((event) => [event.eventId, event]));
  }

  private async eventsOfIds(ids: readonly string[], pending: Map<string, Pending>): Promise<StoredEvent[]> {
    const stored = await this.graph.events(ids.filter((id) => !pending.has(id)));
    return ids.flatMap((id) => {
      const event = pending.get(id)?.event ?? stored.get(id);
      return event ? [event] : [];
    });
  }

  /** A v12 room's create event (not among auth events: the room id names it). */
  private async createEvent(room: RoomSnapshot, pending: Map<string, Pending>): Promise<StoredEvent | undefined> {
    if (!room.version.roomIdFromCreateEvent) return undefined;
    const id = `$${room.roomId.slice(1)}`;
    return pending.get(id)?.event ?? (await this.graph.event(id));
  }

  /**
   * Writes the batch with the room's new head: the forward extremities lose the accepted events'
   * prevs and gain the events; the current state is the state after the single extremity, or the
   * resolution of the extremities' states. Computed again when a local send moved the head.
   */
  private async write(room: RoomSnapshot, order: StoredEvent[], pending: Map<string, Pending>, fanOut: boolean): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      const expected = [...room.head.extremities];
      const { head, current } = await this.nextHead(room, order, pending);
      const changes = await this.stateChanges(room, current, pending);
      const redactions = await this.redactionsOf(room, order, pending);
      try {
        await this.writer.submit({
          roomId: room.roomId,
          fanOut,
          prepare: () => [],
          remote: (latest): RemoteBatch => {
            if (!sameList(latest.head.extremities, expected)) throw new HeadMoved('the room moved on while the batch was checked');
            return { events: order, currentState: changes.current, removedState: changes.removed, head, redactions, stateReset: isStateReset(order, changes, pending) };
          },
        });
        for (const event of order) this.graph.forget(event.eventId);
        for (const redaction of redactions) this.graph.forget(redaction.eventId);
        return;
      } catch (err) {
        if (!(err instanceof HeadMoved) || attempt >= 5) throw err;
      }
    }
  }

  private async nextHead(room: RoomSnapshot, order: StoredEvent[], pending: Map<string, Pending>): Promise<{ head: RoomHead; current: StateMap | undefined }> {
    const extremities = new Set(room.head.extremities);
    let depth = room.head.depth;
    let moved = false;
    for (const event of order) {
      if (event.outlier || event.rejected !== undefined || event.softFailed || pending.get(event.eventId)?.stateless) continue;
      for (const prev of event.prevEvents ?? []) extremities.delete(prev);
      extremities.add(event.eventId);
      depth = Math.max(depth, event.depth);
      moved = true;
    }
    if (!moved) return { head: room.head, current: undefined };
    const ids = [...extremities];
    const states: StateMap[] = [];
    let group: { groupId: number; deltaDepth: number } | undefined;
    for (const id of ids) {
      const inBatch = pending.get(id);
      if (inBatch) {
        states.push(inBatch.stateAfter);
        group = inBatch.group;
        continue;
      }
      const event = await this.graph.event(id);
      if (event?.stateGroup !== undefined) {
        states.push(await this.stateGroups.stateOf(event.stateGroup));
        group = { groupId: event.stateGroup, deltaDepth: await this.stateGroups.deltaDepthOf(event.stateGroup) };
      }
    }
    let current: StateMap;
    if (states.length === 1) {
      current = states[0]!;
    } else {
      current = await this.graph.resolve(room.version, room.roomId, states, this.lookupPending(pending));
      group = await this.stateGroups.store(room.roomId, current, group ? { ...group, state: states[states.length - 1]! } : undefined);
    }
    return { head: { extremities: ids, depth, stateGroup: group?.groupId, stateGroupDepth: group?.deltaDepth ?? 0 }, current };
  }

  /**
   * The redactions of the batch that take effect ("Handling redactions"): their sender may
   * redact (by power, or being of the target's server), and the target is stored and not yet
   * redacted. A redaction whose target comes later is left for now.
   */
  private async redactionsOf(room: RoomSnapshot, order: StoredEvent[], pending: Map<string, Pending>): Promise<NonNullable<RemoteBatch['redactions']>> {
    const redactions: NonNullable<RemoteBatch['redactions']> = [];
    const levels = effectivePowerLevels(room.lookup, room.version);
    for (const event of order) {
      if (event.type !== 'm.room.redaction' || event.redacts === undefined || event.outlier || event.rejected !== undefined || event.softFailed) continue;
      const target = pending.get(event.redacts)?.event ?? (await this.graph.event(event.redacts));
      if (!target || target.roomId !== room.roomId || target.redactedBy !== undefined) continue;
      if (!redactionApplies(levels, event.sender, target.sender)) continue;
      redactions.push({ eventId: target.eventId, redactedContent: redactedContent(target.type, target.content, room.version.id), redactedBy: event.eventId });
    }
    return redactions;
  }

  /** What changes from the room's current state to `current`: events now current, keys dropped. */
  private async stateChanges(room: RoomSnapshot, current: StateMap | undefined, pending: Map<string, Pending>): Promise<{ current: StoredEvent[]; removed: Array<[string, string]> }> {
    if (!current) return { current: [], removed: [] };
    const changedIds: string[] = [];
    for (const [key, eventId] of current) {
      const [type, stateKey] = splitStateKey(key);
      if (room.get(type, stateKey)?.eventId !== eventId) changedIds.push(eventId);
    }
    const removed: Array<[string, string]> = [];
    for (const event of room.stateEvents()) {
      if (!current.has(stateKeyOf(event.type, event.stateKey ?? ''))) removed.push([event.type, event.stateKey ?? '']);
    }
    return { current: await this.eventsOfIds(changedIds, pending), removed };
  }
}

/**
 * Whether the current state changes other than by the batch's own shown state events: a key
 * dropped, or a key set to an event that is not one of them (older, or an outlier).
 */
function isStateReset(order: StoredEvent[], changes: { current: StoredEvent[]; removed: Array<[string, string]> }, pending: Map<string, Pending>): boolean {
  if (changes.removed.length > 0) return true;
  const shown = new Set(order.filter((event) => !event.outlier && event.rejected === undefined && !event.softFailed && !pending.get(event.eventId)?.stateless).map((event) => event.eventId));
  return changes.current.some((event) => !shown.has(event.eventId));
}

function proposedOf(pdu: Pdu) {
  return {
    type: pdu.type,
    ...(pdu.state_key !== undefined ? { state_key: pdu.state_key } : {}),
    sender: pdu.sender,
    content: pdu.content,
    ...(pdu.room_id !== undefined ? { room_id: pdu.room_id } : {}),
    prev_events: pdu.prev_events,
  };
}

/** A lookup over an event's auth events (rejected ones excluded), plus a v12 room's create event. */
function lookupOf(authEvents: StoredEvent[], _version: RoomVersion, _roomId: string, _pending: Map<string, Pending>, create: StoredEvent | undefined): StateLookup {
  return lookupFromState(new Map(authEvents.filter((event) => event.rejected === undefined).map((event) => [event.eventId, event])), _version, _roomId, create);
}

function lookupFromState(events: Map<string, StoredEvent>, _version: RoomVersion, _roomId: string, create: StoredEvent | undefined): StateLookup {
  const byKey = new Map<string, StoredEvent>();
  for (const event of events.values()) if (event.stateKey !== undefined) byKey.set(stateKeyOf(event.type, event.stateKey), event);
  if (create && !byKey.has(stateKeyOf('m.room.create', ''))) byKey.set(stateKeyOf('m.room.create', ''), create);
  return (type, stateKey) => {
    const event = byKey.get(stateKeyOf(type, stateKey));
    return event ? { event_id: event.eventId, type: event.type, state_key: event.stateKey ?? '', sender: event.sender, content: event.content } : undefined;
  };
}

function historyVisibilityIn(events: Map<string, StoredEvent>): string {
  for (const event of events.values()) {
    if (event.type === 'm.room.history_visibility' && event.stateKey === '' && typeof event.content.history_visibility === 'string') return event.content.history_visibility;
  }
  return 'shared';
}

/** The PDU's keys without a StoredEvent field of their own. */
function extraKeys(pdu: Pdu): JsonObject {
  const {
    room_id: _roomId, sender: _sender, type: _type, state_key: _stateKey, content: _content, origin_server_ts: _ts,
    depth: _depth, prev_events: _prev, auth_events: _auth, redacts: _redacts, unsigned: _unsigned, ...extra
  } = pdu;
  return extra;
}

function sameList(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((value, index) => value === b[index]);
}

