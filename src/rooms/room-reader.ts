/**
 * Reading rooms: events in client form, with redactions explained and only what the reader may
 * see. Shared by the room endpoints and sync.
 */
import type { Clock } from '../core/clock.js';
import { MatrixError } from '../core/errors.js';
import type { Storage, TopologicalPosition } from '../storage/index.js';
import { formatSyncToken, parseSyncToken, type StreamCounter } from '../sync/stream.js';
import { eventFromRow, stateKeyOf, toClientEvent, type ClientEvent, type JsonObject, type StoredEvent, type Viewer } from './events.js';
import type { RoomCache } from './room-cache.js';
import type { GapFiller } from './remote-rooms.js';
import type { RoomSnapshot } from './room-snapshot.js';
import { canSeeEvent, membershipAt, type VisibilityContext } from './visibility.js';
import { redactedContent } from './redaction.js';
import { RelationBundles } from './aggregations.js';
import { parseStoredJson } from '../core/json.js';

/** Picks events; applied while paging so a filter never shortens a page needlessly. */
export type EventPredicate = (event: StoredEvent) => boolean;

const PAGE_SCAN_LIMIT = 20;

export class RoomReader {
  private readonly bundles: RelationBundles;

  constructor(
    private readonly storage: Storage,
    private readonly cache: RoomCache,
    private readonly stream: StreamCounter,
    private readonly clock: Clock,
    /** Users erased on deactivation: their events are redacted for those who were not there. */
    private readonly erased: () => Promise<ReadonlySet<string>> = async () => new Set(),
  ) {
    this.bundles = new RelationBundles(storage);
  }

  /** The room's snapshot, or 403 as Synapse answers for rooms the user cannot know about. */
  async roomOrForbidden(roomId: string, userId: string): Promise<RoomSnapshot> {
    const room = await this.cache.room(roomId);
    if (!room) throw notInRoom(userId, roomId);
    return room;
  }

  /** The room, when the user is joined to it (or it is world-readable). */
  async roomForMember(roomId: string, userId: string): Promise<RoomSnapshot> {
    const room = await this.roomOrForbidden(roomId, userId);
    if (!room.isJoined(userId) && room.historyVisibility() !== 'world_readable') throw notInRoom(userId, roomId);
    return room;
  }

  /** The room's snapshot if it is in memory (no loading). */
  loadedRoom(roomId: string): RoomSnapshot | undefined {
    return this.cache.peek(roomId);
  }

  /** Something a snapshot marks changed outside the event writer (see RoomCache.roomChanged). */
  roomChanged(roomId: string): void {
    this.cache.roomChanged(roomId);
  }

  /** The room, when the user is joined to it: typing and receipts are for members only. */
  async roomWhereJoined(roomId: string, userId: string): Promise<RoomSnapshot> {
    const room = await this.roomOrForbidden(roomId, userId);
    if (!room.isJoined(userId)) throw notInRoom(userId, roomId);
    return room;
  }

  /**
   * The room's state as it was right after the event at `position`, oldest first: the current
   * state from memory, with each key changed since put back to what the first later change
   * replaced. Costs two indexed queries that grow with the changes since, not with the room.
   */
  async stateAt(room: RoomSnapshot, position: number): Promise<StoredEvent[]> {
    const current = [...room.stateEvents()];
    if (current.every((event) => event.stream <= position)) return current.sort((a, b) => a.stream - b.stream);
    const state = new Map(current.map((event) => [stateKeyOf(event.type, event.stateKey ?? ''), event]));
    const firstChange = new Map<string, string | null>();
    for (const row of await this.storage.rooms.stateEventsAfter(room.roomId, position)) {
      const key = stateKeyOf(row.type, row.state_key ?? '');
      if (!firstChange.has(key)) firstChange.set(key, row.replaces_state);
    }
    const restore: string[] = [];
    for (const [key, replaced] of firstChange) {
      if (replaced === null) state.delete(key);
      else restore.push(replaced);
    }
    for (const row of await this.storage.rooms.getEvents(restore)) state.set(stateKeyOf(row.type, row.state_key ?? ''), eventFromRow(row));
    return [...state.values()].sort((a, b) => a.stream - b.stream);
  }

  /** State events after a position, oldest first. */
  async stateChangesAfter(room: RoomSnapshot, position: number): Promise<StoredEvent[]> {
    if (room.latestStream <= position) return [];
    return (await this.storage.rooms.stateEventsAfter(room.roomId, position)).map(eventFromRow);
  }

  async visibilityFor(room: RoomSnapshot, userId: string): Promise<VisibilityContext> {
    const history = await this.storage.rooms.membershipHistory(room.roomId, userId);
    return {
      userId,
      historyVisibility: room.historyVisibility(),
      currentMembership: room.membership(userId),
      history: history.map((row) => {
        const membership = parseStoredJson<{ membership?: unknown }>(row.content, {}).membership;
        return { stream: Number(row.stream_ordering), membership: typeof membership === 'string' ? membership : 'leave' };
      }),
    };
  }

  /**
   * The events with those of erased users redacted where the viewer was not joined when they
   * were sent (as Synapse: who saw them then may see them still; nobody new may).
   */
  private async withErasure(events: readonly StoredEvent[], viewer: string): Promise<readonly StoredEvent[]> {
    const erased = await this.erased();
    if (erased.size === 0 || !events.some((e) => erased.has(e.sender) && e.redactedBy === undefined)) return events;
    const rooms = new Map<string, { version: string; context: VisibilityContext } | undefined>();
    const out: StoredEvent[] = [];
    for (const event of events) {
      if (!erased.has(event.sender) || event.redactedBy !== undefined || event.sender === viewer) {
        out.push(event);
        continue;
      }
      if (!rooms.has(event.roomId)) {
        const room = await this.cache.room(event.roomId);
        rooms.set(event.roomId, room ? { version: room.version.id, context: await this.visibilityFor(room, viewer) } : undefined);
      }
      const room = rooms.get(event.roomId);
      if (!room || membershipAt(room.context.history, event.backfilledAt ?? event.stream) === 'join') out.push(event);
      else out.push({ ...event, content: redactedContent(event.type, event.content, room.version) as JsonObject });
    }
    return out;
  }

  /**
   * Client forms of events, with `unsigned.redacted_because` filled in; with `bundle`, also their
   * bundled aggregations (`unsigned["m.relations"]`) of what the viewer may see (`visibility`
   * undefined: all of the room).
   */
  async render(events: readonly StoredEvent[], viewer: Viewer, bundle?: { visibility: VisibilityContext | undefined }): Promise<ClientEvent[]> {
    const now = this.clock.now();
    const redactionIds = events.flatMap((e) => (e.redactedBy ? [e.redactedBy] : []));
    const redactions = new Map<string, ClientEvent>();
    if (redactionIds.length > 0) {
      for (const row of await this.storage.rooms.getEvents(redactionIds)) {
        redactions.set(row.event_id, toClientEvent(eventFromRow(row), { now, viewer }));
      }
    }
    const shown = await this.withErasure(events, viewer.userId);
    const rendered = shown.map((event) =>
      toClientEvent(event, { now, viewer, redactedBecause: event.redactedBy ? redactions.get(event.redactedBy) : undefined }),
    );
    if (!bundle || events.length === 0) return rendered;
    const bundles = await this.bundles.of(events, viewer, bundle.visibility, (shown, to) => this.render(shown, to));
    if (bundles.size === 0) return rendered;
    return rendered.map((event) => {
      const relations = bundles.get(event.event_id);
      return relations ? { ...event, unsigned: { ...event.unsigned, 'm.relations': relations } } : event;
    });
  }

  /**
   * An event of a room's timeline. Events below position zero (outliers known only for auth and
   * state, rejected and soft-failed events from other servers) are nobody's to see, but for
   * backfilled history, which is below zero only to stay out of sync.
   */
  async getEvent(eventId: string): Promise<StoredEvent | undefined> {
    const row = await this.storage.rooms.getEvent(eventId);
    return row && (Number(row.stream_ordering) > 0 || row.backfilled_at !== null) ? eventFromRow(row) : undefined;
  }

  /** Events nearest to a timestamp (see RoomStore.eventsNearTime). */
  async eventsNearTime(roomId: string, ts: number, dir: 'b' | 'f', limit: number): Promise<StoredEvent[]> {
    return (await this.storage.rooms.eventsNearTime(roomId, ts, dir, limit)).map(eventFromRow);
  }

  private searchIndexer: { catchUp(): Promise<void> } | undefined;

  /** Where search rows that follow commits come from (SQLite): a search waits for them first. */
  useSearchIndexer(indexer: { catchUp(): Promise<void> }): void {
    this.searchIndexer = indexer;
  }

  /** Full-text search hits (see RoomStore.searchEvents), what was sent before included. */
  async searchEvents(options: Parameters<Storage['rooms']['searchEvents']>[0]): ReturnType<Storage['rooms']['searchEvents']> {
    await this.searchIndexer?.catchUp();
    return this.storage.rooms.searchEvents(options);
  }

  /** Events relating to `eventId`, as stored (see RoomStore.relationsOf). */
  async relationsOf(eventId: string, options: Parameters<Storage['rooms']['relationsOf']>[1]): Promise<StoredEvent[]> {
    return (await this.storage.rooms.relationsOf(eventId, options)).map(eventFromRow);
  }

  /** A room's threads, most recently active first (see RoomStore.threadsOf). */
  threadsOf(roomId: string, options: Parameters<Storage['rooms']['threadsOf']>[1]): ReturnType<Storage['rooms']['threadsOf']> {
    return this.storage.rooms.threadsOf(roomId, options);
  }

  /** Whether `sender` has replied (m.in_reply_to) to `eventId` in the room; the reply's id. */
  async findReply(roomId: string, sender: string, eventId: string): Promise<string | undefined> {
    return this.storage.rooms.findReply(roomId, sender, eventId);
  }

  /**
   * Events the user may see, walking back from `before` (exclusive of nothing: `stream <= before`)
   * down to `stopAt` (exclusive), newest first, at most `limit`. `more` tells whether an older
   * event the user may see, and the filter matches, remains (a filtered timeline is `limited` only
   * then); `lastScanned` is just below the last event returned, where the next page starts.
   */
  async pageBackwards(
    room: RoomSnapshot,
    options: {
      before: number;
      stopAt: number;
      limit: number;
      visibility: VisibilityContext | undefined;
      matches?: EventPredicate | undefined;
      stopAtGap?: boolean | undefined;
      /** Events shown whatever the history visibility (a sync's current state events). */
      alwaysVisible?: EventPredicate | undefined;
    },
  ): Promise<{ events: StoredEvent[]; more: boolean; lastScanned: number; gapBefore?: StoredEvent | undefined }> {
    const events: StoredEvent[] = [];
    const upper = Math.min(options.before, this.stream.current);
    let lastScanned = upper;
    /**
     * Takes one event; 'more' when it is one more than the page holds (so older ones remain),
     * 'gap' when a gap lies just before it (`stopAtGap`: the page ends there, as if limited).
     */
    const take = (event: StoredEvent): 'more' | 'gap' | undefined => {
      const visible = !options.visibility || canSeeEvent(event, options.visibility) || options.alwaysVisible?.(event) === true;
      const wanted = visible && (!options.matches || options.matches(event));
      if (wanted && events.length >= options.limit) return 'more';
      // Events passed over before the page is full need not be scanned again.
      if (events.length < options.limit) lastScanned = event.stream - 1;
      if (wanted) events.push(event);
      return options.stopAtGap && event.gapBefore ? 'gap' : undefined;
    };
    const stopped = (stop: 'more' | 'gap', event: StoredEvent) => ({ events, more: true, lastScanned, ...(stop === 'gap' ? { gapBefore: event } : {}) });
    const recent = room.recentEvents(options.stopAt, upper);
    if (recent) {
      // Everything in range is in memory (the common incremental sync): no query at all.
      for (const event of recent) {
        const stop = take(event);
        if (stop) return stopped(stop, event);
      }
      return { events, more: false, lastScanned };
    }
    let cursor = upper;
    for (let pages = 0; pages < PAGE_SCAN_LIMIT; pages++) {
      const want = options.limit - events.length + 1;
      const rows = await this.storage.rooms.eventsNewestFirst(room.roomId, options.stopAt, cursor, want);
      for (const row of rows) {
        const event = eventFromRow(row);
        cursor = event.stream - 1;
        const stop = take(event);
        if (stop) return stopped(stop, event);
      }
      if (rows.length < want) return { events, more: false, lastScanned };
    }
    return { events, more: true, lastScanned };
  }

  /** Like pageBackwards, forwards: `after < stream <= upTo`, oldest first. */
  async pageForwards(
    room: RoomSnapshot,
    options: { after: number; upTo: number; limit: number; visibility: VisibilityContext | undefined; matches?: EventPredicate | undefined },
  ): Promise<{ events: StoredEvent[]; more: boolean; lastScanned: number }> {
    const events: StoredEvent[] = [];
    const upTo = Math.min(options.upTo, this.stream.current);
    let from = options.after + 1;
    let lastScanned = options.after;
    for (let pages = 0; pages < PAGE_SCAN_LIMIT; pages++) {
      const want = options.limit - events.length;
      const rows = await this.storage.rooms.eventsOldestFirst(room.roomId, from, upTo + 1, want + 1);
      for (const row of rows.slice(0, want)) {
        const event = eventFromRow(row);
        lastScanned = event.stream;
        if (options.visibility && !canSeeEvent(event, options.visibility)) continue;
        if (options.matches && !options.matches(event)) continue;
        events.push(event);
      }
      if (rows.length <= want) return { events, more: false, lastScanned };
      if (events.length >= options.limit) return { events, more: true, lastScanned };
      from = lastScanned + 1;
    }
    return { events, more: true, lastScanned };
  }

  /**
   * Events the user may see in topological order (depth, then arrival), walking from `from`
   * towards `to`, at most `limit`, with positions up to `maxStream`. Positions are points between
   * events (Synapse's tokens): (depth, position) is right after the event at that place. `last`
   * is where the next page starts.
   */
  async pageTopological(
    room: RoomSnapshot,
    options: { dir: 'b' | 'f'; from: TopologicalPosition; to: TopologicalPosition | undefined; maxStream: number; limit: number; visibility: VisibilityContext | undefined; matches?: EventPredicate | undefined },
  ): Promise<{ events: StoredEvent[]; more: boolean; last: TopologicalPosition }> {
    const events: StoredEvent[] = [];
    let from = options.from;
    for (let pages = 0; pages < PAGE_SCAN_LIMIT; pages++) {
      const want = options.limit - events.length;
      const rows = await this.storage.rooms.eventsTopological(room.roomId, options.dir, from, options.to, options.maxStream, want + 1);
      for (const row of rows.slice(0, want)) {
        const event = eventFromRow(row);
        // Going back, the next page starts just before this event; going forward, just after it.
        from = { depth: event.depth, stream: options.dir === 'b' ? event.stream - 1 : event.stream };
        if (options.visibility && !canSeeEvent(event, options.visibility)) continue;
        if (options.matches && !options.matches(event)) continue;
        events.push(event);
      }
      if (rows.length <= want) return { events, more: false, last: from };
      if (events.length >= options.limit) return { events, more: true, last: from };
    }
    return { events, more: true, last: from };
  }

  /**
   * A stream position (a sync token, which clients page back from) as a place in topological
   * order: after the deepest event at or before it. Going back from it yields everything up to
   * that position (and events of a lower depth that arrived later, as in Synapse).
   */
  /** The room's gaps (its backward extremities) at or below `maxDepth`, the nearest the present first, at most `limit`. */
  async gapsOf(roomId: string, limit: number, maxDepth?: number): Promise<Array<{ eventId: string; childDepth: number }>> {
    return this.storage.rooms.backwardExtremities(roomId, limit, maxDepth);
  }

  async topologicalAt(room: RoomSnapshot, position: number): Promise<TopologicalPosition> {
    return { depth: await this.storage.rooms.maxDepthAtPosition(room.roomId, position), stream: position };
  }
}

export interface MessagesQuery {
  from: string | undefined;
  to: string | undefined;
  dir: 'b' | 'f';
  limit: number;
  matches: EventPredicate;
  lazyLoadMembers: boolean;
}

/** Reading history and state on behalf of a user (the `/messages`, `/context`, `/state` family). */
export class RoomHistory {
  constructor(
    private readonly reader: RoomReader,
    private readonly stream: StreamCounter,
    /** The users a user ignores (`m.ignored_user_list`): their messages are left out of history. */
    private readonly ignoredUsersOf: (userId: string) => Promise<ReadonlySet<string>> = async () => new Set(),
  ) {}

  /** `matches`, and not a message of someone the viewer ignores (their state events stay: the room must make sense). */
  private async withoutIgnored(userId: string, matches: EventPredicate): Promise<EventPredicate> {
    const ignored = await this.ignoredUsersOf(userId);
    return ignored.size === 0 ? matches : (event) => !isIgnored(ignored, event) && matches(event);
  }

  /** The room, when the user is or was in it (or it is world-readable), with their visibility. */
  private async roomForHistory(roomId: string, userId: string): Promise<{ room: RoomSnapshot; visibility: VisibilityContext }> {
    const room = await this.reader.roomOrForbidden(roomId, userId);
    const visibility = await this.reader.visibilityFor(room, userId);
    if (visibility.history.length === 0 && visibility.historyVisibility !== 'world_readable') throw notInRoom(userId, roomId);
    return { room, visibility };
  }

  private gapFiller: { filler: GapFiller; waitMs: number } | undefined;

  /** Where gaps in rooms' timelines are filled from (federation), and how long a page waits for it. */
  useGapFiller(filler: GapFiller, waitMs: number): void {
    this.gapFiller = { filler, waitMs };
  }

  /**
   * `/messages`: a page of the room in topological order (depth, then arrival), as Synapse pages
   * it; tokens are `t<depth>-<position>`, and a sync token (`s…`, a `prev_batch`) works as `from`.
   * Going back over a gap (events other servers sent that never reached us), the gap is filled
   * from them first, as Synapse backfills.
   */
  async messages(viewer: Viewer, roomId: string, query: MessagesQuery): Promise<JsonObject> {
    const { room, visibility } = await this.roomForHistory(roomId, viewer.userId);
    // Someone no longer in the room (and not reading a world-readable one) has nothing to find
    // after their last membership change: do not scan there.
    const last = visibility.currentMembership === 'join' || room.historyVisibility() === 'world_readable' ? Infinity : (visibility.history.at(-1)?.stream ?? -1);
    const backwards = query.dir === 'b';
    const from = (await this.boundOf(room, query.from, 'from')) ?? (backwards ? TOPMOST : BOTTOMMOST);
    const to = await this.boundOf(room, query.to, 'to');
    const matches = await this.withoutIgnored(viewer.userId, query.matches);
    const read = () =>
      this.reader.pageTopological(room, { dir: query.dir, from, to, maxStream: Math.min(last, this.stream.current), limit: query.limit, visibility, matches });
    let page = await read();
    const gap = backwards && this.gapFiller ? await this.crossedGap(room.roomId, from, page) : undefined;
    if (gap && this.gapFiller) {
      const filled = await this.gapFiller.filler.fill(room.roomId, from.depth, this.gapFiller.waitMs);
      if (filled === 'filled') page = await read();
      // Still being filled: the page ends above the gap, so the next one comes back to it.
      else if (filled === 'pending') page = endAbove(page, gap.childDepth, from);
    }
    const response: JsonObject = {
      chunk: await this.reader.render(page.events, viewer, { visibility }),
      start: query.from ?? (backwards ? positionToken(this.stream.current) : topologicalToken(BOTTOMMOST)),
    };
    if (page.events.length > 0 || page.more) response.end = topologicalToken(page.last);
    if (query.lazyLoadMembers) {
      const newest = page.events.reduce((max, e) => Math.max(max, e.stream), -1);
      const state = newest < 0 ? [] : await this.reader.stateAt(room, newest);
      response.state = await this.reader.render(memberEventsOf(state, page.events), viewer);
    }
    return response;
  }

  /**
   * `GET /rooms/{roomId}/relations/{eventId}[/{relType}[/{eventType}]]`: the events that relate to
   * one the user can see (edits, reactions, thread replies, references), a page at a time.
   */
  async relations(viewer: Viewer, roomId: string, eventId: string, query: RelationsQuery): Promise<JsonObject> {
    const { room, visibility } = await this.roomForHistory(roomId, viewer.userId);
    const parent = await this.reader.getEvent(eventId);
    if (!parent || parent.roomId !== roomId || !canSeeEvent(parent, visibility)) throw new MatrixError('M_NOT_FOUND', 'Event not found.');
    const ignored = await this.ignoredUsersOf(viewer.userId);
    const limit = Math.min(Math.max(query.limit ?? DEFAULT_RELATIONS_LIMIT, 1), MAX_RELATIONS_LIMIT);
    const from = relationToken(query.from);
    const to = relationToken(query.to);
    const backwards = query.dir !== 'f';
    let before = backwards ? (from ?? Number.MAX_SAFE_INTEGER) : (to ?? Number.MAX_SAFE_INTEGER);
    let after = backwards ? (to ?? -1) : (from ?? -1);
    const chunk: StoredEvent[] = [];
    let more = false;
    for (let pages = 0; pages < PAGE_SCAN_LIMIT && chunk.length <= limit; pages++) {
      const rows = await this.reader.relationsOf(eventId, { relType: query.relType, eventType: query.eventType, dir: backwards ? 'b' : 'f', before, after, limit: limit + 1 });
      for (const event of rows) {
        if (backwards) before = event.stream;
        else after = event.stream;
        if (event.roomId !== room.roomId || !canSeeEvent(event, visibility) || isIgnored(ignored, event)) continue;
        chunk.push(event);
      }
      if (rows.length <= limit) break;
    }
    if (chunk.length > limit) {
      chunk.length = limit;
      more = true;
    }
    const last = chunk.at(-1);
    return {
      chunk: await this.reader.render(chunk, viewer, { visibility }),
      ...(more && last ? { next_batch: `r${last.stream}` } : {}),
      ...(query.from !== undefined ? { prev_batch: query.from } : {}),
    };
  }

  /**
   * `GET /rooms/{roomId}/threads`: thread roots the user can see, most recently active first, each
   * with its summary in `unsigned["m.relations"]["m.thread"]` (latest reply, count, participation).
   */
  async threads(viewer: Viewer, roomId: string, query: { include?: 'all' | 'participated' | undefined; from?: string | undefined; limit?: number | undefined }): Promise<JsonObject> {
    const { visibility } = await this.roomForHistory(roomId, viewer.userId);
    const limit = Math.min(Math.max(query.limit ?? DEFAULT_THREADS_LIMIT, 1), MAX_RELATIONS_LIMIT);
    const before = query.from?.startsWith('t') && /^t\d+$/.test(query.from) ? Number(query.from.slice(1)) : Number.MAX_SAFE_INTEGER;
    const rows = await this.reader.threadsOf(roomId, { before, limit: limit + 1, viewer: viewer.userId, participatedOnly: query.include === 'participated' });
    const roots: StoredEvent[] = [];
    for (const row of rows.slice(0, limit)) {
      const root = await this.reader.getEvent(row.rootId);
      if (root && root.roomId === roomId && canSeeEvent(root, visibility)) roots.push(root);
    }
    // Each root carries its thread's summary in its bundled aggregations.
    const chunk = await this.reader.render(roots, viewer, { visibility });
    const more = rows.length > limit;
    return { chunk, ...(more ? { next_batch: `t${rows[limit - 1]!.latest}` } : {}) };
  }

  /**
   * `GET /rooms/{roomId}/timestamp_to_event`: the event the user can see that is closest to `ts`
   * in direction `dir` (`f`: at or after it; `b`: at or before it), by its sender's timestamp.
   */
  async timestampToEvent(viewer: Viewer, roomId: string, ts: number, dir: 'b' | 'f'): Promise<{ event_id: string; origin_server_ts: number }> {
    const { visibility } = await this.roomForHistory(roomId, viewer.userId);
    for (let offset = ts, pages = 0; pages < PAGE_SCAN_LIMIT; pages++) {
      const events = await this.reader.eventsNearTime(roomId, offset, dir, TIME_SCAN_PAGE);
      const seen = events.find((event) => canSeeEvent(event, visibility));
      if (seen) return { event_id: seen.eventId, origin_server_ts: seen.originServerTs };
      if (events.length < TIME_SCAN_PAGE) break;
      // A page of events the user may not see: on from the last one's time (the ties of that
      // millisecond are read again, which only costs a little).
      const edge = events.at(-1)!.originServerTs;
      if (edge === offset) break;
      offset = edge;
    }
    throw new MatrixError('M_NOT_FOUND', `Unable to find event ${dir === 'f' ? 'after' : 'before'} ${ts} in room ${roomId}`);
  }

  /**
   * `POST /search`, `room_events`: messages, room names and topics holding every word of the
   * search term (as word prefixes), in the rooms the user is joined to (or those of `filter.rooms`
   * among them), best match or newest first; each hit checked against history visibility and the
   * ignore list. `nextBatch` pages on.
   */
  async search(viewer: Viewer, joinedRooms: readonly string[], query: SearchQuery): Promise<JsonObject> {
    const terms = query.searchTerm.toLowerCase().split(/[^\p{L}\p{N}_]+/u).filter((t) => t.length > 0).slice(0, MAX_SEARCH_TERMS);
    const wanted = query.rooms ? joinedRooms.filter((roomId) => query.rooms!.includes(roomId)) : [...joinedRooms];
    const rooms = wanted.filter((roomId) => !query.notRooms?.includes(roomId)).slice(0, MAX_SEARCHED_ROOMS);
    const keys = query.keys ?? ['content.body', 'content.name', 'content.topic'];
    const types = keys.map((key) => SEARCH_KEY_TYPES[key]).filter((type): type is string => type !== undefined);
    const limit = Math.min(Math.max(query.limit ?? DEFAULT_SEARCH_LIMIT, 1), MAX_SEARCH_LIMIT);
    let offset = query.nextBatch !== undefined && /^o\d{1,9}$/.test(query.nextBatch) ? Number(query.nextBatch.slice(1)) : 0;
    const ignored = await this.ignoredUsersOf(viewer.userId);
    const visibilities = new Map<string, VisibilityContext | undefined>();
    const results: JsonObject[] = [];
    let more = false;
    for (let pages = 0; pages < PAGE_SCAN_LIMIT && results.length < limit; pages++) {
      const hits = await this.reader.searchEvents({ terms, roomIds: rooms, types, orderBy: query.orderBy ?? 'rank', offset, limit: limit + 1 });
      for (const [index, hit] of hits.entries()) {
        if (index === limit) break;
        offset += 1;
        const event = await this.reader.getEvent(hit.eventId);
        if (!event || isIgnored(ignored, event)) continue;
        if (!visibilities.has(event.roomId)) {
          const room = await this.reader.roomOrForbidden(event.roomId, viewer.userId).catch(() => undefined);
          visibilities.set(event.roomId, room ? await this.reader.visibilityFor(room, viewer.userId) : undefined);
        }
        const visibility = visibilities.get(event.roomId);
        if (!visibility || !canSeeEvent(event, visibility)) continue;
        const [rendered] = await this.reader.render([event], viewer, { visibility });
        results.push({ rank: hit.rank, result: rendered as unknown as JsonObject });
        if (results.length === limit) break;
      }
      more = hits.length > limit || (results.length === limit && hits.length > 0);
      if (hits.length <= limit) break;
    }
    return {
      search_categories: {
        room_events: {
          count: results.length,
          results,
          highlights: terms,
          ...(more ? { next_batch: `o${offset}` } : {}),
        },
      },
    };
  }

  /**
   * Whether a page going back from `from` reaches past a gap: one that lies below `from` and
   * above where the page ended (or anywhere below, when the page found nothing more).
   */
  private async crossedGap(roomId: string, from: TopologicalPosition, page: { more: boolean; last: TopologicalPosition }): Promise<{ childDepth: number } | undefined> {
    // The nearest gap below `from` is the one the page would cross first.
    const [gap] = await this.reader.gapsOf(roomId, 1, from.depth);
    return gap && (!page.more || page.last.depth < gap.childDepth) ? gap : undefined;
  }

  /** A pagination token as a place: `t<depth>-<position>` as it is; a sync token through topologicalAt. */
  private async boundOf(room: RoomSnapshot, token: string | undefined, name: string): Promise<TopologicalPosition | undefined> {
    if (token === undefined || token === '') return undefined;
    const topological = /^t(\d{1,16})-(-?\d{1,16})$/.exec(token);
    if (topological) return { depth: Number(topological[1]), stream: Number(topological[2]) };
    return this.reader.topologicalAt(room, parsePosition(token, name)!);
  }

  async context(viewer: Viewer, roomId: string, eventId: string, limit: number, matches: EventPredicate, lazyLoadMembers: boolean): Promise<JsonObject> {
    const { room, visibility } = await this.roomForHistory(roomId, viewer.userId);
    const event = await this.reader.getEvent(eventId);
    if (!event || event.roomId !== roomId || !canSeeEvent(event, visibility)) throw new MatrixError('M_NOT_FOUND', 'Event not found.');
    matches = await this.withoutIgnored(viewer.userId, matches);
    const beforeLimit = Math.floor(limit / 2);
    const maxStream = this.stream.current;
    const justBefore: TopologicalPosition = { depth: event.depth, stream: event.stream - 1 };
    const justAfter: TopologicalPosition = { depth: event.depth, stream: event.stream };
    const before = await this.reader.pageTopological(room, { dir: 'b', from: justBefore, to: undefined, maxStream, limit: beforeLimit, visibility, matches });
    const after = await this.reader.pageTopological(room, { dir: 'f', from: justAfter, to: undefined, maxStream, limit: limit - beforeLimit, visibility, matches });
    const [rendered] = await this.reader.render([event], viewer, { visibility });
    const all = [...before.events, event, ...after.events];
    // The state at the last event returned, which the caller could see, never the current state:
    // someone who left does not learn what happened after.
    const last = after.events.at(-1) ?? event;
    const state = await this.reader.stateAt(room, last.stream);
    const shown = lazyLoadMembers ? memberEventsOf(state, all) : state;
    return {
      event: rendered,
      events_before: await this.reader.render(before.events, viewer, { visibility }),
      events_after: await this.reader.render(after.events, viewer, { visibility }),
      start: topologicalToken(before.last),
      end: topologicalToken(after.last),
      state: await this.reader.render(shown, viewer),
    };
  }

  /** The legacy `GET /events/{eventId}`: an event of any room, when the user may see it (404 otherwise). */
  async eventById(viewer: Viewer, eventId: string): Promise<ClientEvent> {
    const event = await this.reader.getEvent(eventId);
    if (!event) throw new MatrixError('M_NOT_FOUND', 'Event not found.');
    return { ...(await this.event(viewer, event.roomId, eventId)), room_id: event.roomId };
  }

  async event(viewer: Viewer, roomId: string, eventId: string): Promise<ClientEvent> {
    // Someone outside the room learns nothing, not even that the event exists (the spec's 404).
    const { visibility } = await this.roomForHistory(roomId, viewer.userId).catch((err: unknown) => {
      throw err instanceof MatrixError && err.errcode === 'M_FORBIDDEN' ? new MatrixError('M_NOT_FOUND', 'Event not found.') : err;
    });
    const event = await this.reader.getEvent(eventId);
    if (!event || event.roomId !== roomId || !canSeeEvent(event, visibility)) throw new MatrixError('M_NOT_FOUND', 'Event not found.');
    const [rendered] = await this.reader.render([event], viewer, { visibility });
    return rendered!;
  }

  /**
   * The room's state as the user may see it: the current state for a member (or anyone in a
   * world-readable room); for a former member who left or was kicked, the state as it was when
   * they left (the spec, Synapse); for anyone else, the banned included, 403 (as Synapse: a
   * banned user's server learns of the ban by this).
   */
  private async visibleState(roomId: string, userId: string): Promise<StoredEvent[]> {
    const room = await this.reader.roomOrForbidden(roomId, userId);
    if (room.isJoined(userId) || room.historyVisibility() === 'world_readable') return [...room.stateEvents()].sort((a, b) => a.stream - b.stream);
    const { history } = await this.reader.visibilityFor(room, userId);
    const left = history.at(-1);
    if (!left || !history.some((change) => change.membership === 'join') || left.membership !== 'leave') throw notInRoom(userId, roomId);
    return this.reader.stateAt(room, left.stream);
  }

  async state(viewer: Viewer, roomId: string): Promise<ClientEvent[]> {
    return this.reader.render(await this.visibleState(roomId, viewer.userId), viewer);
  }

  async stateEvent(viewer: Viewer, roomId: string, type: string, stateKey: string): Promise<ClientEvent> {
    const event = (await this.visibleState(roomId, viewer.userId)).find((e) => e.type === type && (e.stateKey ?? '') === stateKey);
    if (!event) throw new MatrixError('M_NOT_FOUND', 'Event not found.');
    const [rendered] = await this.reader.render([event], viewer);
    return rendered!;
  }

  /** Member events, optionally only some memberships. */
  async members(viewer: Viewer, roomId: string, membership: string | undefined, notMembership: string | undefined): Promise<ClientEvent[]> {
    const events = (await this.visibleState(roomId, viewer.userId)).filter((e) => {
      if (e.type !== 'm.room.member') return false;
      const value = typeof e.content.membership === 'string' ? e.content.membership : 'leave';
      if (membership !== undefined && value !== membership) return false;
      return notMembership === undefined || value !== notMembership;
    });
    return this.reader.render(events.sort((a, b) => a.stream - b.stream), viewer);
  }

  /** Joined members with their room profile; both keys are always present (null when unset). */
  async joinedMembers(viewer: Viewer, roomId: string): Promise<Record<string, { display_name: string | null; avatar_url: string | null }>> {
    const room = await this.reader.roomForMember(roomId, viewer.userId);
    const joined: Record<string, { display_name: string | null; avatar_url: string | null }> = {};
    for (const userId of room.joinedUsers()) {
      const content = room.get('m.room.member', userId)?.content ?? {};
      joined[userId] = {
        display_name: typeof content.displayname === 'string' ? content.displayname : null,
        avatar_url: typeof content.avatar_url === 'string' ? content.avatar_url : null,
      };
    }
    return joined;
  }

}

/** The member events, among `state`, of the senders of `events`. */
function memberEventsOf(state: StoredEvent[], events: StoredEvent[]): StoredEvent[] {
  const senders = new Set(events.map((e) => e.sender));
  return state.filter((e) => e.type === 'm.room.member' && senders.has(e.stateKey ?? ''));
}

/** Bounds for paging a whole room: above every event, and below every event. */
const DEFAULT_RELATIONS_LIMIT = 5;
const DEFAULT_SEARCH_LIMIT = 10;
const MAX_SEARCH_LIMIT = 50;
const MAX_SEARCH_TERMS = 16;
const MAX_SEARCHED_ROOMS = 1000;
/** The spec's `keys` of a room events search, and the event types they are found in. */
const SEARCH_KEY_TYPES: Record<string, string> = { 'content.body': 'm.room.message', 'content.name': 'm.room.name', 'content.topic': 'm.room.topic' };

export interface SearchQuery {
  searchTerm: string;
  keys?: string[] | undefined;
  orderBy?: 'rank' | 'recent' | undefined;
  rooms?: string[] | undefined;
  notRooms?: string[] | undefined;
  limit?: number | undefined;
  nextBatch?: string | undefined;
}
const TIME_SCAN_PAGE = 50;
const DEFAULT_THREADS_LIMIT = 5;
const MAX_RELATIONS_LIMIT = 100;

export interface RelationsQuery {
  relType?: string | undefined;
  eventType?: string | undefined;
  from?: string | undefined;
  to?: string | undefined;
  dir?: 'b' | 'f' | undefined;
  limit?: number | undefined;
}

/** A `/relations` page token (`r<position>`), or undefined for none or one we did not make. */
function relationToken(token: string | undefined): number | undefined {
  return token !== undefined && /^r\d{1,16}$/.test(token) ? Number(token.slice(1)) : undefined;
}

const TOPMOST: TopologicalPosition = { depth: Number.MAX_SAFE_INTEGER, stream: Number.MAX_SAFE_INTEGER };
const BOTTOMMOST: TopologicalPosition = { depth: 0, stream: 0 };

/** A page going back, cut to the events at or above `depth` (a gap lies below them); what follows starts there. */
function endAbove(page: { events: StoredEvent[]; more: boolean; last: TopologicalPosition }, depth: number, from: TopologicalPosition): { events: StoredEvent[]; more: boolean; last: TopologicalPosition } {
  const events = page.events.filter((event) => event.depth >= depth);
  const lastKept = events.at(-1);
  return { events, more: true, last: lastKept ? { depth: lastKept.depth, stream: lastKept.stream - 1 } : from };
}

/** A place in a room's topological order as a pagination token (Synapse's form). */
export function topologicalToken(position: TopologicalPosition): string {
  // Backfilled history has positions below zero (Synapse's tokens carry them the same way: `t5--3`).
  return `t${Math.max(0, position.depth)}-${position.stream}`;
}

/** Stream positions in the sync token's form (what sync's prev_batch is). */
export function positionToken(position: number): string {
  return formatSyncToken({ stream: Math.max(position, 0), typing: 0 });
}

function parsePosition(token: string | undefined, name: string): number | undefined {
  if (token === undefined || token === '') return undefined;
  const parsed = parseSyncToken(token);
  if (!parsed) throw new MatrixError('M_INVALID_PARAM', `Invalid ${name} token`);
  return parsed.stream;
}

export function notInRoom(userId: string, roomId: string): MatrixError {
  return new MatrixError('M_FORBIDDEN', `User ${userId} not in room ${roomId}`);
}

/** A message (not a state event) sent by someone in `ignored`. */
export function isIgnored(ignored: ReadonlySet<string>, event: { sender: string; stateKey?: string | undefined }): boolean {
  return event.stateKey === undefined && ignored.has(event.sender);
}
