/** Rooms, their events, current state, memberships and aliases. */
import { sql, type Insertable, type Kysely, type RawBuilder, type Selectable } from 'kysely';
import type { Database, EventsTable, MembershipsTable, RoomsTable } from './schema.js';
import { newestPosition } from './stream-positions.js';
import { QueryTemplate } from './database.js';
import { isPostgres, jsonText } from './dialect.js';
import { headMoveParts, type HeadMove } from './cluster-store.js';
import { UNIQUE_VIOLATION } from './postgres.js';

/** Whether an event is part of its room's timeline (not an outlier, rejected or backfilled below zero): only those are indexed. */
function isShown(event: Pick<EventRow, 'outlier' | 'rejected' | 'stream_ordering'>): boolean {
  return event.outlier === 0 && event.rejected === null && Number(event.stream_ordering) > 0;
}

/** PostgreSQL's SQLSTATE for a deadlock it broke by failing this statement. */
const DEADLOCK_DETECTED = '40P01';

export type EventRow = Selectable<EventsTable>;
export type RoomRow = Selectable<RoomsTable>;
export type NewRoomRow = Insertable<RoomsTable>;
export type MembershipRow = Selectable<MembershipsTable>;

/** Where a room's DAG ends: its forward extremities, their depth, its current state group. */
export interface RoomHeadRow {
  extremities: readonly string[];
  depth: number;
  stateGroup: number | undefined;
}

/** PostgreSQL: the heads of several rooms in one UPDATE (typed: parameters in VALUES come as text). */
function headsUpdate(heads: ReadonlyMap<string, RoomHeadRow>): RawBuilder<unknown> {
  const values = sql.join([...heads].map(([roomId, head]) =>
    sql`(${roomId}::text, ${JSON.stringify(head.extremities)}::text, ${head.depth}::bigint, ${head.stateGroup ?? null}::bigint)`));
  return sql`UPDATE rooms SET extremities = v.extremities, depth = v.depth, state_group = v.state_group
    FROM (VALUES ${values}) AS v (room_id, extremities, depth, state_group) WHERE rooms.room_id = v.room_id`;
}

/** An event missing below a gap, and what is known of the event we hold above it (see migration 0025). */
export interface BackwardExtremity {
  eventId: string;
  childDepth: number;
  childStream: number;
  childVisibility: string;
}

/** A place in a room's topological order: depth, then stream position. */
export interface TopologicalPosition {
  depth: number;
  stream: number;
}

// The queries every send and every sync run, compiled once (see QueryTemplate).
const EVENT_COLUMNS = [
  'stream_ordering', 'event_id', 'room_id', 'type', 'state_key', 'sender', 'origin_server_ts', 'content', 'replaces_state',
  'prev_content', 'prev_sender', 'redacts', 'redacted_by', 'history_visibility', 'txn_device_id', 'txn_scope', 'txn_id',
  'depth', 'prev_events', 'auth_events', 'pdu_extra', 'state_group', 'outlier', 'rejected', 'soft_failed', 'gap_before', 'backfilled_at',
] as const satisfies ReadonlyArray<keyof EventRow>;

/** Rows per multi-row INSERT: events have some 30 columns, and PostgreSQL takes 65,535 parameters. */
const ROWS_PER_STATEMENT = 500;

/** An event row with exactly the stored columns (what insertEventQuery names). */
function pickColumns(event: EventRow): EventRow {
  return Object.fromEntries(EVENT_COLUMNS.map((column) => [column, event[column]])) as EventRow;
}

const insertEventQuery = new QueryTemplate((db: Kysely<Database>, ...values: unknown[]) =>
  db.insertInto('events').values(Object.fromEntries(EVENT_COLUMNS.map((column, index) => [column, values[index]])) as EventRow),
);
const eventByTxnQuery = new QueryTemplate((db: Kysely<Database>, sender: string, deviceId: string, scope: string, txnId: string) =>
  db
    .selectFrom('events')
    .selectAll()
    .where('sender', '=', sender)
    .where('txn_device_id', '=', deviceId)
    .where('txn_scope', '=', scope)
    .where('txn_id', '=', txnId),
);
const eventsNewestFirstQuery = new QueryTemplate((db: Kysely<Database>, roomId: string, after: number, upTo: number, limit: number) =>
  db
    .selectFrom('events')
    .selectAll()
    .where('room_id', '=', roomId)
    .where('stream_ordering', '>', after)
    .where('stream_ordering', '<=', upTo)
    .orderBy('stream_ordering', 'desc')
    .limit(limit),
);
const stateEventsAfterQuery = new QueryTemplate((db: Kysely<Database>, roomId: string, position: number) =>
  db
    .selectFrom('events')
    .selectAll()
    .where('room_id', '=', roomId)
    .where('state_key', 'is not', null)
    .where('stream_ordering', '>', position)
    .orderBy('stream_ordering', 'asc'),
);
const setRoomHeadQuery = new QueryTemplate((db: Kysely<Database>, extremities: string, depth: number, stateGroup: number | null, roomId: string) =>
  db.updateTable('rooms').set({ extremities, depth, state_group: stateGroup }).where('room_id', '=', roomId),
);
const eventByIdQuery = new QueryTemplate((db: Kysely<Database>, eventId: string) =>
  db.selectFrom('events').selectAll().where('event_id', '=', eventId),
);

/** A row of the full-text index. */
interface SearchRow {
  key: number;
  value: string;
  event_id: string;
  room_id: string;
  type: string;
}

export class RoomStore {
  /** PostgreSQL keeps the search index in a table keyed by stream_ordering; SQLite's FTS5 by rowid. */
  private readonly postgres: boolean;
  private readonly searchKey: RawBuilder<unknown>;

  /**
   * Whether events' search rows are written with them. On PostgreSQL they are (one statement with
   * the events: no round trip of their own); on SQLite they follow the commit
   * (`indexSearchAfter`, rooms/search-indexer.ts): an FTS5 insert dirties several pages, which a
   * send's commit would write for one message instead of a batch's.
   */
  readonly searchInline: boolean;

  constructor(
    private readonly db: Kysely<Database>,
    /** Index messages, room names and topics for full-text search (`enable_search`). */
    private readonly indexSearch = true,
  ) {
    this.postgres = isPostgres(db);
    this.searchKey = this.postgres ? sql`stream_ordering` : sql`rowid`;
    this.searchInline = this.indexSearch && this.postgres;
  }

  /** Whether this is PostgreSQL (where a statement is a round trip). */
  get isPostgres(): boolean {
    return this.postgres;
  }

  /**
   * Whether `insertEvents` writes these events and heads in one statement (PostgreSQL: the
   * events, the heads and the search rows; not relations), which is atomic without a transaction.
   */
  insertsInOneStatement(events: readonly EventRow[], heads: ReadonlyMap<string, RoomHeadRow>): boolean {
    if (!this.postgres || events.length === 0 || events.length > ROWS_PER_STATEMENT || heads.size > ROWS_PER_STATEMENT) return false;
    // A relation row is a statement of its own; the text says cheaply that most events have none.
    return !events.some((event) => event.content.includes('m.relates_to') && relationOf(event.content) !== undefined);
  }

  /** Whether events are indexed for search at all (`enable_search`). */
  get searchEnabled(): boolean {
    return this.indexSearch;
  }

  /**
   * Indexes for search the shown events after position `after` up to `upTo`, at most `limit`
   * of them (SQLite: search rows follow the commit). Returns the position indexed up to.
   */
  async indexSearchAfter(after: number, upTo: number, limit: number): Promise<number> {
    const rows = await this.db
      .selectFrom('events')
      .select(['stream_ordering', 'event_id', 'room_id', 'type', 'content'])
      .where('stream_ordering', '>', after)
      .where('stream_ordering', '<=', upTo)
      .where('outlier', '=', 0)
      .where('rejected', 'is', null)
      .orderBy('stream_ordering')
      .limit(limit)
      .execute();
    const searchRows = rows.flatMap((event) => this.searchRowOf(event) ?? []);
    for (let start = 0; start < searchRows.length; start += ROWS_PER_STATEMENT) {
      await this.searchInsert(searchRows.slice(start, start + ROWS_PER_STATEMENT)).execute(this.db);
    }
    return rows.length < limit ? upTo : Number(rows.at(-1)!.stream_ordering);
  }

  /** Where search indexing stands (SQLite; undefined before it was first recorded). */
  async searchIndexedUpTo(): Promise<number | undefined> {
    const row = await this.db.selectFrom('server_meta').select('value').where('key', '=', 'search_indexed_upto').executeTakeFirst();
    return row ? Number(row.value) : undefined;
  }

  async setSearchIndexedUpTo(position: number): Promise<void> {
    await this.db
      .insertInto('server_meta')
      .values({ key: 'search_indexed_upto', value: String(position) })
      .onConflict((c) => c.column('key').doUpdateSet({ value: String(position) }))
      .execute();
  }

  /** Rooms published in the directory, by id, after `afterRoomId` (paging), at most `limit`. */
  async publicRoomIds(afterRoomId: string, limit: number): Promise<string[]> {
    const rows = await this.db.selectFrom('rooms').select('room_id').where('is_public', '=', 1).where('room_id', '>', afterRoomId).orderBy('room_id').limit(limit).execute();
    return rows.map((row) => row.room_id);
  }

  /** Published rooms before `beforeRoomId`, nearest first (a page of the directory backwards). */
  async publicRoomIdsBefore(beforeRoomId: string, limit: number): Promise<string[]> {
    const rows = await this.db.selectFrom('rooms').select('room_id').where('is_public', '=', 1).where('room_id', '<', beforeRoomId).orderBy('room_id', 'desc').limit(limit).execute();
    return rows.map((row) => row.room_id);
  }

  async countPublicRooms(): Promise<number> {
    const row = await this.db.selectFrom('rooms').select((eb) => eb.fn.countAll<number>().as('n')).where('is_public', '=', 1).executeTakeFirst();
    return Number(row?.n ?? 0);
  }

  /** Publishes a room in the directory, or takes it out; false when there is no such room. */
  async setRoomPublic(roomId: string, isPublic: boolean): Promise<boolean> {
    const result = await this.db.updateTable('rooms').set({ is_public: isPublic ? 1 : 0 }).where('room_id', '=', roomId).executeTakeFirst();
    return Number(result.numUpdatedRows) > 0;
  }

  async insertRoom(room: NewRoomRow): Promise<void> {
    await this.db.insertInto('rooms').values(room).execute();
  }

  /** Where the room's state last changed other than by a new state event: a sync from before it gets the whole state. */
  async setStateReset(roomId: string, position: number): Promise<void> {
    await this.db.updateTable('rooms').set({ state_reset_stream: position }).where('room_id', '=', roomId).execute();
  }

  /** Where the room's DAG ends now. */
  async setRoomHead(roomId: string, head: RoomHeadRow): Promise<void> {
    await setRoomHeadQuery.all(this.db, JSON.stringify(head.extremities), head.depth, head.stateGroup ?? null, roomId);
  }

  /**
   * Writes a state group: a delta of `prevGroup` (the keys changed, null for a key that is gone)
   * or, without one, a full snapshot.
   */
  async insertStateGroup(group: { id: number; roomId: string; prevGroup: number | undefined; deltaDepth: number; entries: ReadonlyArray<[string, string, string | null]> }): Promise<void> {
    await this.db.insertInto('state_groups').values({ id: group.id, room_id: group.roomId, prev_group: group.prevGroup ?? null, delta_depth: group.deltaDepth }).execute();
    // In slices: SQLite caps the number of bound parameters in one statement.
    for (let i = 0; i < group.entries.length; i += 500) {
      const rows = group.entries.slice(i, i + 500).map(([type, stateKey, eventId]) => ({ group_id: group.id, type, state_key: stateKey, event_id: eventId }));
      await this.db.insertInto('state_group_entries').values(rows).execute();
    }
  }

  /** How many deltas a state group is past its snapshot. */
  async stateGroupDepth(groupId: number): Promise<number> {
    const row = await this.db.selectFrom('state_groups').select('delta_depth').where('id', '=', groupId).executeTakeFirst();
    return Number(row?.delta_depth ?? 0);
  }

  /** The newest state group id (state group ids, like stream positions, are handed out in memory). */
  async maxStateGroup(): Promise<number> {
    const row = await this.db.selectFrom('state_groups').select((eb) => eb.fn.max('id').as('id')).executeTakeFirst();
    return Number(row?.id ?? 0);
  }

  /** A state group's chain back to its snapshot, newest first: each group and its entries. */
  async stateGroupChain(groupId: number): Promise<Array<{ id: number; prevGroup: number | null; entries: Array<[string, string, string | null]> }>> {
    const chain: Array<{ id: number; prevGroup: number | null; entries: Array<[string, string, string | null]> }> = [];
    for (let id: number | null = groupId; id !== null; ) {
      const group = await this.db.selectFrom('state_groups').select(['id', 'prev_group']).where('id', '=', id).executeTakeFirst();
      if (!group) break;
      const rows = await this.db.selectFrom('state_group_entries').select(['type', 'state_key', 'event_id']).where('group_id', '=', id).execute();
      chain.push({ id: Number(group.id), prevGroup: group.prev_group === null ? null : Number(group.prev_group), entries: rows.map((row) => [row.type, row.state_key, row.event_id]) });
      id = group.prev_group === null ? null : Number(group.prev_group);
    }
    return chain;
  }

  async getRoom(roomId: string): Promise<RoomRow | undefined> {
    return this.db.selectFrom('rooms').selectAll().where('room_id', '=', roomId).executeTakeFirst();
  }



  /** Search index rows in one INSERT. */
  private searchInsert(rows: ReadonlyArray<{ key: number; value: string; event_id: string; room_id: string; type: string }>): RawBuilder<unknown> {
    const values = sql.join(rows.map((row) => sql`(${row.key}, ${row.value}, ${row.event_id}, ${row.room_id}, ${row.type})`));
    return sql`INSERT INTO event_search (${this.searchKey}, value, event_id, room_id, type) VALUES ${values}`;
  }

  /** The full-text row of an event whose type is searched, or undefined. */
  private searchRowOf(event: Pick<EventRow, 'stream_ordering' | 'event_id' | 'room_id' | 'type' | 'content'>): SearchRow | undefined {
    const searchable = SEARCHED_FIELDS[event.type];
    const value = searchable ? searchedText(event.content, searchable) : undefined;
    if (value === undefined) return undefined;
    // Text with U+0000 is stored escaped in the event's JSON; PostgreSQL's index keeps what it can hold.
    return { key: Number(event.stream_ordering), value: this.postgres ? value.replaceAll('\u0000', '') : value, event_id: event.event_id, room_id: event.room_id, type: event.type };
  }

  /**
   * Stores events with their search and relation index rows, and the new heads of the rooms they
   * went to (whose rows must exist). On PostgreSQL, a batch of messages is one statement: the
   * events, their search rows and the heads (a round trip per statement is what a write costs
   * there); SQLite runs its cached one-row statements, which cost no round trip.
   */
  async insertEvents(events: readonly EventRow[], heads: ReadonlyMap<string, RoomHeadRow> = new Map()): Promise<void> {
    if (events.length === 0 && heads.size === 0) return;
    const searchRows: SearchRow[] = [];
    const relationRows: Array<{ event_id: string; relates_to_id: string; rel_type: string; room_id: string; stream_ordering: number }> = [];
    for (const event of events) {
      const shown = isShown(event);
      const searchRow = this.searchInline && shown ? this.searchRowOf(event) : undefined;
      if (searchRow) searchRows.push(searchRow);
      // Relations are indexed as events arrive; most events have none, and the text says so cheaply.
      const relation = shown && event.content.includes('m.relates_to') ? relationOf(event.content) : undefined;
      if (relation) relationRows.push({ event_id: event.event_id, relates_to_id: relation.eventId, rel_type: relation.relType, room_id: event.room_id, stream_ordering: Number(event.stream_ordering) });
    }
    if (!this.postgres) {
      for (const event of events) await insertEventQuery.all(this.db, ...EVENT_COLUMNS.map((column) => event[column]));
      for (const [roomId, head] of heads) await this.setRoomHead(roomId, head);
    } else if (events.length > 0 && events.length <= ROWS_PER_STATEMENT && searchRows.length <= ROWS_PER_STATEMENT && heads.size <= ROWS_PER_STATEMENT) {
      // The common case, a batch of messages: one statement.
      await this.oneStatement(events, heads, searchRows).execute(this.db);
      searchRows.length = 0;
    } else {
      for (let start = 0; start < events.length; start += ROWS_PER_STATEMENT) {
        await this.db.insertInto('events').values(events.slice(start, start + ROWS_PER_STATEMENT).map((event) => pickColumns(event))).execute();
      }
      for (const [roomId, head] of heads) await this.setRoomHead(roomId, head);
    }
    for (let start = 0; start < searchRows.length; start += ROWS_PER_STATEMENT) {
      await this.searchInsert(searchRows.slice(start, start + ROWS_PER_STATEMENT)).execute(this.db);
    }
    if (relationRows.length > 0) await this.db.insertInto('event_relations').values(relationRows).onConflict((c) => c.doNothing()).execute();
  }

  /**
   * Like `insertEvents` for what `insertsInOneStatement` accepts, in one statement that also moves
   * the stream head, only from where `move` expects it (several processes: `StreamCounter.unlocked`).
   * Returns false, having written nothing, when a key was taken: the head was elsewhere (and the
   * other process's events may hold these positions), or a transaction id was used already (or
   * PostgreSQL broke a deadlock with it). The caller writes the batch again the locked way, which
   * tells those apart.
   */
  async insertEventsMovingHead(events: readonly EventRow[], heads: ReadonlyMap<string, RoomHeadRow>, move: HeadMove): Promise<boolean> {
    if (!this.insertsInOneStatement(events, heads)) throw new Error('insertEventsMovingHead: not a batch for one statement');
    const searchRows = this.searchInline ? events.flatMap((event) => (isShown(event) && this.searchRowOf(event)) || []) : [];
    try {
      await this.oneStatement(events, heads, searchRows, move).execute(this.db);
      return true;
    } catch (err) {
      const code = (err as { code?: unknown } | null)?.code;
      if (code === UNIQUE_VIOLATION || code === DEADLOCK_DETECTED) return false;
      throw err;
    }
  }

  /** Events, their heads and search rows (at most ROWS_PER_STATEMENT of each), and a head move, as one statement. */
  private oneStatement(events: readonly EventRow[], heads: ReadonlyMap<string, RoomHeadRow>, searchRows: readonly SearchRow[], move?: HeadMove): RawBuilder<unknown> {
    const head = move ? headMoveParts(move) : undefined;
    const parts = [...(head?.parts ?? []), sql`stored AS (${this.db.insertInto('events').values(events.map((event) => pickColumns(event)))})`];
    if (heads.size > 0) parts.push(sql`heads AS (${headsUpdate(heads)})`);
    if (searchRows.length > 0 && head) parts.push(sql`searched AS (${this.searchInsert(searchRows)})`);
    const last = head ? head.notify : searchRows.length > 0 ? this.searchInsert(searchRows) : sql`SELECT 1`;
    return sql`WITH ${sql.join(parts)} ${last}`;
  }

  /**
   * The events of a room nearest to a timestamp: at or after it (`f`, oldest first) or at or before
   * it (`b`, newest first). Outliers and rejected events are no part of the room's timeline.
   */
  async eventsNearTime(roomId: string, ts: number, dir: 'b' | 'f', limit: number): Promise<EventRow[]> {
    return this.db
      .selectFrom('events')
      .selectAll()
      .where('room_id', '=', roomId)
      .where('origin_server_ts', dir === 'f' ? '>=' : '<=', ts)
      .where('outlier', '=', 0)
      .where('rejected', 'is', null)
      .where('stream_ordering', '>', 0)
      .orderBy('origin_server_ts', dir === 'f' ? 'asc' : 'desc')
      .orderBy('stream_ordering', dir === 'f' ? 'asc' : 'desc')
      .limit(limit)
      .execute();
  }

  /**
   * Events relating to `eventId` (with `relType`, and of `eventType`), newest first going back
   * (`dir` b) or oldest first going forward, with positions in (after, before).
   */
  async relationsOf(
    eventId: string,
    options: { relType?: string | undefined; eventType?: string | undefined; dir: 'b' | 'f'; before: number; after: number; limit: number },
  ): Promise<EventRow[]> {
    let query = this.db
      .selectFrom('event_relations')
      .innerJoin('events', 'events.event_id', 'event_relations.event_id')
      .selectAll('events')
      .where('event_relations.relates_to_id', '=', eventId)
      .where('event_relations.stream_ordering', '<', options.before)
      .where('event_relations.stream_ordering', '>', options.after);
    if (options.relType !== undefined) query = query.where('event_relations.rel_type', '=', options.relType);
    if (options.eventType !== undefined) query = query.where('events.type', '=', options.eventType);
    return query.orderBy('event_relations.stream_ordering', options.dir === 'b' ? 'desc' : 'asc').limit(options.limit).execute();
  }

  /**
   * A room's threads, most recently active first: the root's id, its newest reply's position, how
   * many replies it has and whether `viewer` sent one; only threads active before `before`.
   * `participatedOnly`: only threads whose root or a reply the viewer sent.
   */
  async threadsOf(roomId: string, options: { before: number; limit: number; viewer: string; participatedOnly: boolean }): Promise<Array<{ rootId: string; latest: number; count: number; viewerReplied: boolean }>> {
    let query = this.threadAggregates(options.viewer)
      .where('event_relations.room_id', '=', roomId)
      .having((eb) => eb.fn.max('event_relations.stream_ordering'), '<', options.before);
    if (options.participatedOnly) {
      const viewer = options.viewer;
      query = query.having((eb) =>
        eb.or([
          eb(eb.fn.max(eb.case().when('events.sender', '=', viewer).then(1).else(0).end()), '=', 1),
          eb.exists(eb.selectFrom('events as root').select('root.event_id').where('root.event_id', '=', eb.ref('event_relations.relates_to_id')).where('root.sender', '=', viewer)),
        ]),
      );
    }
    const rows = await query.orderBy('latest', 'desc').limit(options.limit).execute();
    return rows.map((row) => ({ rootId: row.rootId, latest: Number(row.latest), count: Number(row.count), viewerReplied: Number(row.viewerReplied) === 1 }));
  }

  /** Per thread root: its newest reply's position, its number of replies, whether `viewer` sent one. */
  private threadAggregates(viewer: string) {
    return this.db
      .selectFrom('event_relations')
      .innerJoin('events', 'events.event_id', 'event_relations.event_id')
      .select([
        'event_relations.relates_to_id as rootId',
        (eb) => eb.fn.max('event_relations.stream_ordering').as('latest'),
        (eb) => eb.fn.countAll<number>().as('count'),
        (eb) => eb.fn.max(eb.case().when('events.sender', '=', viewer).then(1).else(0).end()).as('viewerReplied'),
      ])
      .where('event_relations.rel_type', '=', 'm.thread')
      .groupBy('event_relations.relates_to_id');
  }

  /** Which of `eventIds` have relations of the given types: one indexed lookup, before anything costlier. */
  async relatedTypes(eventIds: readonly string[], relTypes: readonly string[]): Promise<Array<{ eventId: string; relType: string }>> {
    if (eventIds.length === 0) return [];
    return this.db
      .selectFrom('event_relations')
      .select(['relates_to_id as eventId', 'rel_type as relType'])
      .distinct()
      .where('relates_to_id', 'in', eventIds)
      .where('rel_type', 'in', relTypes)
      .execute();
  }

  /**
   * Thread summaries of `rootIds` (those with replies): how many replies, the newest reply (a
   * timeline event) and whether `viewer` sent one.
   */
  async threadSummaries(rootIds: readonly string[], viewer: string): Promise<Array<{ rootId: string; count: number; viewerReplied: boolean; latest: EventRow }>> {
    if (rootIds.length === 0) return [];
    const summaries = await this.threadAggregates(viewer).where('event_relations.relates_to_id', 'in', rootIds).where('events.stream_ordering', '>', 0).execute();
    if (summaries.length === 0) return [];
    const latest = await this.db
      .selectFrom('events')
      .selectAll()
      .where('stream_ordering', 'in', summaries.map((row) => Number(row.latest)))
      .execute();
    const byPosition = new Map(latest.map((row) => [Number(row.stream_ordering), row]));
    return summaries.flatMap((row) => {
      const event = byPosition.get(Number(row.latest));
      return event ? [{ rootId: row.rootId, count: Number(row.count), viewerReplied: Number(row.viewerReplied) === 1, latest: event }] : [];
    });
  }

  /**
   * Edits of `eventIds` that may replace them (the spec: same sender, same type, not redacted),
   * newest first by the sender's timestamp, then by event id; at most `limit` in all.
   */
  async replacementsOf(eventIds: readonly string[], limit: number): Promise<Array<{ relatesTo: string; event: EventRow }>> {
    if (eventIds.length === 0) return [];
    const rows = await this.db
      .selectFrom('event_relations')
      .innerJoin('events', 'events.event_id', 'event_relations.event_id')
      .innerJoin('events as original', 'original.event_id', 'event_relations.relates_to_id')
      .selectAll('events')
      .select('event_relations.relates_to_id as relatesTo')
      .where('event_relations.relates_to_id', 'in', eventIds)
      .where('event_relations.rel_type', '=', 'm.replace')
      .whereRef('events.sender', '=', 'original.sender')
      .whereRef('events.type', '=', 'original.type')
      .where('events.redacted_by', 'is', null)
      .where('events.stream_ordering', '>', 0)
      .orderBy('events.origin_server_ts', 'desc')
      .orderBy('events.event_id', 'desc')
      .limit(limit)
      .execute();
    return rows.map(({ relatesTo, ...event }) => ({ relatesTo, event }));
  }

  /** Events that reference (`m.reference`) `eventIds`, oldest first, at most `limit` in all. */
  async referencesOf(eventIds: readonly string[], limit: number): Promise<Array<{ relatesTo: string; event: EventRow }>> {
    if (eventIds.length === 0) return [];
    const rows = await this.db
      .selectFrom('event_relations')
      .innerJoin('events', 'events.event_id', 'event_relations.event_id')
      .selectAll('events')
      .select('event_relations.relates_to_id as relatesTo')
      .where('event_relations.relates_to_id', 'in', eventIds)
      .where('event_relations.rel_type', '=', 'm.reference')
      .where('events.stream_ordering', '>', 0)
      .orderBy('event_relations.stream_ordering', 'asc')
      .limit(limit)
      .execute();
    return rows.map(({ relatesTo, ...event }) => ({ relatesTo, event }));
  }

  async setCurrentState(roomId: string, type: string, stateKey: string, eventId: string): Promise<void> {
    await this.db
      .insertInto('current_state')
      .values({ room_id: roomId, type, state_key: stateKey, event_id: eventId })
      .onConflict((oc) => oc.columns(['room_id', 'type', 'state_key']).doUpdateSet({ event_id: eventId }))
      .execute();
  }

  async deleteCurrentState(roomId: string, type: string, stateKey: string): Promise<void> {
    await this.db.deleteFrom('current_state').where('room_id', '=', roomId).where('type', '=', type).where('state_key', '=', stateKey).execute();
  }

  /** The lowest position on disk (outliers have positions below zero). */
  async minStreamOrdering(): Promise<number> {
    const row = await this.db.selectFrom('events').select((eb) => eb.fn.min('stream_ordering').as('s')).executeTakeFirst();
    return Math.min(0, Number(row?.s ?? 0));
  }

  async setMembership(row: Omit<MembershipRow, 'forgotten'>): Promise<void> {
    await this.db
      .insertInto('memberships')
      .values({ ...row, forgotten: 0 })
      .onConflict((oc) =>
        oc.columns(['room_id', 'user_id']).doUpdateSet({
          membership: row.membership,
          event_id: row.event_id,
          stream_ordering: row.stream_ordering,
          forgotten: 0,
        }),
      )
      .execute();
  }

  async setForgotten(roomId: string, userId: string): Promise<void> {
    await this.db
      .updateTable('memberships')
      .set({ forgotten: 1 })
      .where('room_id', '=', roomId)
      .where('user_id', '=', userId)
      .execute();
  }

  /** The events that make up a room's current state. */
  async currentStateEvents(roomId: string): Promise<EventRow[]> {
    return this.db
      .selectFrom('current_state')
      .innerJoin('events', 'events.event_id', 'current_state.event_id')
      .selectAll('events')
      .where('current_state.room_id', '=', roomId)
      .execute();
  }

  async getEvent(eventId: string): Promise<EventRow | undefined> {
    return eventByIdQuery.first(this.db, eventId);
  }

  // ---- gaps in the timeline (see migration 0025) ----

  /** Notes events missing below a gap (`childDepth`, `childStream`: of the deepest event we hold that names each). */
  async addBackwardExtremities(roomId: string, extremities: ReadonlyArray<BackwardExtremity>): Promise<void> {
    if (extremities.length === 0) return;
    for (let start = 0; start < extremities.length; start += ROWS_PER_STATEMENT) {
      await this.db
        .insertInto('backward_extremities')
        .values(extremities.slice(start, start + ROWS_PER_STATEMENT).map((row) => ({ room_id: roomId, event_id: row.eventId, child_depth: row.childDepth, child_stream: row.childStream, child_visibility: row.childVisibility })))
        .onConflict((c) => c.columns(['room_id', 'event_id']).doNothing())
        .execute();
    }
  }

  /** Forgets the gaps these events filled (they are stored now). */
  async removeBackwardExtremities(roomId: string, eventIds: readonly string[]): Promise<void> {
    for (let start = 0; start < eventIds.length; start += ROWS_PER_STATEMENT) {
      await this.db.deleteFrom('backward_extremities').where('room_id', '=', roomId).where('event_id', 'in', eventIds.slice(start, start + ROWS_PER_STATEMENT)).execute();
    }
  }

  /** A room's backward extremities at or below `maxChildDepth`, the gaps nearest the present first, at most `limit`. */
  async backwardExtremities(roomId: string, limit: number, maxChildDepth = Number.MAX_SAFE_INTEGER): Promise<BackwardExtremity[]> {
    const rows = await this.db
      .selectFrom('backward_extremities')
      .select(['event_id', 'child_depth', 'child_stream', 'child_visibility'])
      .where('room_id', '=', roomId)
      .where('child_depth', '<=', maxChildDepth)
      .orderBy('child_depth', 'desc')
      .orderBy('event_id')
      .limit(limit)
      .execute();
    return rows.map((row) => ({ eventId: row.event_id, childDepth: Number(row.child_depth), childStream: Number(row.child_stream), childVisibility: row.child_visibility }));
  }

  /** Redactions of a room that name any of `eventIds` (stored before their targets), as shown events. */
  async redactionsTargeting(roomId: string, eventIds: readonly string[]): Promise<EventRow[]> {
    const rows: EventRow[] = [];
    for (let start = 0; start < eventIds.length; start += ROWS_PER_STATEMENT) {
      rows.push(
        ...(await this.db
          .selectFrom('events')
          .selectAll()
          .where('redacts', 'in', eventIds.slice(start, start + ROWS_PER_STATEMENT))
          .where('room_id', '=', roomId)
          .where('outlier', '=', 0)
          .where('rejected', 'is', null)
          .where('soft_failed', '=', 0)
          .execute()),
      );
    }
    return rows;
  }

  /** An event held as an outlier becomes backfilled history (it keeps its position below zero). */
  async markBackfilled(eventId: string, historyVisibility: string, visibleAt: number): Promise<void> {
    await this.db.updateTable('events').set({ outlier: 0, backfilled_at: visibleAt, history_visibility: historyVisibility }).where('event_id', '=', eventId).where('outlier', '=', 1).execute();
  }

  async getEvents(eventIds: readonly string[]): Promise<EventRow[]> {
    const rows: EventRow[] = [];
    // In slices: SQLite caps the number of bound parameters in one statement.
    for (let i = 0; i < eventIds.length; i += 5000) {
      rows.push(...(await this.db.selectFrom('events').selectAll().where('event_id', 'in', eventIds.slice(i, i + 5000)).execute()));
    }
    return rows;
  }

  /** The first event `sender` sent in the room after `eventId` that replies to it (m.in_reply_to). */
  async findReply(roomId: string, sender: string, eventId: string): Promise<string | undefined> {
    const row = await this.db
      .selectFrom('events')
      .select('event_id')
      .where('room_id', '=', roomId)
      .where('sender', '=', sender)
      .where('stream_ordering', '>', (eb) => eb.selectFrom('events').select('stream_ordering').where('event_id', '=', eventId))
      .where(jsonText(this.db, 'content', ['m.relates_to', 'm.in_reply_to', 'event_id']), '=', eventId)
      .orderBy('stream_ordering')
      .limit(1)
      .executeTakeFirst();
    return row?.event_id;
  }

  async findEventByTxn(sender: string, deviceId: string, scope: string, txnId: string): Promise<EventRow | undefined> {
    return eventByTxnQuery.first(this.db, sender, deviceId, scope, txnId);
  }

  /** The events written with any of these transaction ids (in one query). */
  async findEventsByTxns(txns: ReadonlyArray<{ sender: string; deviceId: string; scope: string; txnId: string }>): Promise<EventRow[]> {
    if (txns.length === 0) return [];
    return this.db
      .selectFrom('events')
      .selectAll()
      .where((eb) => eb.or(txns.map((txn) => eb.and([eb('sender', '=', txn.sender), eb('txn_device_id', '=', txn.deviceId), eb('txn_scope', '=', txn.scope), eb('txn_id', '=', txn.txnId)]))))
      .execute();
  }

  /**
   * Events of a room with `after < stream_ordering <= upTo`, newest first, at most `limit`.
   * Pass `after` -1 for "from the beginning".
   */
  async eventsNewestFirst(roomId: string, after: number, upTo: number, limit: number): Promise<EventRow[]> {
    return eventsNewestFirstQuery.all(this.db, roomId, after, upTo, limit);
  }

  /**
   * Events of a room in topological order (depth, then position), walking from `from` towards
   * `to`: going back (`b`, newest first) the events at or before `from` and after `to`; going
   * forward (`f`, oldest first) those after `from` and at or before `to` (a token is the point right
   * after the event it names). Positions in (0, maxStream], and backfilled events (below zero), at
   * most `limit`. Outliers, rejected and soft-failed events (positions below zero) are never among them.
   */
  async eventsTopological(roomId: string, dir: 'b' | 'f', from: TopologicalPosition, to: TopologicalPosition | undefined, maxStream: number, limit: number): Promise<EventRow[]> {
    const [below, above] = dir === 'b' ? [from, to] : [to, from];
    let query = this.db
      .selectFrom('events')
      .selectAll()
      .where('room_id', '=', roomId)
      .where((eb) => eb.or([eb('stream_ordering', '>', 0), eb('backfilled_at', 'is not', null)]))
      .where('stream_ordering', '<=', maxStream);
    if (below) query = query.where((eb) => eb.or([eb('depth', '<', below.depth), eb.and([eb('depth', '=', below.depth), eb('stream_ordering', '<=', below.stream)])]));
    if (above) query = query.where((eb) => eb.or([eb('depth', '>', above.depth), eb.and([eb('depth', '=', above.depth), eb('stream_ordering', '>', above.stream)])]));
    const order = dir === 'b' ? 'desc' : 'asc';
    return query.orderBy('depth', order).orderBy('stream_ordering', order).limit(limit).execute();
  }

  /** The greatest depth among a room's shown events at or below a position (0 when none). */
  async maxDepthAtPosition(roomId: string, position: number): Promise<number> {
    const row = await this.db
      .selectFrom('events')
      .select('depth')
      .where('room_id', '=', roomId)
      .where('stream_ordering', '>', 0)
      .where('stream_ordering', '<=', position)
      .orderBy('depth', 'desc')
      .limit(1)
      .executeTakeFirst();
    return Number(row?.depth ?? 0);
  }

  /** Events of a room with `from <= stream_ordering < until`, oldest first, at most `limit`. */
  async eventsOldestFirst(roomId: string, from: number, until: number, limit: number): Promise<EventRow[]> {
    return this.db
      .selectFrom('events')
      .selectAll()
      .where('room_id', '=', roomId)
      .where('stream_ordering', '>=', from)
      .where('stream_ordering', '<', until)
      .orderBy('stream_ordering', 'asc')
      .limit(limit)
      .execute();
  }

  /** The room's state events after a position, oldest first (each names the event it replaced). */
  async stateEventsAfter(roomId: string, position: number): Promise<EventRow[]> {
    return stateEventsAfterQuery.all(this.db, roomId, position);
  }

  /** Where the user's current stay in the room began: their first join after their last non-join. */
  async currentJoinStart(roomId: string, userId: string): Promise<number> {
    const memberEvents = this.db
      .selectFrom('events')
      .where('room_id', '=', roomId)
      .where('type', '=', 'm.room.member')
      .where('state_key', '=', userId);
    const lastOut = memberEvents
      .select((eb) => eb.fn.max('stream_ordering').as('s'))
      .where(jsonText(this.db, 'content', ['membership']), '!=', 'join');
    const row = await memberEvents
      .select((eb) => eb.fn.min('stream_ordering').as('s'))
      .where((eb) => eb('stream_ordering', '>', eb.fn.coalesce(lastOut, eb.val(-1))))
      .executeTakeFirst();
    return Number(row?.s ?? 0);
  }

  /** Every membership event of one user in one room, oldest first: the user's history there. */
  /** Member events of the rooms with a position in (after, upTo]: who, where, and the content. */
  async membershipChanges(roomIds: readonly string[], after: number, upTo: number): Promise<Array<{ room_id: string; state_key: string | null; content: string }>> {
    const rows: Array<{ room_id: string; state_key: string | null; content: string }> = [];
    for (let i = 0; i < roomIds.length; i += 500) {
      rows.push(
        ...(await this.db
          .selectFrom('events')
          .select(['room_id', 'state_key', 'content'])
          .where('room_id', 'in', roomIds.slice(i, i + 500))
          .where('type', '=', 'm.room.member')
          .where('stream_ordering', '>', after)
          .where('stream_ordering', '<=', upTo)
          .execute()),
      );
    }
    return rows;
  }

  async membershipHistory(roomId: string, userId: string): Promise<EventRow[]> {
    return this.db
      .selectFrom('events')
      .selectAll()
      .where('room_id', '=', roomId)
      .where('type', '=', 'm.room.member')
      .where('state_key', '=', userId)
      .orderBy('stream_ordering', 'asc')
      .execute();
  }

  /**
   * Replaces an event's content with its redacted form and records which event redacted it; the
   * state events that replaced it get the redacted form as their prev_content too.
   */
  /**
   * Full-text search in some rooms: the events whose searched text (message body, room name or
   * topic) holds every word of `terms` (as prefixes), best match first or newest first.
   */
  async searchEvents(options: { terms: readonly string[]; roomIds: readonly string[]; types: readonly string[]; orderBy: 'rank' | 'recent'; offset: number; limit: number }): Promise<Array<{ eventId: string; rank: number }>> {
    if (options.terms.length === 0 || options.roomIds.length === 0 || options.types.length === 0) return [];
    // Every term as a prefix. SQLite's FTS5 takes a MATCH string (terms quoted); PostgreSQL a
    // tsquery, where quote_literal keeps a term's punctuation from being query syntax.
    const postgres = this.postgres;
    const key = this.searchKey;
    const prefixes = postgres
      ? sql.join(options.terms.map((term) => sql`to_tsquery('simple', quote_literal(${term}) || ':*')`), sql` && `)
      : options.terms.map((term) => `"${term.replaceAll('"', '""')}"*`).join(' ');
    const source = postgres ? sql`event_search, (SELECT ${prefixes} AS q) AS query` : sql`event_search`;
    const matches = postgres ? sql`words @@ q` : sql`event_search MATCH ${prefixes}`;
    // Lower is better in both: bm25 is negative for a match, ts_rank positive.
    const rank = postgres ? sql`-ts_rank(words, q)` : sql`bm25(event_search)`;
    const order = options.orderBy === 'recent' ? sql`${key} DESC` : sql`rank, ${key} DESC`;
    const rows = await sql<{ event_id: string; rank: number }>`
      SELECT event_id, ${rank} AS rank FROM ${source}
      WHERE ${matches}
        AND room_id IN (${sql.join(options.roomIds)})
        AND type IN (${sql.join(options.types)})
      ORDER BY ${order}
      LIMIT ${options.limit} OFFSET ${options.offset}
    `.execute(this.db);
    return rows.rows.map((row) => ({ eventId: row.event_id, rank: -Number(row.rank) }));
  }

  async markRedacted(eventId: string, content: string, redactedBy: string): Promise<void> {
    // Its text is gone: it is found no more.
    const row = await this.db.selectFrom('events').select('stream_ordering').where('event_id', '=', eventId).executeTakeFirst();
    if (row) await sql`DELETE FROM event_search WHERE ${this.searchKey} = ${row.stream_ordering}`.execute(this.db);
    // A redacted event's content has no m.relates_to any more: it relates to nothing.
    await this.db.deleteFrom('event_relations').where('event_id', '=', eventId).execute();
    await this.db.updateTable('events').set({ content, redacted_by: redactedBy }).where('event_id', '=', eventId).execute();
    await this.db.updateTable('events').set({ prev_content: content }).where('replaces_state', '=', eventId).execute();
  }

  /** Deactivated accounts still joined to, invited to or knocking on a room. */
  async deactivatedUsersInRooms(): Promise<string[]> {
    const rows = await this.db
      .selectFrom('users')
      .innerJoin('memberships', 'memberships.user_id', 'users.user_id')
      .select('users.user_id')
      .distinct()
      .where('users.deactivated', '=', 1)
      .where('memberships.membership', 'in', ['join', 'invite', 'knock'])
      .execute();
    return rows.map((row) => row.user_id);
  }

  async membershipsOfUser(userId: string): Promise<MembershipRow[]> {
    return this.db.selectFrom('memberships').selectAll().where('user_id', '=', userId).execute();
  }

  async latestStreamOfRoom(roomId: string): Promise<number> {
    return newestPosition(this.db, 'events', { column: 'room_id', value: roomId });
  }

  async maxStreamOrdering(): Promise<number> {
    return newestPosition(this.db, 'events');
  }

  /**
   * The events after `after` that may be pushed to a user, oldest first, at most `limit`: in the
   * rooms the user is joined to now, after the member event of that join (never history from before
   * it; a profile change while a pusher lags also counts as that start), and invites of the user;
   * from others, accepted, not soft-failed, not backfilled history. `upTo`: the readable position.
   */
  async pushCandidates(userId: string, after: number, upTo: number, limit: number): Promise<EventRow[]> {
    return this.db
      .selectFrom('events')
      .selectAll()
      .where('stream_ordering', '>', after)
      .where('stream_ordering', '<=', upTo)
      .where((eb) =>
        eb.or([
          eb.and([
            eb('outlier', '=', 0),
            eb.exists(
              eb
                .selectFrom('memberships')
                .select('memberships.room_id')
                .where('memberships.user_id', '=', userId)
                .where('memberships.membership', '=', 'join')
                .whereRef('memberships.room_id', '=', 'events.room_id')
                .whereRef('memberships.stream_ordering', '<', 'events.stream_ordering'),
            ),
          ]),
          // An invite over federation is an outlier in a room this server may not hold.
          eb.and([eb('type', '=', 'm.room.member'), eb('state_key', '=', userId)]),
        ]),
      )
      .where('sender', '!=', userId)
      .where('rejected', 'is', null)
      .where('soft_failed', '=', 0)
      .where('backfilled_at', 'is', null)
      .orderBy('stream_ordering', 'asc')
      .limit(limit)
      .execute();
  }

  /**
   * The events that may notify a user in a room: from others, not redacted, up to `upTo` and after
   * the later of `floor` and the event of the user's furthest read receipt (public or private),
   * newest first, at most `limit`. Push rules decide which of them count.
   */
  async unreadCandidates(roomId: string, userId: string, floor: number, upTo: number, limit: number): Promise<Array<Pick<EventRow, 'type' | 'state_key' | 'sender' | 'content'>>> {
    // The receipt that reaches furthest, public or private, whichever was sent last.
    const receiptStream = this.db
      .selectFrom('receipts')
      .innerJoin('events', 'events.event_id', 'receipts.event_id')
      .select((eb) => eb.fn.max('events.stream_ordering').as('s'))
      .where('receipts.room_id', '=', roomId)
      .where('receipts.user_id', '=', userId)
      .where('receipts.receipt_type', 'in', ['m.read', 'm.read.private']);
    return this.db
      .selectFrom('events')
      .select(['type', 'state_key', 'sender', 'content'])
      .where('room_id', '=', roomId)
      .where('stream_ordering', '>', floor)
      .where('stream_ordering', '<=', upTo)
      .where((eb) => eb('stream_ordering', '>', eb.fn.coalesce(receiptStream, eb.val(0))))
      .where('sender', '!=', userId)
      .where('redacted_by', 'is', null)
      .orderBy('stream_ordering', 'desc')
      .limit(limit)
      .execute();
  }

  async getAlias(alias: string): Promise<{ room_id: string; creator: string } | undefined> {
    return this.db.selectFrom('room_aliases').select(['room_id', 'creator']).where('alias', '=', alias).executeTakeFirst();
  }

  /** False when the alias is taken. */
  async insertAlias(alias: string, roomId: string, creator: string): Promise<boolean> {
    const result = await this.db
      .insertInto('room_aliases')
      .values({ alias, room_id: roomId, creator })
      .onConflict((oc) => oc.column('alias').doNothing())
      .executeTakeFirst();
    return Number(result.numInsertedOrUpdatedRows ?? 0) > 0;
  }

  async deleteAlias(alias: string): Promise<void> {
    await this.db.deleteFrom('room_aliases').where('alias', '=', alias).execute();
  }

  async aliasesOfRoom(roomId: string): Promise<string[]> {
    const rows = await this.db.selectFrom('room_aliases').select('alias').where('room_id', '=', roomId).execute();
    return rows.map((r) => r.alias);
  }
}

/** The `m.relates_to` of an event's content text, when it names an event and a `rel_type`. */
function relationOf(content: string): { eventId: string; relType: string } | undefined {
  try {
    const relation = (JSON.parse(content) as { 'm.relates_to'?: { event_id?: unknown; rel_type?: unknown } })['m.relates_to'];
    if (typeof relation?.event_id === 'string' && typeof relation.rel_type === 'string') return { eventId: relation.event_id, relType: relation.rel_type };
  } catch {
    // Stored content is JSON we wrote; a broken one just has no relation.
  }
  return undefined;
}

/** What full-text search reads of each event type it indexes. */
const SEARCHED_FIELDS: Record<string, string> = { 'm.room.message': 'body', 'm.room.name': 'name', 'm.room.topic': 'topic' };

function searchedText(content: string, field: string): string | undefined {
  try {
    const value = (JSON.parse(content) as Record<string, unknown>)[field];
    return typeof value === 'string' && value !== '' ? value : undefined;
  } catch {
    return undefined;
  }
}
