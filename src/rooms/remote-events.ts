/**
 * Events from other servers into a room we are in: steps 4 to 6 of "Checks performed on receipt
 * of a PDU" (the federation layer did 1 to 3: format, signatures, hashes). For each event, in
 * order: its auth events (fetched when missing) must allow it; the state before it (the state
 * after its prev_events, resolved when they fork) must allow it, or it is rejected; the room's
 * current state must allow it, or it is soft failed. Then the whole batch is written at once: the
 * events, their state groups, the room's new forward extremities and its new current state (the
 * resolution of the extremities' states).
 *
 * The stages, in order: a pushed event's missing prev_events are asked of its sender
 * (get_missing_events) and those "pulled" events are admitted first; a pulled event whose own
 * prevs are still missing sits on a gap: its state is the sender's state at the missing prevs
 * (state_ids), the missing prevs are remembered as backward extremities (filled later by
 * /backfill), and the event is marked `gapBefore`, so a sync stops there. A pushed event whose prevs
 * are still missing after that is refused, as Synapse does: a server that pushes an event must be
 * able to say what it was built on.
 *
 * Checking never waits on the network under the room's lock: what the sender must be asked is
 * gathered between checks (gathered-answers.ts), within the budget the caller's source keeps, and
 * the batch is checked again with the answers. One batch per room at a time. Local sends may move
 * the room's head meanwhile; the writer then says so (HeadMoved) and only the last step, the new
 * head and current state, is done again.
 */
import { checkAuthEventsSelection, checkEventAuth, effectivePowerLevels, redactionApplies, type StateLookup } from './auth-rules.js';
import { redactedContent } from './redaction.js';
import { stateKeyOf, type JsonObject, type StoredEvent } from './events.js';
import type { EventGraph } from './event-graph.js';
import { HeadMoved, type EventWriter, type RemoteBatch } from './event-writer.js';
import { pduOf, referenceHash, type Pdu } from './pdu.js';
import type { RoomCache } from './room-cache.js';
import { RoomSnapshot, type RoomHead } from './room-snapshot.js';
import type { RoomVersion } from './room-versions.js';
import type { RemoteEventSource, VerifiedPdu } from './event-source.js';
import { GatheredAnswers } from './gathered-answers.js';
import { splitStateKey, type NewStateGroup, type StateGroups, type StateMap } from './state-groups.js';

export type { RemoteEventSource, VerifiedPdu } from './event-source.js';

/** Rounds of asking the sender between checks of one batch, at most (each asks what the last check lacked). */
const MAX_GATHER_ROUNDS = 8;

/** Past this many events missing at a gap, they are fetched in one /state answer, not one by one. */
const FETCH_ONE_BY_ONE_LIMIT = 50;

/** A room could not be joined with what the resident server answered. */
export class JoinRefused extends Error {
  override name = 'JoinRefused';
}

export interface IngestResult {
  /** Per event id: undefined when accepted, else why it was rejected (or 'soft failed'). */
  outcomes: Map<string, string | undefined>;
  /**
   * The events judged and kept as rejected (they failed the auth rules): a transaction's answer
   * for them is `{}`, as Synapse's, unlike events that could not be judged (nothing fetched).
   */
  rejected: Set<string>;
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
  /** History from /backfill: as `history`, but below zero (in /messages, never in sync), judged for visibility at this position. */
  backfilledAt?: number | undefined;
  /**
   * Pulled from the sender (get_missing_events; the ids of that answer): prevs we lack that are
   * not in the answer are a gap, placed on the sender's state there.
   */
  pulled?: ReadonlySet<string> | undefined;
  /** The state before it, as the sender gave it (a gap we could not fill, a join). */
  knownStateBefore?: readonly string[] | undefined;
  /** A join's own event: the room's current state here is not the room's yet. */
  skipCurrentState?: boolean | undefined;
}

/** The gaps a /backfill answer was asked for: their missing events, and how their events are shown. */
export interface BackfillGaps {
  eventIds: readonly string[];
  /** The history visibility the gaps' events are shown under (that of the events above them). */
  historyVisibility: string;
  /** The position at which their visibility is judged (see `StoredEvent.backfilledAt`). */
  at: number;
}

/** The events of `pdus` that hang below `roots` by prev_events (the roots among them). */
function reachableFrom(roots: readonly string[], pdus: readonly VerifiedPdu[]): VerifiedPdu[] {
  const byId = new Map(pdus.map((event) => [event.eventId, event]));
  const reached = new Map<string, VerifiedPdu>();
  const frontier = [...roots];
  while (frontier.length > 0) {
    const id = frontier.pop()!;
    const event = byId.get(id);
    if (!event || reached.has(id)) continue;
    reached.set(id, event);
    frontier.push(...event.pdu.prev_events);
  }
  return [...reached.values()];
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
  /** State groups the batch's events use, written with them. */
  groups: NewStateGroup[];
  /** Events missing below the gaps the batch opens, and the events that name them. */
  gaps: NonNullable<RemoteBatch['backwardExtremities']>;
}

function newBatch(): Batch {
  return { pending: new Map(), order: [], groups: [], gaps: [] };
}

export class RemoteEvents {
  private readonly locks = new Map<string, Promise<unknown>>();
  /** v1/v2 ids being admitted, and the room admitting each (see `claim`): held only while that room's lock is. */
  private readonly claims = new Map<string, string>();
  private readonly claimsOfRoom = new Map<string, Set<string>>();

  private readonly gapListeners: Array<(roomId: string) => void> = [];

  constructor(
    private readonly graph: EventGraph,
    private readonly stateGroups: StateGroups,
    private readonly cache: RoomCache,
    private readonly writer: EventWriter,
  ) {}

  /** Called after a batch that opened a gap in a room's timeline is written. */
  onGap(listener: (roomId: string) => void): void {
    this.gapListeners.push(listener);
  }

  /**
   * Checks and stores events of a room (one batch at a time per room). `source`: whom to ask for
   * what the events need (undefined: nobody; events that need anything are refused). `fanOut`:
   * the events came to this server to be passed on (send_join, send_leave), so the sender sends
   * them on.
   */
  async ingest(roomId: string, pdus: readonly VerifiedPdu[], source: RemoteEventSource | undefined, options: { fanOut?: boolean } = {}): Promise<IngestResult> {
    const result = await this.gathering(roomId, source, (answers) => this.ingestNow(roomId, pdus, answers, options.fanOut ?? false));
    if (result.gaps) for (const listener of this.gapListeners) listener(roomId);
    return result;
  }

  /**
   * Stores a room joined through another server: its auth chain and state as outliers (each
   * checked against its own auth events), its history, and the join on top of the state it was
   * given; the state after the join becomes the room's current state. Throws when the join
   * itself does not pass. A room we knew before (and left) has its state replaced.
   */
  joinRoom(joined: JoinedRoom, source: RemoteEventSource): Promise<StoredEvent> {
    return this.gathering(joined.roomId, source, (answers) => this.joinRoomNow(joined, answers));
  }

  /**
   * Stores history another server gave from /backfill (events older than a gap): each checked
   * against its auth events, shown by /messages (never by sync, which has moved on), under the
   * history visibility `visibility`. The gaps they close are forgotten, the prevs they lack are
   * the new gaps. Returns how many events were new here.
   */
  async backfill(roomId: string, pdus: readonly VerifiedPdu[], source: RemoteEventSource | undefined, gaps: BackfillGaps): Promise<number> {
    return this.gathering(roomId, source, (answers) => this.backfillNow(roomId, pdus, answers, gaps));
  }

  /**
   * Runs `check` under the room's lock with the answers gathered so far; while it lacked answers
   * it may still get, they are asked for with the lock let go, and it runs again. `check`
   * returns undefined when it wrote nothing because it lacked answers.
   */
  private async gathering<T>(roomId: string, source: RemoteEventSource | undefined, check: (answers: GatheredAnswers) => Promise<T | undefined>): Promise<T> {
    const answers = new GatheredAnswers(roomId, source);
    for (;;) {
      if (answers.rounds >= MAX_GATHER_ROUNDS) answers.close();
      const result = await this.locked(roomId, () => check(answers));
      if (result !== undefined) return result;
      await answers.gather();
    }
  }

  private async joinRoomNow(joined: JoinedRoom, source: GatheredAnswers): Promise<StoredEvent | undefined> {
    const { roomId, version } = joined;
    const known = await this.cache.room(roomId);
    const create = [...joined.state, ...joined.authChain].find((event) => event.pdu.type === 'm.room.create' && event.pdu.state_key === '');
    if (!create) throw new JoinRefused('the room state has no m.room.create event');
    // The version the resident server named must be the room's own (absent: version 1).
    const createdAs = create.pdu.content.room_version ?? '1';
    if (createdAs !== version.id) throw new JoinRefused(`the room was created as version ${JSON.stringify(createdAs).slice(0, 50)}, not ${version.id}`);
    if (known && known.version.id !== version.id) throw new JoinRefused(`the room is version ${known.version.id} here, ${version.id} there`);
    const room = known ?? new RoomSnapshot(roomId, version.id, create.pdu.sender);
    const batch = newBatch();
    const byDepth = (a: VerifiedPdu, b: VerifiedPdu) => a.pdu.depth - b.pdu.depth || (a.eventId < b.eventId ? -1 : 1);
    const outliers = new Map<string, VerifiedPdu>();
    for (const event of [...joined.authChain, ...joined.state]) outliers.set(event.eventId, event);
    for (const event of [...outliers.values()].sort(byDepth)) {
      if (batch.pending.has(event.eventId) || (await this.isStored(event.eventId))) continue;
      await this.admit(room, version, event, batch, source, { outlier: true });
    }
    const stateIds: string[] = [];
    for (const event of joined.state) {
      // Only the event the resident server sent: in v1/v2 rooms its id may name another we hold.
      if ((await this.heldAs(room, event, batch.pending)) !== 'same') continue;
      const admitted = batch.pending.get(event.eventId)?.event ?? (await this.graph.event(event.eventId));
      if (admitted && admitted.rejected === undefined && admitted.stateKey !== undefined) stateIds.push(event.eventId);
    }
    for (const event of [...joined.history].sort(byDepth)) {
      if (batch.pending.has(event.eventId) || event.eventId === joined.join.eventId || (await this.isStored(event.eventId))) continue;
      await this.admit(room, version, event, batch, source, { outlier: false, history: true });
    }
    const outcome = await this.admit(room, version, joined.join, batch, source, { outlier: false, knownStateBefore: stateIds, skipCurrentState: true });
    if (source.needsMore) return undefined;
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
      remote: () => ({ events: batch.order, currentState: current, removedState: removed, head, stateGroups: batch.groups }),
    });
    for (const event of batch.order) this.graph.forget(event.eventId);
    return join.event;
  }

  private async locked<T>(roomId: string, work: () => Promise<T>): Promise<T> {
    const previous = this.locks.get(roomId) ?? Promise.resolve();
    const run = previous.then(work, work).finally(() => this.releaseClaims(roomId));
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

  private async ingestNow(roomId: string, pdus: readonly VerifiedPdu[], source: GatheredAnswers, fanOut: boolean): Promise<(IngestResult & { gaps: boolean }) | undefined> {
    const room = await this.cache.room(roomId);
    if (!room) throw new Error(`unknown room ${roomId}`);
    const version = room.version;
    const batch = newBatch();
    const { pending, order } = batch;
    const outcomes = new Map<string, string | undefined>();
    const rejected = new Set<string>();
    // Deepest last, so parents come before children (a gap may still sit between them).
    const sorted = [...pdus].sort((a, b) => a.pdu.depth - b.pdu.depth || (a.eventId < b.eventId ? -1 : 1));
    for (const incoming of sorted) {
      const held = await this.heldAs(room, incoming, pending);
      if (held !== 'new') {
        // A v1/v2 id names another event: refused, nothing stored. The first outcome of an id
        // stands (the answer has one entry per id).
        if (!outcomes.has(incoming.eventId)) outcomes.set(incoming.eventId, held === 'same' ? pending.get(incoming.eventId)?.event.rejected : held);
        continue;
      }
      await this.pullMissing(room, version, incoming, batch, source);
      const missing = await this.unknown(incoming.pdu.prev_events, pending);
      if (missing.length > 0) {
        outcomes.set(incoming.eventId, `its prev_events could not be fetched from the sender: ${missing.slice(0, 3).join(', ')}`);
        continue;
      }
      outcomes.set(incoming.eventId, await this.admit(room, version, incoming, batch, source, { outlier: false }));
      if (pending.get(incoming.eventId)?.event.rejected !== undefined) rejected.add(incoming.eventId);
    }
    if (source.needsMore) return undefined;
    if (order.length > 0) await this.write(room, batch, fanOut);
    return { outcomes, rejected, gaps: batch.gaps.length > 0 };
  }

  private async backfillNow(roomId: string, pdus: readonly VerifiedPdu[], source: GatheredAnswers, gaps: BackfillGaps): Promise<number | undefined> {
    const room = await this.cache.room(roomId);
    if (!room) throw new Error(`unknown room ${roomId}`);
    const batch = newBatch();
    const visibility = { historyVisibility: gaps.historyVisibility, visibleAt: gaps.at };
    const upgraded: Array<{ eventId: string; historyVisibility: string; visibleAt: number }> = [];
    const upgradedEvents: StoredEvent[] = [];
    // Oldest first: parents before children, so what one gap brings can close the next. Only
    // what hangs below the gaps asked about is taken: an answer cannot slip other events in.
    const sorted = reachableFrom(gaps.eventIds, pdus).sort((a, b) => a.pdu.depth - b.pdu.depth || (a.eventId < b.eventId ? -1 : 1));
    for (const incoming of sorted) {
      if (batch.pending.has(incoming.eventId)) continue;
      const stored = await this.graph.event(incoming.eventId);
      if (stored) {
        // Held for state or auth only (say the missing prev of a gap, a state event): now shown.
        if (stored.outlier && stored.rejected === undefined && stored.roomId === roomId) {
          upgraded.push({ eventId: stored.eventId, ...visibility });
          upgradedEvents.push(stored);
        }
        continue;
      }
      // Where the state before it is known (its prevs are here with theirs), it is checked against
      // that state too, as any event; the far end of a partial fill has only its auth events.
      const placed = await this.hasStateAt(roomId, incoming.pdu.prev_events, batch.pending);
      await this.admit(room, room.version, incoming, batch, source, { outlier: false, history: !placed, skipCurrentState: true, backfilledAt: gaps.at });
    }
    if (source.needsMore) return undefined;
    const added = batch.order.filter((event) => !event.outlier);
    // Those placed on their state know the visibility they were sent under; the rest take the gap's.
    for (const event of added) if (batch.pending.get(event.eventId)?.stateless) event.historyVisibility = gaps.historyVisibility;
    // What the new history was built on and we still lack (or hold only as outliers): the gaps further back.
    const shown = new Set([...added.map((event) => event.eventId), ...upgraded.map((event) => event.eventId)]);
    for (const event of [...added.filter((event) => event.rejected === undefined), ...upgradedEvents]) {
      for (const prev of event.prevEvents ?? []) {
        if (shown.has(prev) || !(await this.heldOnlyForState(prev, batch.pending))) continue;
        batch.gaps.push({ eventId: prev, childId: event.eventId, childDepth: event.depth, childStream: gaps.at, childVisibility: gaps.historyVisibility });
      }
    }
    if (batch.order.length === 0 && upgraded.length === 0) return 0;
    const redactions = await this.backfilledRedactions(room, batch, upgradedEvents);
    await this.writer.submit({
      roomId,
      prepare: () => [],
      remote: () => ({ events: batch.order, currentState: [], removedState: [], stateGroups: batch.groups, backwardExtremities: batch.gaps, backfilledOutliers: upgraded, redactions }),
    });
    for (const event of [...batch.order, ...upgradedEvents]) this.graph.forget(event.eventId);
    for (const redaction of redactions) this.graph.forget(redaction.eventId);
    return added.filter((event) => event.rejected === undefined).length + upgraded.length;
  }

  /**
   * Whether every one of `eventIds` is held with the state after it (in the batch or stored), in
   * `roomId`: another room's event is a dead end here, whatever state it has there.
   */
  private async hasStateAt(roomId: string, eventIds: readonly string[], pending: Map<string, Pending>): Promise<boolean> {
    if (eventIds.length === 0) return false;
    for (const id of eventIds) {
      const inBatch = pending.get(id);
      if (inBatch) {
        if (inBatch.stateless || inBatch.event.roomId !== roomId) return false;
        continue;
      }
      const stored = await this.graph.event(id);
      if (stored?.stateGroup === undefined || stored.roomId !== roomId) return false;
    }
    return true;
  }

  /** Whether an event is missing from the room's timeline: not stored, or stored only as an outlier. */
  private async heldOnlyForState(eventId: string, pending: Map<string, Pending>): Promise<boolean> {
    const inBatch = pending.get(eventId)?.event;
    if (inBatch) return inBatch.outlier && inBatch.rejected === undefined;
    const stored = await this.graph.event(eventId);
    return stored === undefined || (stored.outlier && stored.rejected === undefined);
  }

  /**
   * The redactions backfilled history brings into effect: its own redactions of events we hold,
   * and redactions we hold (stored before their targets came) of its events.
   */
  private async backfilledRedactions(room: RoomSnapshot, batch: Batch, upgraded: readonly StoredEvent[]): Promise<NonNullable<RemoteBatch['redactions']>> {
    const redactions = await this.redactionsOf(room, batch.order, batch.pending);
    const targets = [...batch.order.filter((event) => !event.outlier && event.rejected === undefined), ...upgraded];
    if (targets.length === 0) return redactions;
    const byId = new Map(targets.map((event) => [event.eventId, event]));
    const levels = effectivePowerLevels(room.lookup, room.version);
    const done = new Set(redactions.map((redaction) => redaction.eventId));
    for (const row of await this.graph.redactionsTargeting(room.roomId, [...byId.keys()])) {
      const target = byId.get(row.redacts ?? '');
      if (!target || done.has(target.eventId) || !redactionApplies(levels, room.version, row, target)) continue;
      done.add(target.eventId);
      redactions.push({ eventId: target.eventId, redactedContent: redactedContent(target.type, target.content, room.version.id), redactedBy: row.eventId });
    }
    return redactions;
  }

  /** Whether any of `eventIds` is an event we hold (or are admitting) of a room other than `roomId`. */
  private async namesOtherRoom(eventIds: readonly string[], roomId: string, pending: Map<string, Pending>): Promise<boolean> {
    for (const id of eventIds) {
      const event = pending.get(id)?.event ?? (await this.graph.event(id));
      if (event && event.roomId !== roomId) return true;
    }
    return false;
  }

  private async isStored(eventId: string): Promise<boolean> {
    return (await this.graph.event(eventId)) !== undefined;
  }

  /**
   * Whether `incoming`'s id names an event we hold or are admitting: 'new' when not, 'same' when
   * that is this very event, else why it is refused. From v3 the id is the event's reference hash
   * (its room id included), so an id held is the same event. In v1/v2 the sending server chooses
   * the id, and may reuse one of its own: held counts as the same event only in this room and
   * with the same reference hash. A held id is never given to another event (first wins).
   */
  private async heldAs(room: RoomSnapshot, incoming: VerifiedPdu, pending: Map<string, Pending>): Promise<'new' | 'same' | string> {
    const held = pending.get(incoming.eventId)?.event ?? (await this.graph.event(incoming.eventId)) ?? this.claimedElsewhere(room.roomId, incoming.eventId);
    if (held === undefined) return 'new';
    if (room.version.eventFormat !== 'v1') return 'same';
    if (held === 'claimed' || held.roomId !== room.roomId) return `its event_id ${incoming.eventId.slice(0, 100)} names an event of another room`;
    const heldPdu = pduOf(held, room.version);
    if (heldPdu === undefined || !referenceHash(heldPdu, room.version).equals(referenceHash(incoming.pdu, room.version))) {
      return `its event_id ${incoming.eventId.slice(0, 100)} names another event of this room`;
    }
    return 'same';
  }

  /**
   * 'claimed' when a v1/v2 id is being admitted in another room (rooms are worked on in
   * parallel, each under its own lock): then neither the stored events nor this batch know it yet.
   */
  private claimedElsewhere(roomId: string, eventId: string): 'claimed' | undefined {
    const owner = this.claims.get(eventId);
    return owner !== undefined && owner !== roomId ? 'claimed' : undefined;
  }

  /** Claims a v1/v2 id for `roomId` until the room's lock is let go; false when another room has it. */
  private claim(roomId: string, eventId: string): boolean {
    const owner = this.claims.get(eventId);
    if (owner !== undefined) return owner === roomId;
    this.claims.set(eventId, roomId);
    let ids = this.claimsOfRoom.get(roomId);
    if (!ids) this.claimsOfRoom.set(roomId, (ids = new Set()));
    ids.add(eventId);
    return true;
  }

  private releaseClaims(roomId: string): void {
    const ids = this.claimsOfRoom.get(roomId);
    if (!ids) return;
    this.claimsOfRoom.delete(roomId);
    for (const id of ids) if (this.claims.get(id) === roomId) this.claims.delete(id);
  }

  /**
   * A pushed event's prev_events we lack: what the sender says lies between them and what we have
   * (get_missing_events), admitted oldest first as pulled events (one whose own prevs are still
   * missing sits on a gap; see `stateBefore`).
   */
  private async pullMissing(room: RoomSnapshot, version: RoomVersion, incoming: VerifiedPdu, batch: Batch, source: GatheredAnswers): Promise<void> {
    const { pending } = batch;
    if ((await this.unknown(incoming.pdu.prev_events, pending)).length === 0) return;
    const fetched = await source.missingEvents(room.roomId, room.head.extremities, [incoming.eventId], MISSING_EVENTS_LIMIT);
    const pulled = new Set(fetched.map((event) => event.eventId));
    for (const event of [...fetched].sort((a, b) => a.pdu.depth - b.pdu.depth || (a.eventId < b.eventId ? -1 : 1))) {
      if (event.eventId === incoming.eventId || pending.has(event.eventId) || (await this.isStored(event.eventId))) continue;
      await this.admit(room, version, event, batch, source, { outlier: false, pulled });
    }
  }

  /**
   * The events among `wanted` we lack, from the sender: one by one when few, else in one /state
   * answer (the state before `at`) plus the few it does not hold.
   */
  private async fetchEvents(roomId: string, wanted: readonly string[], at: string, batch: Batch, source: GatheredAnswers): Promise<VerifiedPdu[]> {
    const missingIds = await this.unknown(wanted, batch.pending);
    if (missingIds.length <= FETCH_ONE_BY_ONE_LIMIT) return source.events(roomId, missingIds);
    const missing = new Set(missingIds);
    const bulk = (await source.stateBefore(roomId, at)).filter((event) => missing.has(event.eventId));
    // The few the bulk answer lacks are asked one by one once it has come, not before.
    if (!source.stateAnswered(at)) return bulk;
    const found = new Set(bulk.map((event) => event.eventId));
    return [...bulk, ...(await source.events(roomId, missingIds.filter((id) => !found.has(id)).slice(0, FETCH_ONE_BY_ONE_LIMIT)))];
  }

  /**
   * The state after a prev we hold without state of its own (an outlier, or history from before
   * a join): the state before it as its sender says, fetched and stored as outliers, plus itself.
   */
  private async stateAfterStateless(room: RoomSnapshot, version: RoomVersion, prev: StoredEvent, batch: Batch, source: GatheredAnswers): Promise<StateMap | undefined> {
    const { stateIds, authChainIds } = await source.stateIdsBefore(room.roomId, prev.eventId);
    if (stateIds.length === 0) return undefined;
    const events = await this.fetchEvents(room.roomId, [...new Set([...stateIds, ...authChainIds])], prev.eventId, batch, source);
    for (const event of events.sort((a, b) => a.pdu.depth - b.pdu.depth)) {
      if (!batch.pending.has(event.eventId)) await this.admit(room, version, event, batch, source, { outlier: true });
    }
    // A state with holes is no state: an event is never placed on part of it.
    if ((await this.unknown(stateIds, batch.pending)).length > 0) return undefined;
    const state = new Map<string, string>();
    for (const event of await this.eventsOfIds(stateIds, batch.pending)) if (event.stateKey !== undefined && event.rejected === undefined) state.set(stateKeyOf(event.type, event.stateKey), event.eventId);
    if (prev.stateKey !== undefined && prev.rejected === undefined) state.set(stateKeyOf(prev.type, prev.stateKey), prev.eventId);
    return state;
  }

  /**
   * The state after a prev we lack (a gap below a pulled event), as its sender says: the state
   * before it (state_ids, its events fetched and stored as outliers), plus itself when it is a
   * state event (then stored as an outlier too, for the state to name; a message is left for
   * /backfill). Undefined when the sender cannot say.
   */
  private async stateAfterMissing(room: RoomSnapshot, version: RoomVersion, prevId: string, batch: Batch, source: GatheredAnswers): Promise<StateMap | undefined> {
    const { stateIds, authChainIds } = await source.stateIdsBefore(room.roomId, prevId);
    if (stateIds.length === 0) return undefined;
    const events = await this.fetchEvents(room.roomId, [...new Set([prevId, ...stateIds, ...authChainIds])], prevId, batch, source);
    const prev = events.find((event) => event.eventId === prevId);
    if (!prev) return undefined;
    for (const event of events.sort((a, b) => a.pdu.depth - b.pdu.depth)) {
      if (event.eventId === prevId && event.pdu.state_key === undefined) continue;
      if (!batch.pending.has(event.eventId) && !(await this.isStored(event.eventId))) await this.admit(room, version, event, batch, source, { outlier: true });
    }
    // A state with holes is no state: an event is never placed on part of it.
    if ((await this.unknown(stateIds, batch.pending)).length > 0) return undefined;
    if (prev.pdu.state_key !== undefined && !batch.pending.has(prevId) && !(await this.isStored(prevId))) return undefined;
    const state = new Map<string, string>();
    for (const event of await this.eventsOfIds(stateIds, batch.pending)) if (event.stateKey !== undefined && event.rejected === undefined) state.set(stateKeyOf(event.type, event.stateKey), event.eventId);
    const stored = batch.pending.get(prevId)?.event;
    if (stored && stored.stateKey !== undefined && stored.rejected === undefined) state.set(stateKeyOf(stored.type, stored.stateKey), stored.eventId);
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
    source: GatheredAnswers,
    options: AdmitOptions,
  ): Promise<string | undefined> {
    const { pending, order } = batch;
    const { pdu, eventId } = incoming;
    // v1/v2: two rooms may be admitting events of one id at once; the first keeps it (events.event_id is unique).
    if (version.eventFormat === 'v1' && !this.claim(room.roomId, eventId)) return `its event_id ${eventId.slice(0, 100)} names an event of another room`;
    const stateless = options.outlier || options.history === true;
    const signed = { isSignedBy: (server: string) => incoming.signers === undefined || incoming.signers.has(server) };
    // Step 4: its auth events, fetched when we lack them, must allow it. One that cannot be had
    // leaves the event unjudged: it is not stored (nor counted against anyone's disk).
    const authEvents = await this.authEventsOf(version, incoming, batch, source, room);
    if (authEvents.length < new Set(pdu.auth_events).size) return 'its auth events could not be fetched from the sender';
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

    // A redaction naming an event we hold in another room is no redaction of this room: rejected
    // (stored, never shown), as Synapse ignores it. (Its target is never touched: see redactionsOf.)
    if (rejected === undefined && pdu.type === 'm.room.redaction') {
      const targetId = typeof pdu.redacts === 'string' ? pdu.redacts : typeof pdu.content.redacts === 'string' ? pdu.content.redacts : undefined;
      const target = targetId === undefined ? undefined : (pending.get(targetId)?.event ?? (await this.graph.event(targetId)));
      if (target && target.roomId !== room.roomId) rejected = 'it redacts an event of another room';
    }

    // An event built on another room's events would carry that room's state into this one.
    if (rejected === undefined && !stateless && (await this.namesOtherRoom(pdu.prev_events, room.roomId, pending))) rejected = 'its prev_events name an event of another room';

    // Step 5: the state before it (outliers and history have none here: their auth events stand in).
    const before = stateless ? { state: new Map<string, string>(), group: undefined, gapPrevs: [] } : await this.stateBefore(room, version, pdu, batch, source, options);
    if (!before) return 'the state before it could not be fetched from the sender';
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
      gapBefore: before.gapPrevs.length > 0,
      backfilledAt: rejected === undefined ? options.backfilledAt : undefined,
    };
    if (event.gapBefore && rejected === undefined) for (const prev of before.gapPrevs) batch.gaps.push({ eventId: prev, childId: eventId, childDepth: pdu.depth });
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
      const made = await this.stateGroups.prepare(room.roomId, stateAfter, base);
      batch.groups.push(made.row);
      group = made;
    }
    event.stateGroup = group.groupId;
    pending.set(eventId, { event, stateAfter, group, stateless: false });
    order.push(event);
    if (rejected !== undefined) return rejected;
    return softFailed ? 'soft failed: not allowed by the current state of the room' : undefined;
  }

  /** The event's auth events, from the batch, the store, or the sender (admitted as outliers). */
  private async authEventsOf(version: RoomVersion, incoming: VerifiedPdu, batch: Batch, source: GatheredAnswers, room: RoomSnapshot): Promise<StoredEvent[]> {
    const { pending } = batch;
    const { pdu } = incoming;
    const missing = await this.unknown(pdu.auth_events, pending);
    if (missing.length > 0) {
      const fetched = await this.fetchAuthChain(room.roomId, incoming.eventId, missing, pending, source);
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

  /**
   * An event's auth events we lack, and theirs, oldest first: its whole auth chain in one answer
   * (/event_auth), then what that lacked one by one, at most MAX_AUTH_FETCH in all.
   */
  private async fetchAuthChain(roomId: string, eventId: string, eventIds: string[], pending: Map<string, Pending>, source: GatheredAnswers): Promise<VerifiedPdu[]> {
    const chain = await source.authChain(roomId, eventId);
    if (!source.authChainAnswered(eventId)) return [];
    const collected = new Map<string, VerifiedPdu>();
    for (const event of chain.slice(0, MAX_AUTH_FETCH)) collected.set(event.eventId, event);
    const lacking = (ids: Iterable<string>) => [...ids].filter((id) => !collected.has(id));
    let wanted = await this.unknown(lacking(eventIds), pending);
    for (const event of collected.values()) wanted.push(...(await this.unknown(lacking(event.pdu.auth_events), pending)));
    wanted = [...new Set(wanted)];
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

  /**
   * The state before an event: as given (a join), one prev's state, or the resolution of several.
   * A prev we lack sits on a gap: for a pulled event its state is asked of the sender and the prev
   * is named in `gapPrevs`; otherwise it is passed over. Undefined when a gap's state cannot be had.
   */
  private async stateBefore(
    room: RoomSnapshot,
    version: RoomVersion,
    pdu: Pdu,
    batch: Batch,
    source: GatheredAnswers,
    options: AdmitOptions,
  ): Promise<{ state: StateMap; group: { groupId: number; deltaDepth: number } | undefined; gapPrevs: string[] } | undefined> {
    const { pending } = batch;
    const gapPrevs: string[] = [];
    if (options.knownStateBefore) {
      const events = await this.eventsOfIds(options.knownStateBefore, pending);
      const state = new Map<string, string>();
      for (const event of events) if (event.stateKey !== undefined) state.set(stateKeyOf(event.type, event.stateKey), event.eventId);
      return { state, group: undefined, gapPrevs };
    }
    const afters: Array<{ state: StateMap; group: { groupId: number; deltaDepth: number } | undefined }> = [];
    for (const prevId of pdu.prev_events) {
      const inBatch = pending.get(prevId);
      if (inBatch && !inBatch.stateless) {
        afters.push({ state: inBatch.stateAfter, group: inBatch.group });
        continue;
      }
      const prev = inBatch?.event ?? (await this.graph.event(prevId));
      // Another room's event has no state of this room (its event is rejected: see admit).
      if (prev && prev.roomId !== room.roomId) continue;
      if (prev?.stateGroup !== undefined) {
        afters.push({ state: await this.stateGroups.stateOf(prev.stateGroup), group: { groupId: prev.stateGroup, deltaDepth: await this.stateGroups.deltaDepthOf(prev.stateGroup) } });
      } else if (prev) {
        const state = await this.stateAfterStateless(room, version, prev, batch, source);
        if (!state) return undefined;
        afters.push({ state, group: undefined });
      } else if (options.pulled) {
        // Another event of the same answer, not placed (yet): this one waits for it, no gap.
        if (options.pulled.has(prevId)) return undefined;
        const state = await this.stateAfterMissing(room, version, prevId, batch, source);
        if (!state) return undefined;
        afters.push({ state, group: undefined });
        gapPrevs.push(prevId);
      }
    }
    // A create event, or an event whose prevs we could not get: nothing (it fails auth if it needs state).
    if (afters.length === 0) return { state: new Map(), group: undefined, gapPrevs };
    if (afters.length === 1) return { ...afters[0]!, gapPrevs };
    const resolved = await this.graph.resolve(version, room.roomId, afters.map((after) => after.state), this.lookupPending(pending));
    return { state: resolved, group: undefined, gapPrevs };
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
  private async write(room: RoomSnapshot, batch: Batch, fanOut: boolean): Promise<void> {
    const { order, pending } = batch;
    for (let attempt = 0; ; attempt++) {
      const expected = [...room.head.extremities];
      const { head, current, group } = await this.nextHead(room, order, pending);
      const stateGroups = group ? [...batch.groups, group] : batch.groups;
      const changes = await this.stateChanges(room, current, pending);
      const redactions = await this.redactionsOf(room, order, pending);
      try {
        await this.writer.submit({
          roomId: room.roomId,
          fanOut,
          prepare: () => [],
          remote: (latest): RemoteBatch => {
            if (!sameList(latest.head.extremities, expected)) throw new HeadMoved('the room moved on while the batch was checked');
            return {
              events: order,
              currentState: changes.current,
              removedState: changes.removed,
              head,
              redactions,
              stateReset: isStateReset(order, changes, pending),
              stateGroups,
              backwardExtremities: batch.gaps,
            };
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

  private async nextHead(room: RoomSnapshot, order: StoredEvent[], pending: Map<string, Pending>): Promise<{ head: RoomHead; current: StateMap | undefined; group?: NewStateGroup }> {
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
    let made: NewStateGroup | undefined;
    if (states.length === 1) {
      current = states[0]!;
    } else {
      current = await this.graph.resolve(room.version, room.roomId, states, this.lookupPending(pending));
      const prepared = await this.stateGroups.prepare(room.roomId, current, group ? { ...group, state: states[states.length - 1]! } : undefined);
      group = prepared;
      made = prepared.row;
    }
    return { head: { extremities: ids, depth, stateGroup: group?.groupId, stateGroupDepth: group?.deltaDepth ?? 0 }, current, ...(made ? { group: made } : {}) };
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
      if (!redactionApplies(levels, room.version, event, target)) continue;
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
    // v1/v2 events carry their id; the redaction rule of those versions reads it.
    ...(typeof pdu.event_id === 'string' ? { event_id: pdu.event_id } : {}),
    ...(redactsOf(pdu) !== undefined ? { redacts: redactsOf(pdu) } : {}),
  };
}

function redactsOf(pdu: Pdu): string | undefined {
  const inContent = pdu.content.redacts;
  return typeof pdu.redacts === 'string' ? pdu.redacts : typeof inContent === 'string' ? inContent : undefined;
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

