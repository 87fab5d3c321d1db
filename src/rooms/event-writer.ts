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
import { canonicalJson, NotCanonicalJsonError } from '../core/canonical-json.js';
import type { Clock } from '../core/clock.js';
import { MatrixError } from '../core/errors.js';
import type { Signer } from '../core/signed-json.js';
import type { NewRoomRow, Storage, Stores } from '../storage/index.js';
import type { Notifier } from '../sync/notifier.js';
import { StreamEffects, type StreamCounter } from '../sync/stream.js';
import { authEventKeys, checkEventAuth, type ProposedEvent } from './auth-rules.js';
import { assertEventSize, eventFromRow, MAX_EVENT_BYTES, rowFromEvent, type JsonObject, type StoredEvent } from './events.js';
import { finishPdu, nextDepth, type Pdu, type UnsignedPdu } from './pdu.js';
import type { RoomCache } from './room-cache.js';
import { RoomSnapshot, type RoomHead } from './room-snapshot.js';
import type { RoomVersion } from './room-versions.js';
import { MAX_STATE_GROUP_DELTAS, type NewStateGroup, type StateGroupIds } from './state-groups.js';
import { rowsByTxn, txnKeyText } from './txn-lookups.js';

export interface EventDraft {
  type: string;
  stateKey?: string | undefined;
  sender: string;
  content: JsonObject;
  /** For m.room.redaction: the target and the content it keeps. */
  redaction?: { eventId: string; redactedContent: JsonObject } | undefined;
  /** Set for requests with a transaction id; `scope` names the endpoint and its path (room, type). */
  txn?: { deviceId: string; scope: string; txnId: string } | undefined;
  /** An event already finished (a room's create event, whose id a v12 room id is made of). */
  prebuilt?: { pdu: Pdu; eventId: string } | undefined;
}

export interface WriteRequest {
  roomId: string;
  /** Set when the request creates the room; its events start from empty state. */
  newRoom?: NewRoomRow | undefined;
  /**
   * The request's transaction id, when it has one: another process may have written it since it
   * was looked up (the same retry sent to two processes at once), and its event is the answer.
   */
  txn?: { sender: string; deviceId: string; scope: string; txnId: string; checkpoint: number } | undefined;
  /**
   * Runs at write time against the room's latest state and returns the events to write; throws a
   * MatrixError to refuse. Every draft is also checked by the room auth rules.
   */
  prepare(room: RoomSnapshot): EventDraft[];
  /**
   * Instead of `prepare`: events that came from other servers, checked already (signatures,
   * hashes, auth) and given their state. Runs at write time against the room's latest state,
   * and throws (HeadMoved) when what it was computed against has changed.
   */
  remote?: ((room: RoomSnapshot) => RemoteBatch) | undefined;
  /**
   * Whether this server sends the events on to the other servers in the room: always for local
   * events; for remote ones only when they came to us to be passed on (send_join, send_leave).
   */
  fanOut?: boolean | undefined;
}

/** Events from other servers, ready to store, and what they change in the room. */
export interface RemoteBatch {
  /**
   * The events, oldest first, with everything but their positions. Outliers, rejected and soft
   * failed events get positions below zero: they are stored, never shown.
   */
  events: StoredEvent[];
  /** Events that become the room's current state for their keys. */
  currentState: StoredEvent[];
  /** Keys the current state loses (state resolution can drop one). */
  removedState: Array<[string, string]>;
  /** The room's new head, when the batch moves it. */
  head?: RoomHead | undefined;
  /** Redactions among the events that take effect (their targets are stored). */
  redactions?: Array<{ eventId: string; redactedContent: JsonObject; redactedBy: string }> | undefined;
  /**
   * The current state changes other than by the batch's own shown state events (resolution
   * brought back an older event, or one known only as an outlier, or dropped a key): syncs from
   * before this batch must get the room's whole state again.
   */
  stateReset?: boolean | undefined;
  /** State groups the batch's events use, written before them. */
  stateGroups?: NewStateGroup[] | undefined;
  /**
   * Events missing below gaps the batch opens (see migration 0025), with the event of the batch
   * that names each; the batch's events close theirs.
   */
  backwardExtremities?: Array<{ eventId: string; childId: string; childDepth: number; childStream?: number; childVisibility?: string }> | undefined;
  /** Events held as outliers that become backfilled history. */
  backfilledOutliers?: Array<{ eventId: string; historyVisibility: string; visibleAt: number }> | undefined;
}

/** What a write hook learns of each request: its events, the room after them, whose they are to send. */
export type WriteHook = (stores: Stores, events: readonly StoredEvent[], room: RoomSnapshot, options: { fanOut: boolean }) => Promise<void>;

/**
 * Whether a write hook has anything to write for these events (without writing it): a batch that
 * no hook writes for can go as one statement, without a transaction (PostgreSQL).
 */
export type WriteHookProbe = (events: readonly StoredEvent[], room: RoomSnapshot, options: { fanOut: boolean }) => boolean;

/** The room's head moved between computing a remote batch and writing it: compute it again. */
export class HeadMoved extends Error {
  override name = 'HeadMoved';
}

/**
 * Positions below zero, for events that are stored but not part of any timeline. Processes sharing
 * a database read the lowest one taken again (`refresh`, under the stream's lock) before taking
 * more, when another process has committed since the last read.
 */
export class OutlierPositions {
  private readAtForeignCommits = 0;

  constructor(
    private last: number,
    private readonly lowestOnDisk?: () => Promise<number>,
  ) {}

  next(): number {
    return --this.last;
  }

  async refresh(foreignCommits: number): Promise<void> {
    if (!this.lowestOnDisk || foreignCommits === this.readAtForeignCommits) return;
    this.readAtForeignCommits = foreignCommits;
    this.last = Math.min(this.last, await this.lowestOnDisk());
  }
}

interface Pending {
  request: WriteRequest;
  resolve(events: StoredEvent[]): void;
  reject(error: unknown): void;
  /** Resolved or rejected already (a batch that is written again skips it). */
  settled: boolean;
  /** Built once without the stream's lock and not written (the head moved, or it was refused): built again under it (`StreamCounter.unlocked`). */
  locked?: boolean;
}

/**
 * What becomes of a request its preparation refuses: answered with the error, or (built without
 * the stream's lock, against caches that may be behind) left unsettled to be built again under it.
 */
type Refuse = (pending: Pending, error: unknown) => void;

const answerRefusal: Refuse = (pending, error) => pending.reject(error);

interface Prepared {
  pending: Pending;
  room: RoomSnapshot;
  events: StoredEvent[];
  drafts: EventDraft[];
  /** State groups the events make, written before them. */
  stateGroups: NewStateGroup[];
  /** Remote batches: what becomes (or stops being) current state, written after the events. */
  currentState?: StoredEvent[];
  removedState?: Array<[string, string]>;
  redactions?: RemoteBatch['redactions'];
  /** The position of a state reset the batch makes. */
  stateReset?: number | undefined;
  backwardExtremities?: RemoteBatch['backwardExtremities'];
  backfilledOutliers?: RemoteBatch['backfilledOutliers'];
}



export class EventWriter {
  private queue: Pending[] = [];
  private flushing = false;
  /** Other processes' commits applied when the last batch was looked at (`mayWriteUnlocked`). */
  private foreignCommitsAtLastBatch = 0;
  private scheduled = false;

  constructor(
    private readonly storage: Storage,
    private readonly cache: RoomCache,
    private readonly stream: StreamCounter,
    private readonly notifier: Notifier,
    private readonly clock: Clock,
    private readonly signer: Signer,
    private readonly stateGroupIds: StateGroupIds,
    private readonly outlierPositions: OutlierPositions,
  ) {}

  /** Called after every commit with the events it wrote (the federation sender wakes its queues). */
  private readonly commitListeners: Array<(events: readonly StoredEvent[], room: RoomSnapshot) => void> = [];
  /**
   * Called inside the transaction for every request, after its events are written: what must be
   * durable with them (the federation outbox) is written here, in the same commit.
   */
  private readonly writeHooks: Array<{ write: WriteHook; writes: WriteHookProbe }> = [];

  onCommit(listener: (events: readonly StoredEvent[], room: RoomSnapshot) => void): void {
    this.commitListeners.push(listener);
  }

  /** `writes` says whether `hook` would write anything for these events (by default: always). */
  onWrite(hook: WriteHook, writes: WriteHookProbe = () => true): void {
    this.writeHooks.push({ write: hook, writes });
  }

  /** Called after every group commit: how many write requests and events it carried, and how long it took. */
  onFlush(listener: (requests: number, events: number, ms: number) => void): void {
    this.flushListeners.push(listener);
  }

  private readonly flushListeners: Array<(requests: number, events: number, ms: number) => void> = [];

  /**
   * A room's create event, finished before the room exists: a v12 room's id is made from it, and
   * every other version's room id goes into it. Submit it as the first draft's `prebuilt`.
   */
  buildCreateEvent(version: RoomVersion, roomId: string | undefined, sender: string, content: JsonObject, ts = this.clock.now()): { pdu: Pdu; eventId: string } {
    const draft: UnsignedPdu = { sender, type: 'm.room.create', state_key: '', content, origin_server_ts: ts, depth: 1, prev_events: [], auth_events: [] };
    if (!version.roomIdFromCreateEvent) {
      if (roomId === undefined) throw new Error('a room id is needed for this room version');
      draft.room_id = roomId;
    }
    return this.finish(draft, version);
  }

  private finish(draft: UnsignedPdu, version: RoomVersion): { pdu: Pdu; eventId: string } {
    try {
      return finishPdu(draft, version, this.signer);
    } catch (err) {
      if (err instanceof NotCanonicalJsonError) throw new MatrixError('M_BAD_JSON', `The event is not canonical JSON: ${err.message}`);
      throw err;
    }
  }

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
      const pending: Pending = {
        request,
        settled: false,
        resolve: (events) => {
          pending.settled = true;
          resolve(events);
        },
        reject: (error) => {
          pending.settled = true;
          reject(error);
        },
      };
      this.queue.push(pending);
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
    const started = performance.now();
    const prepared: Prepared[] = [];
    const touchedRooms = new Set<string>();
    let maxStream = 0;
    let unlocked = false;
    try {
      if (this.stream.shared && this.storage.rooms.isPostgres && this.mayWriteUnlocked(batch)) {
        unlocked = true;
        await this.stream.unlocked((expectedHead) => this.writeUnlocked(batch, expectedHead, prepared, touchedRooms));
      } else if (this.stream.shared || !this.storage.rooms.isPostgres) {
        // In stream order with the other writers (StreamCounter.write).
        await this.stream.write(this.storage, async (stores, effects) => {
          await this.prepareBatch(batch, stores, prepared, touchedRooms);
          await this.writeBatch(stores, prepared);
          describeEffects(prepared, effects);
        });
      } else {
        // PostgreSQL, one process: a batch of messages is one statement (the events, the rooms'
        // heads, their search rows), atomic and durable on its own, so it goes without BEGIN and
        // COMMIT: one round trip instead of three. Anything more opens a transaction.
        await this.stream.serialized(async () => {
          await this.prepareBatch(batch, undefined, prepared, touchedRooms);
          const rows = prepared.flatMap((item) => item.events.map(rowFromEvent));
          const heads = headsOf(prepared);
          if (this.onlyEvents(prepared) && this.storage.rooms.insertsInOneStatement(rows, heads)) {
            await this.storage.rooms.insertEvents(rows, heads);
          } else {
            await this.storage.transaction((stores) => this.writeBatch(stores, prepared, rows, heads));
          }
        });
      }
      for (const item of prepared) {
        for (const event of item.events) maxStream = Math.max(maxStream, event.stream);
        if (item.stateReset !== undefined) maxStream = Math.max(maxStream, item.stateReset);
      }
    } catch (err) {
      this.forgetPrepared(prepared, touchedRooms);
      if (unlocked && err instanceof HeadMoved) {
        // Another process wrote first: nothing of this batch was written. Its requests are built
        // again against what that process did (the rooms are read again), under the lock.
        const again = batch.filter((pending) => !pending.settled);
        for (const pending of again) pending.locked = true;
        this.queue.unshift(...again);
        this.flushing = false;
        this.schedule();
        return;
      }
      // A retry of a request that was answered already fails the batch at its insert (the
      // transaction id is unique): nothing looks it up before. Its first event is its answer, and
      // the rest of the batch is written again (the rooms are read again from what is committed).
      const again = await this.answerRetries(batch).catch(() => undefined);
      if (again) {
        // Read again here, outside any transaction: on SQLite the batch's transaction holds the
        // one connection, and a room not in memory could not be read from inside it.
        for (const pending of again) if (!pending.request.newRoom) await this.cache.room(pending.request.roomId).catch(() => undefined);
        this.queue.unshift(...again);
        this.flushing = false;
        this.schedule();
        return;
      }
      // Every request of the batch is settled, including those the failure came before (a
      // rejection after a refusal is a no-op): a caller must never wait forever.
      for (const pending of batch) pending.reject(err);
      this.flushing = false;
      if (this.queue.length > 0) this.schedule();
      return;
    }
    this.stream.commit(maxStream);
    if (this.flushListeners.length > 0) {
      let events = 0;
      for (const item of prepared) events += item.events.length;
      for (const listener of this.flushListeners) listener(batch.length, events, performance.now() - started);
    }
    for (const roomId of touchedRooms) this.cache.reweigh(roomId);
    const wake = new Set<string>();
    for (const item of prepared) {
      if (item.pending.request.newRoom) this.cache.addRoom(item.room);
      for (const event of item.currentState ?? item.events) {
        if (event.type === 'm.room.member' && event.stateKey !== undefined && event.rejected === undefined) {
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
      for (const userId of this.notifier.peekersOf(item.room.roomId)) wake.add(userId);
    }
    for (const item of prepared) item.pending.resolve(item.events);
    // Refused without the lock: judged again under it (`tryUnlocked`).
    if (unlocked) this.queue.unshift(...batch.filter((pending) => !pending.settled));
    for (const item of prepared) {
      if (item.events.length === 0) continue;
      for (const listener of this.commitListeners) listener(item.events, item.room);
    }
    // Senders get their answers first; the syncs this wakes are built in the next turn. No wake-up
    // is lost in between: a sync that looks now already sees the commit.
    setImmediate(() => this.notifier.notify(wake));
    this.flushing = false;
    if (this.queue.length > 0) this.schedule();
  }

  /**
   * Whether the batch may be built without the stream's lock (PostgreSQL with the stream shared):
   * no other process has committed since the last batch, and the batch holds local requests to
   * existing rooms, none of whose transaction ids another process may have written since it
   * started (that look-up needs the lock), none built once already on a moved head.
   */
  private mayWriteUnlocked(batch: readonly Pending[]): boolean {
    const foreignCommits = this.stream.shared?.foreignCommits ?? 0;
    // Other processes writing now would move the head under this batch, which would then be built
    // twice: while they write (their commits arrived since the last batch), take the lock at once.
    const othersQuiet = foreignCommits === this.foreignCommitsAtLastBatch;
    this.foreignCommitsAtLastBatch = foreignCommits;
    if (!othersQuiet) return false;
    for (const { request, locked } of batch) {
      if (locked || request.newRoom || request.remote) return false;
      if (request.txn && request.txn.checkpoint < foreignCommits) return false;
    }
    return true;
  }

  /**
   * Builds the batch against the head this process has applied (`expectedHead`) and writes it only
   * if that is still the head: a batch of messages as one statement, anything else in a
   * transaction that checks the head under the lock. Throws HeadMoved if it was not. Returns the
   * position the head moved to (0 when nothing was built).
   */
  private async writeUnlocked(batch: readonly Pending[], expectedHead: number, prepared: Prepared[], touchedRooms: Set<string>): Promise<number> {
    try {
      return await this.tryUnlocked(batch, expectedHead, prepared, touchedRooms);
    } catch (err) {
      // Dropped before the stream lets other processes' commits be read again (`unlocked`): the
      // snapshots hold this batch's events, which may never commit.
      this.forgetPrepared(prepared, touchedRooms);
      throw err;
    }
  }

  private async tryUnlocked(batch: readonly Pending[], expectedHead: number, prepared: Prepared[], touchedRooms: Set<string>): Promise<number> {
    const shared = this.stream.shared!;
    const before = this.stream.taken;
    // A refusal is judged against what this process has applied, which may be behind (a join
    // made through another process a moment ago): a refused request is not answered here but
    // written again under the lock, where the caches are caught up first.
    // Left unsettled, they go back to the queue after this batch (`flush`).
    await this.prepareBatch(batch, undefined, prepared, touchedRooms, (pending) => (pending.locked = true));
    const position = this.stream.taken;
    if (position === before) return 0;
    const rows = prepared.flatMap((item) => item.events.map(rowFromEvent));
    const heads = headsOf(prepared);
    const effects = new StreamEffects();
    describeEffects(prepared, effects);
    if (this.onlyEvents(prepared) && this.storage.rooms.insertsInOneStatement(rows, heads)) {
      const move = { expected: expectedHead, position, ...shared.notification(position, effects) };
      if (!(await this.storage.rooms.insertEventsMovingHead(rows, heads, move))) throw new HeadMoved();
      return position;
    }
    await this.storage.transaction(async (stores) => {
      if ((await stores.cluster.lockStreamHead()) !== expectedHead) throw new HeadMoved();
      await this.writeBatch(stores, prepared, rows, heads);
      await shared.leave(stores, position, effects);
    });
    return position;
  }

  /** After a failed batch: what its preparation changed in memory goes (read again when needed). */
  private forgetPrepared(prepared: readonly Prepared[], touchedRooms: ReadonlySet<string>): void {
    for (const roomId of touchedRooms) this.cache.forgetRoom(roomId);
    for (const item of prepared) {
      for (const event of item.events) if (event.type === 'm.room.member') this.cache.forgetUser(event.stateKey ?? '');
    }
  }

  /** Checks and builds the batch's events in submission order, each against every earlier one. */
  private async prepareBatch(batch: readonly Pending[], stores: Stores | undefined, prepared: Prepared[], touchedRooms: Set<string>, refuse: Refuse = answerRefusal): Promise<void> {
    // Another process may have written to these rooms since they were loaded (the stream is
    // shared): its changes dropped them from the cache, and they are read again, under the
    // stream's lock, before anything is checked against them.
    for (const pending of batch) {
      if (!pending.request.newRoom && !this.cache.peek(pending.request.roomId)) await this.cache.room(pending.request.roomId);
    }
    const written = this.stream.shared && stores ? await this.writtenElsewhere(stores, batch, this.stream.shared.foreignCommits) : undefined;
    for (const pending of batch) {
      const txn = pending.request.txn;
      const already = txn && written?.get(txnKeyText(txn));
      if (already) {
        pending.resolve([already]);
        continue;
      }
      const result = await this.prepareOne(pending, touchedRooms, refuse);
      if (result) prepared.push(result);
    }
  }

  /** Writes a prepared batch inside its transaction. */
  private async writeBatch(stores: Stores, prepared: readonly Prepared[], rows = prepared.flatMap((item) => item.events.map(rowFromEvent)), heads = headsOf(prepared)): Promise<void> {
    // New rooms' rows first; then every event of the batch and the rooms' heads in one
    // statement (on PostgreSQL a statement is a round trip).
    for (const item of prepared) if (item.pending.request.newRoom) await stores.rooms.insertRoom(item.pending.request.newRoom);
    await stores.rooms.insertEvents(rows, heads);
    for (const item of prepared) {
      await this.write(stores, item);
      const fanOut = item.pending.request.fanOut ?? item.pending.request.remote === undefined;
      for (const hook of this.writeHooks) await hook.write(stores, item.events, item.room, { fanOut });
    }
  }

  /**
   * Whether the batch writes nothing but its events and the rooms' heads: local messages (no
   * state, no redaction, no new room) that no write hook has anything to add to.
   */
  private onlyEvents(prepared: readonly Prepared[]): boolean {
    for (const item of prepared) {
      const { request } = item.pending;
      if (request.newRoom || request.remote || item.stateGroups.length > 0 || item.currentState) return false;
      for (const [index, event] of item.events.entries()) {
        if (event.stateKey !== undefined || item.drafts[index]?.redaction) return false;
      }
      const fanOut = request.fanOut ?? true;
      for (const hook of this.writeHooks) if (hook.writes(item.events, item.room, { fanOut })) return false;
    }
    return true;
  }

  /**
   * Taken when a request with a transaction id starts: the writer looks up the transaction ids
   * that another process may have committed since (`writtenElsewhere`). One committed before is
   * found by the insert (the id is unique) and answered by `answerRetries`.
   */
  retryCheckpoint(): number {
    return this.stream.shared?.foreignCommits ?? 0;
  }

  /**
   * After a failed batch: answers the requests whose transaction id is taken already with the
   * event it was first written with, and returns the requests to write again; undefined when no
   * transaction id of the batch was taken (the failure was something else).
   */
  private async answerRetries(batch: readonly Pending[]): Promise<Pending[] | undefined> {
    const txns = batch.flatMap((pending) => (pending.request.txn && !pending.settled ? [pending.request.txn] : []));
    const found = await rowsByTxn(this.storage.rooms, txns);
    if (found.size === 0) return undefined;
    const again: Pending[] = [];
    for (const pending of batch) {
      if (pending.settled) continue;
      const txn = pending.request.txn;
      const first = txn && found.get(txnKeyText(txn));
      if (first) pending.resolve([eventFromRow(first)]);
      else again.push(pending);
    }
    return again;
  }

  /** The batch's transaction ids that another process wrote since they were looked up, with their events. */
  private async writtenElsewhere(stores: Stores, batch: readonly Pending[], foreignCommits: number): Promise<Map<string, StoredEvent>> {
    const txns = batch.flatMap((pending) => (pending.request.txn && pending.request.txn.checkpoint < foreignCommits ? [pending.request.txn] : []));
    const found = new Map<string, StoredEvent>();
    for (const [key, row] of await rowsByTxn(stores.rooms, txns)) found.set(key, eventFromRow(row));
    return found;
  }

  /** Checks and builds one request's events, applying them to the room's snapshot. */
  private async prepareOne(pending: Pending, touchedRooms: Set<string>, refuse: Refuse): Promise<Prepared | undefined> {
    const { request } = pending;
    const room = request.newRoom
      ? new RoomSnapshot(request.roomId, request.newRoom.room_version, request.newRoom.creator)
      : this.cache.peek(request.roomId);
    const stateGroups: NewStateGroup[] = [];
    if (!room) {
      refuse(pending, new MatrixError('M_FORBIDDEN', `Unknown room ${request.roomId}`, { status: 403 }));
      return undefined;
    }
    if (request.remote) {
      await this.outlierPositions.refresh(this.stream.shared?.foreignCommits ?? 0);
      return this.prepareRemote(pending, room, request.remote, touchedRooms, refuse);
    }
    let drafts: EventDraft[];
    try {
      drafts = request.prepare(room);
      // Each state event makes a state group. (Only processes sharing the database wait here.)
      await this.stateGroupIds.ensure(drafts.filter((draft) => draft.stateKey !== undefined).length);
    } catch (err) {
      refuse(pending, err);
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
        this.advanceHead(working, event, stateGroups);
        if (draft.redaction) working.applyRedaction(draft.redaction.eventId, draft.redaction.redactedContent, event.eventId);
        events.push(event);
      } catch (err) {
        refuse(pending, err);
        return undefined;
      }
    }
    if (working !== room) {
      for (const [index, event] of events.entries()) {
        room.apply(event);
        const redaction = drafts[index]?.redaction;
        if (redaction) room.applyRedaction(redaction.eventId, redaction.redactedContent, event.eventId);
      }
      room.head = working.head;
    }
    for (const event of events) room.remember(event);
    if (!request.newRoom && events.length > 0) touchedRooms.add(room.roomId);
    return { pending, room, events, drafts, stateGroups };
  }

  /** Takes positions for a remote batch and applies it to the room's snapshot. */
  private prepareRemote(pending: Pending, room: RoomSnapshot, remote: (room: RoomSnapshot) => RemoteBatch, touchedRooms: Set<string>, refuse: Refuse): Prepared | undefined {
    let batch: RemoteBatch;
    try {
      batch = remote(room);
    } catch (err) {
      refuse(pending, err);
      return undefined;
    }
    let newest = 0;
    for (const event of batch.events) {
      // Backfilled history comes after syncs have moved past its place: below zero, like Synapse's.
      const shown = !event.outlier && event.rejected === undefined && !event.softFailed && event.backfilledAt === undefined;
      event.stream = shown ? this.stream.next() : this.outlierPositions.next();
      if (shown) newest = event.stream;
    }
    if (batch.stateReset) {
      // A position of its own when nothing in the batch is shown, so syncs are woken past it.
      room.stateResetStream = newest > 0 ? newest : this.stream.next();
      if (room.stateResetStream > room.latestStream) room.latestStream = room.stateResetStream;
    }
    for (const event of batch.currentState) room.apply(event);
    for (const [type, stateKey] of batch.removedState) room.removeState(type, stateKey);
    for (const redaction of batch.redactions ?? []) room.applyRedaction(redaction.eventId, redaction.redactedContent, redaction.redactedBy);
    if (batch.head) room.head = batch.head;
    for (const event of batch.events) {
      if (event.stream > 0) {
        if (event.stream > room.latestStream) room.latestStream = event.stream;
        room.remember(event);
      }
    }
    if (!pending.request.newRoom && batch.events.length > 0) touchedRooms.add(room.roomId);
    return {
      pending,
      room,
      events: batch.events,
      drafts: [],
      stateGroups: batch.stateGroups ?? [],
      currentState: batch.currentState,
      removedState: batch.removedState,
      redactions: batch.redactions,
      stateReset: batch.stateReset ? room.stateResetStream : undefined,
      backwardExtremities: batch.backwardExtremities,
      backfilledOutliers: batch.backfilledOutliers,
    };
  }

  /**
   * An event built on the room's current head and checked by the auth rules, but not written:
   * an invite of a user of another server, which that server countersigns before it is written
   * (as the draft's `prebuilt`).
   */
  async preview(roomId: string, draft: EventDraft): Promise<{ pdu: Pdu; eventId: string }> {
    const room = await this.cache.room(roomId);
    if (!room) throw new MatrixError('M_FORBIDDEN', `Unknown room ${roomId}`, { status: 403 });
    return this.buildPdu(room, draft, this.clock.now()).finished;
  }

  /** The PDU of a local draft (or its prebuilt one), after the auth rules allowed it. */
  private buildPdu(room: RoomSnapshot, draft: EventDraft, now: number): { finished: { pdu: Pdu; eventId: string }; content: JsonObject } {
    const version = room.version;
    const isCreate = draft.type === 'm.room.create';
    const prevEvents = draft.prebuilt ? draft.prebuilt.pdu.prev_events : isCreate ? [] : [...room.head.extremities];
    // v11 moved `redacts` into the content, where it is hashed and signed with the rest.
    const content = draft.redaction && version.v11 ? { ...draft.content, redacts: draft.redaction.eventId } : draft.content;
    const proposed: ProposedEvent = {
      type: draft.type,
      ...(draft.stateKey !== undefined ? { state_key: draft.stateKey } : {}),
      sender: draft.sender,
      content,
      prev_events: prevEvents,
      ...(draft.redaction ? { redacts: draft.redaction.eventId } : {}),
    };
    const auth = checkEventAuth(proposed, room.lookup, version, { isSignedBy: (server) => server === this.signer.serverName });
    if (!auth.allowed) throw new MatrixError('M_FORBIDDEN', auth.reason);
    if (draft.prebuilt) return { finished: draft.prebuilt, content: draft.prebuilt.pdu.content };
    const authEvents: string[] = [];
    for (const [type, stateKey] of authEventKeys(proposed, version)) {
      const authEvent = room.get(type, stateKey);
      if (authEvent) authEvents.push(authEvent.eventId);
    }
    const unsignedPdu: UnsignedPdu = {
      room_id: room.roomId,
      sender: draft.sender,
      type: draft.type,
      content,
      origin_server_ts: now,
      depth: isCreate ? 1 : nextDepth(room.head.depth),
      prev_events: prevEvents,
      auth_events: authEvents,
    };
    if (draft.stateKey !== undefined) unsignedPdu.state_key = draft.stateKey;
    if (draft.redaction && !version.v11) unsignedPdu.redacts = draft.redaction.eventId;
    return { finished: this.finish(unsignedPdu, version), content };
  }

  /**
   * Builds one local event as a PDU on top of the room's head: its prev_events are the forward
   * extremities, its auth_events chosen from the current state as the spec selects them, then it
   * passes the auth rules, is hashed and signed, and gets its id (the reference hash).
   */
  private build(room: RoomSnapshot, draft: EventDraft, now: number): StoredEvent {
    const { finished, content } = this.buildPdu(room, draft, now);
    const replaced = draft.stateKey === undefined ? undefined : room.get(draft.type, draft.stateKey);
    const { pdu, eventId } = finished;
    const event: StoredEvent = {
      stream: 0,
      eventId,
      roomId: room.roomId,
      type: draft.type,
      stateKey: draft.stateKey,
      sender: draft.sender,
      originServerTs: pdu.origin_server_ts,
      content,
      replacesState: replaced?.eventId,
      prevContent: replaced?.content,
      prevSender: replaced?.sender,
      redacts: draft.redaction?.eventId,
      redactedBy: undefined,
      historyVisibility: room.historyVisibility(),
      txnDeviceId: draft.txn?.deviceId,
      txnScope: draft.txn?.scope,
      txnId: draft.txn?.txnId,
      depth: pdu.depth,
      prevEvents: pdu.prev_events,
      authEvents: pdu.auth_events,
      pduExtra: extraKeysOf(pdu),
      stateGroup: undefined,
      outlier: false,
      rejected: undefined,
      softFailed: false,
    };
    assertPduSize(pdu, event, assertEventSize(event, now));
    // Taken last, so a refused draft leaves no gap.
    event.stream = this.stream.next();
    return event;
  }

  /**
   * Moves the room's head past a new event: it becomes the only forward extremity, and a state
   * event makes a new state group (a delta of the current one, or a snapshot every
   * MAX_STATE_GROUP_DELTAS). Called after the event is applied to the snapshot.
   */
  private advanceHead(room: RoomSnapshot, event: StoredEvent, stateGroups: NewStateGroup[]): void {
    // A local event builds on every extremity; a prebuilt one (an invite another server signed
    // meanwhile) may build on fewer, and the others stay.
    const prevs = new Set(event.prevEvents ?? []);
    const extremities = [...room.head.extremities.filter((id) => !prevs.has(id)), event.eventId];
    const head: RoomHead = { ...room.head, extremities, depth: Math.max(room.head.depth, event.depth) };
    if (event.stateKey !== undefined) {
      const id = this.stateGroupIds.next();
      const snapshot = head.stateGroup === undefined || head.stateGroupDepth >= MAX_STATE_GROUP_DELTAS;
      const entries: Array<[string, string, string | null]> = snapshot
        ? [...room.stateEvents()].map((state) => [state.type, state.stateKey ?? '', state.eventId])
        : [[event.type, event.stateKey, event.eventId]];
      stateGroups.push({ id, roomId: room.roomId, prevGroup: snapshot ? undefined : head.stateGroup, deltaDepth: snapshot ? 0 : head.stateGroupDepth + 1, entries });
      head.stateGroup = id;
      head.stateGroupDepth = snapshot ? 0 : head.stateGroupDepth + 1;
    }
    event.stateGroup = head.stateGroup;
    room.head = head;
  }

  private async write(stores: Stores, item: Prepared): Promise<void> {
    const { request } = item.pending;
    for (const group of item.stateGroups) await stores.rooms.insertStateGroup(group);
    // The room's row and the events themselves are stored already, the batch's all at once (flush).
    if (item.currentState) {
      for (const event of item.currentState) await this.writeCurrent(stores, event);
      for (const [type, stateKey] of item.removedState ?? []) await stores.rooms.deleteCurrentState(item.room.roomId, type, stateKey);
      for (const redaction of item.redactions ?? []) await stores.rooms.markRedacted(redaction.eventId, JSON.stringify(redaction.redactedContent), redaction.redactedBy);
      if (item.stateReset !== undefined) await stores.rooms.setStateReset(item.room.roomId, item.stateReset);
      await this.writeGaps(stores, item);
      return;
    }
    for (const [index, event] of item.events.entries()) {
      await this.writeCurrent(stores, event);
      const redaction = item.drafts[index]?.redaction;
      if (redaction) await stores.rooms.markRedacted(redaction.eventId, JSON.stringify(redaction.redactedContent), event.eventId);
    }
  }

  /** The gaps a remote batch opens and closes (see migration 0025). */
  private async writeGaps(stores: Stores, item: Prepared): Promise<void> {
    const roomId = item.room.roomId;
    for (const outlier of item.backfilledOutliers ?? []) await stores.rooms.markBackfilled(outlier.eventId, outlier.historyVisibility, outlier.visibleAt);
    // Rejected events close their gaps too: nothing before them is needed through them.
    const filled = item.events.filter((event) => !event.outlier).map((event) => event.eventId);
    filled.push(...(item.backfilledOutliers ?? []).map((outlier) => outlier.eventId));
    if (item.backwardExtremities?.length) {
      // Where the gap's readers stand: the position of the event it lies under (positions are known only now).
      const children = new Map(item.events.map((event) => [event.eventId, event]));
      const extremities = item.backwardExtremities.flatMap((gap) => {
        const child = children.get(gap.childId);
        const childStream = gap.childStream ?? (child ? (child.backfilledAt ?? child.stream) : undefined);
        const childVisibility = gap.childVisibility ?? child?.historyVisibility;
        return childStream === undefined || childVisibility === undefined ? [] : [{ eventId: gap.eventId, childDepth: gap.childDepth, childStream, childVisibility }];
      });
      await stores.rooms.addBackwardExtremities(roomId, extremities);
    }
    if (filled.length > 0) await stores.rooms.removeBackwardExtremities(roomId, filled);
  }

  /** Makes an event the room's current state for its key (and the membership, for a member event). */
  private async writeCurrent(stores: Stores, event: StoredEvent): Promise<void> {
    if (event.stateKey === undefined) return;
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
}

/** The head of every room the batch moved, as it is after all the batch's events. */
function headsOf(prepared: readonly Prepared[]): Map<string, RoomHead> {
  const heads = new Map<string, RoomHead>();
  for (const item of prepared) if (item.events.length > 0) heads.set(item.room.roomId, item.room.head);
  return heads;
}

/**
 * What the batch changed, for the other processes: rooms whose state changed (they drop them),
 * rooms that only got messages (they move them to the new head), and the users whose
 * memberships moved.
 */
function describeEffects(prepared: readonly Prepared[], effects: StreamEffects): void {
  const stateChanged = new Set<string>();
  for (const item of prepared) {
    if (item.events.length === 0 && item.stateReset === undefined) continue;
    const roomId = item.room.roomId;
    const changesState = item.pending.request.newRoom !== undefined || item.currentState !== undefined || item.stateReset !== undefined ||
      item.events.some((event) => event.stateKey !== undefined || event.redacts !== undefined);
    if (changesState) stateChanged.add(roomId);
    if (stateChanged.has(roomId)) {
      effects.movedRooms.delete(roomId);
      effects.rooms.add(roomId);
    } else {
      effects.movedRooms.set(roomId, { head: item.room.head, latest: item.room.latestStream });
    }
    for (const event of item.currentState ?? item.events) {
      if (event.type === 'm.room.member' && event.stateKey !== undefined) effects.users.add(event.stateKey);
    }
    for (const event of item.events) if (event.redacts !== undefined) effects.redacted.add(event.redacts);
    for (const redaction of item.redactions ?? []) effects.redacted.add(redaction.eventId);
  }
}

/** The PDU's keys that have no field of StoredEvent: its hashes, signatures and anything unknown. */
export function extraKeysOf(pdu: Pdu): JsonObject {
  const {
    room_id: _roomId, sender: _sender, type: _type, state_key: _stateKey, content: _content, origin_server_ts: _ts,
    depth: _depth, prev_events: _prev, auth_events: _auth, redacts: _redacts, unsigned: _unsigned, ...extra
  } = pdu;
  return extra;
}

/**
 * The spec caps a whole PDU, signatures included, at 64 KiB. The client form is checked already;
 * the PDU adds ids and signatures, which only matter for content close to the limit.
 */
function assertPduSize(pdu: Pdu, event: StoredEvent, contentBytes: number): void {
  const ids = (event.prevEvents?.length ?? 0) + (event.authEvents?.length ?? 0);
  // Ids are at most 255 bytes; the rest (keys, hashes, a signature, the sender...) well under 2 KiB.
  if (contentBytes + 6 * 255 * ids + 2048 <= MAX_EVENT_BYTES) return;
  const bytes = Buffer.byteLength(canonicalJson(pdu, { lenient: true }), 'utf8');
  if (bytes > MAX_EVENT_BYTES) throw new MatrixError('M_TOO_LARGE', `Event is too large (${bytes} bytes as a PDU; the limit is ${MAX_EVENT_BYTES})`);
}
