/**
 * `GET /sync`: what changed for one user since a token, waiting for news when there is none.
 *
 * A sync reads everything up to the stream's committed position at its start and returns that
 * position as `next_batch`; the notifier serial is read before looking, so a change that commits
 * while the sync looks wakes it at once (see notifier.ts).
 */
import { MatrixError } from '../core/errors.js';
import { toStrippedState, type ClientEvent, type JsonObject, type StoredEvent, type Viewer } from '../rooms/events.js';
import type { RoomCache, UserRoom } from '../rooms/room-cache.js';
import { pduOf } from '../rooms/pdu.js';
import { isIgnored, notInRoom, topologicalToken, type RoomReader } from '../rooms/room-reader.js';
import type { RoomSnapshot } from '../rooms/room-snapshot.js';
import { membershipAt, type MembershipChange, type VisibilityContext } from '../rooms/visibility.js';
import { BoundedCache } from '../core/bounded-cache.js';
import { GLOBAL_ACCOUNT_DATA, type AccountDataRow, type Storage } from '../storage/index.js';
import type { Requester } from '../users/session-service.js';
import { assertFilterIds, compileFilter, DEFAULT_TIMELINE_LIMIT, parseInlineFilter, parseStoredFilter, type CompiledFilter, type FilterDefinition } from './filters.js';
import type { Notifier } from './notifier.js';
import type { ToDeviceService } from './to-device.js';
import type { PresenceService, PresenceState } from './presence.js';
import { formatSyncToken, parseSyncToken, type StreamCounter, type SyncToken } from './stream.js';
import type { TypingTracker } from './typing.js';
import type { UnreadCounts } from './unread.js';
import type { KeysService } from '../e2e/keys-service.js';
import type { AccountDataService } from '../account-data/account-data-service.js';
import { parseStoredJson } from '../core/json.js';

/** State events a user sees about a room they are invited to (the spec's recommended set). */


export interface SyncRequest {
  requester: Requester;
  since: string | undefined;
  timeoutMs: number;
  fullState: boolean;
  filter: string | undefined;
  /** A filter already checked, given by the server itself (the bridge); replaces `filter`. */
  filterDefinition?: FilterDefinition | undefined;
  signal?: AbortSignal | undefined;
  /** `set_presence`: what this sync says of the user's presence (default online). */
  setPresence?: PresenceState | undefined;
  /**
   * For the legacy APIs built on sync (`/events`, `/initialSync`): the device's to-device inbox and
   * key counts are left alone, so that they stay for the device's `/sync`.
   */
  legacy?: boolean | undefined;
  /**
   * With no `since`: start from now, once this sync's own presence change is written (the legacy
   * `/events` without `from`), so that the change is not news to it; called with that token.
   */
  fromNow?: ((token: string) => void) | undefined;
  /**
   * Peeking (the legacy `/events?room_id=`): this room comes as if the user were joined, with
   * what history visibility lets a non-member see, and its members' presence, when the user is
   * not joined to it; 403 unless it is world-readable then. Only that room's presence comes.
   */
  peek?: string | undefined;
}

/** The one room a legacy `/events?room_id=` is about: whose members' presence alone comes. */
interface Peek {
  roomId: string;
  /** The user is (or was) in it: it comes as their other rooms do, not as a peek. */
  member: boolean;
}

interface BuiltSync {
  body: JsonObject;
  empty: boolean;
}

/** Held in place of an empty answer while a sync waits. */
const EMPTY: BuiltSync = Object.freeze({ body: Object.freeze({}), empty: true });
/** Stands for a filter id that names no stored filter. */
const UNKNOWN_FILTER: FilterDefinition = {};
/** At most about 1,000 x 2 KB of filter text held. */
const MAX_COMPILED_FILTERS = 1_000;
/** Stored filters are small; a larger one is a mistake or an attack. */
const MAX_FILTER_BYTES = 65_536;
const MAX_CACHED_FILTER_TEXT = 2_048;

export class SyncService {
  constructor(
    private readonly storage: Storage,
    private readonly cache: RoomCache,
    private readonly reader: RoomReader,
    private readonly stream: StreamCounter,
    private readonly notifier: Notifier,
    private readonly typing: TypingTracker,
    private readonly unread: UnreadCounts,
    private readonly accountData: AccountDataService,
    private readonly toDevice: ToDeviceService,
    private readonly presence: PresenceService,
    /** The user's push rules, which an initial sync carries as `m.push_rules` (as Synapse's does). */
    private readonly pushRules: (userId: string) => Promise<JsonObject> = async () => ({}),
    /** End-to-end encryption: whose device lists changed, the device's key counts. */
    private readonly keys?: KeysService | undefined,
  ) {}

  /**
   * Compiled filters (none, inline JSON, or a user's filter id), so that parked syncs share one
   * instead of holding a compiled copy each. Stored filters never change once created.
   */
  private readonly compiledFilters = new BoundedCache<string, CompiledFilter>(MAX_COMPILED_FILTERS);

  /**
   * Member events each device was sent in lazy-loading syncs, per room (Synapse keeps the same),
   * so that a member the device has is not sent again. Bounded: a device forgotten here just gets
   * some members again. An initial sync starts a device's room afresh.
   */
  private readonly lazyMembers = new BoundedCache<string, Set<string>>(MAX_LAZY_MEMBER_SETS);

  private lazyMembersSent(viewer: Viewer, roomId: string, fresh: boolean): Set<string> {
    const key = `${viewer.userId}\u0000${viewer.deviceId}\u0000${roomId}`;
    let sent = fresh ? undefined : this.lazyMembers.get(key);
    if (!sent) {
      sent = new Set();
      this.lazyMembers.set(key, sent);
    }
    // One set must not grow without end in a huge, busy room.
    if (sent.size > MAX_LAZY_MEMBERS_PER_SET) sent.clear();
    return sent;
  }

  async sync(request: SyncRequest): Promise<JsonObject> {
    const ended = await this.presence.syncStarted(request.requester.userId, request.setPresence);
    try {
      if (request.since === undefined && request.fromNow) {
        const now = this.currentToken();
        request.fromNow(now);
        return await this.syncFor({ ...request, since: now });
      }
      return await this.syncFor(request);
    } finally {
      ended();
    }
  }

  private async syncFor(request: SyncRequest): Promise<JsonObject> {
    if (request.peek === undefined) return this.syncWith(request, undefined);
    const userId = request.requester.userId;
    const room = await this.reader.roomOrForbidden(request.peek, userId);
    if (room.isJoined(userId)) return this.syncWith(request, { roomId: request.peek, member: true });
    if (room.historyVisibility() !== 'world_readable') {
      // A former member (or one invited) reads the room as any sync shows it them: up to leaving.
      if ((await this.cache.roomsOf(userId)).has(request.peek)) return this.syncWith(request, { roomId: request.peek, member: true });
      throw notInRoom(userId, request.peek);
    }
    // Woken with the room's members while parked; nothing is kept once the request ends.
    const stop = this.notifier.peek(request.peek, request.requester.userId);
    try {
      return await this.syncWith(request, { roomId: request.peek, member: false });
    } finally {
      stop();
    }
  }

  private async syncWith(request: SyncRequest, peek: Peek | undefined): Promise<JsonObject> {
    const userId = request.requester.userId;
    const filter = request.filterDefinition ? compileFilter(request.filterDefinition) : await this.compiledFilter(userId, request.filter);
    let since = parseSyncToken(request.since);
    let echo = request.since;
    if (since && since.stream > this.stream.current) {
      // A token from a newer database than ours (restored backup, wiped data): go on from now,
      // and hand back a token of ours so the client moves off the stale one.
      since = { stream: this.stream.current, typing: since.typing };
      echo = formatSyncToken(since);
    }
    const deadline = performance.now() + request.timeoutMs;
    let serial = this.notifier.serialOf(userId);
    let built = await this.build(request.requester, since, filter, request.fullState, request.legacy === true, peek);
    // The first sync, and any sync with news, returns at once.
    while (since && built.empty && !request.signal?.aborted) {
      const remaining = deadline - performance.now();
      if (remaining <= 0) break;
      // The empty answer is not kept while waiting (thousands of syncs may be parked): after a
      // timeout it is built again, with anything that came in at the last moment.
      built = EMPTY;
      await this.notifier.waitForChange(userId, serial, remaining, request.signal);
      if (request.signal?.aborted) return {}; // the client left: nobody reads the answer
      const woken = this.notifier.serialOf(userId) !== serial;
      serial = this.notifier.serialOf(userId);
      built = await this.build(request.requester, since, filter, request.fullState, request.legacy === true, peek);
      if (!woken) break; // timed out
    }
    // Nothing new: the same token back, so a client's position does not move past unseen events.
    if (built.empty && since && echo !== undefined) built.body.next_batch = echo;
    return built.body;
  }

  /** `POST /user/{userId}/filter`: stores a filter (validated by the route's schema); its id. */
  async createFilter(userId: string, definition: FilterDefinition): Promise<string> {
    assertFilterIds(definition);
    const text = JSON.stringify(definition);
    if (Buffer.byteLength(text) > MAX_FILTER_BYTES) throw new MatrixError('M_TOO_LARGE', 'Filter is too large');
    return String(await this.storage.userData.insertFilter(userId, text));
  }

  /** `GET /user/{userId}/filter/{filterId}`: the filter as stored. */
  async storedFilter(userId: string, filterId: string): Promise<FilterDefinition> {
    const stored = /^\d{1,15}$/.test(filterId) ? await this.storage.userData.getFilter(userId, Number(filterId)) : undefined;
    if (stored === undefined) throw new MatrixError('M_NOT_FOUND', 'No such filter');
    return parseStoredFilter(stored);
  }

  private async compiledFilter(userId: string, filter: string | undefined): Promise<CompiledFilter> {
    // No filter and inline filters mean the same for everyone; a filter id is the user's own.
    const key = filter === undefined || filter === '' ? '' : filter.trimStart().startsWith('{') ? filter : `${userId}\u0000${filter}`;
    const known = this.compiledFilters.get(key);
    if (known) return known;
    const { definition, textLength } = await this.resolveFilter(userId, filter);
    const compiled = compileFilter(definition);
    // A filter id with no stored filter syncs unfiltered; it is not remembered, in case it is made
    // later. Nor are long filters, inline or stored: the cache must not become a way to fill memory
    // (a compiled filter keeps only the fields it acts on, so it is about the size of its text).
    if (definition !== UNKNOWN_FILTER && textLength <= MAX_CACHED_FILTER_TEXT) this.compiledFilters.set(key, compiled);
    return compiled;
  }

  private async resolveFilter(userId: string, filter: string | undefined): Promise<{ definition: FilterDefinition; textLength: number }> {
    if (filter === undefined || filter === '') return { definition: {}, textLength: 0 };
    if (filter.trimStart().startsWith('{')) return { definition: parseInlineFilter(filter), textLength: filter.length };
    if (!/^\d{1,15}$/.test(filter)) throw new MatrixError('M_INVALID_PARAM', 'filter must be a filter id or JSON');
    const stored = await this.storage.userData.getFilter(userId, Number(filter));
    // A filter id the client kept from a database we no longer have: sync unfiltered rather than fail forever.
    if (stored === undefined) return { definition: UNKNOWN_FILTER, textLength: 0 };
    return { definition: parseStoredFilter(stored), textLength: stored.length };
  }

  /** The token of now: what a sync starting now would answer with nothing new. */
  currentToken(): string {
    return formatSyncToken({ stream: this.stream.current, typing: this.typing.serial });
  }

  private async build(requester: Requester, since: SyncToken | undefined, filter: CompiledFilter, fullState: boolean, legacy = false, peek?: Peek): Promise<BuiltSync> {
    const userId = requester.userId;
    const viewer: Viewer = { userId, deviceId: requester.deviceId };
    const upTo = this.stream.current;
    const typingSerial = this.typing.serial;
    const after = since?.stream ?? -1;

    const accountData = (await this.accountData.latestPosition(userId)) > after ? await this.storage.userData.accountDataChanged(userId, after, upTo) : [];
    const roomAccountData = new Map<string, AccountDataRow[]>();
    const globalAccountData: JsonObject[] = [];
    for (const row of accountData) {
      if (row.room_id === GLOBAL_ACCOUNT_DATA) {
        if (filter.accountData.matches({ type: row.type, sender: userId })) {
          globalAccountData.push({ type: row.type, content: parseStoredJson<JsonObject>(row.content, {}) });
        }
      } else {
        const list = roomAccountData.get(row.room_id) ?? [];
        list.push(row);
        roomAccountData.set(row.room_id, list);
      }
    }
    // Clients read their push rules from an initial sync; the defaults are nowhere stored until
    // the user changes one, so they are added here.
    if (!since && !globalAccountData.some((e) => e.type === 'm.push_rules') && filter.accountData.matches({ type: 'm.push_rules', sender: userId })) {
      globalAccountData.push({ type: 'm.push_rules', content: await this.pushRules(userId) });
    }

    const join: Record<string, JsonObject> = {};
    const invite: Record<string, JsonObject> = {};
    const leave: Record<string, JsonObject> = {};
    const knock: Record<string, JsonObject> = {};
    const rooms = await this.cache.roomsOf(userId);
    const ignored = await this.accountData.ignoredUsers(userId);
    // Users this sync shows the user coming to share a room with: their presence comes too.
    const newlyShared = new Set<string>();
    for (const [roomId, entry] of rooms) {
      if (entry.forgotten || !filter.includesRoom(roomId) || (peek?.member === false && roomId === peek.roomId)) continue;
      // Most of a bot's rooms are quiet between two syncs: skipped here without a promise each,
      // which a sync over a thousand rooms would otherwise spend most of its time on.
      if (since && !fullState && entry.membership === 'join' && entry.stream <= since.stream && !roomAccountData.has(roomId)) {
        const loaded = this.cache.peek(roomId);
        if (loaded && this.quietSince(loaded, since)) continue;
      }
      const room = await this.cache.room(roomId);
      // An invite to (or its rejection in) a room of another server this server is not in.
      if (!room || (entry.membership !== 'join' && room.membership(userId) !== entry.membership)) {
        const pending = entry.membership === 'invite' || entry.membership === 'knock';
        const include = pending ? !since || fullState || entry.stream > since.stream : since ? entry.stream > since.stream : filter.includeLeave;
        const section = include ? await this.outOfRoomSection(roomId, userId, entry.membership, ignored) : undefined;
        if (section) (entry.membership === 'invite' ? invite : entry.membership === 'knock' ? knock : leave)[roomId] = section;
        continue;
      }
      const context: RoomContext = { room, entry, since, upTo, typingSerial, filter, viewer, fullState, accountData: roomAccountData.get(roomId) ?? [], ignored, newlyShared };
      if (entry.membership === 'join') {
        const section = await this.joinedRoom(context);
        if (section) join[roomId] = section;
      } else if (entry.membership === 'invite') {
        // An invite from someone the user ignores is not shown (the spec's ignoring users).
        const inviter = room.get('m.room.member', userId)?.sender;
        if (inviter !== undefined && ignored.has(inviter)) continue;
        if (!since || fullState || entry.stream > since.stream) invite[roomId] = this.invitedRoom(room, userId);
        if (since && entry.stream > since.stream) {
          // Removed and invited again between two syncs: the client must also learn it left.
          const history = (await this.reader.visibilityFor(room, userId)).history;
          const left = history.filter((c) => c.stream > since.stream && (c.membership === 'leave' || c.membership === 'ban')).at(-1);
          if (left && membershipAt(history, since.stream) === 'join') {
            const section = await this.leftRoom({ ...context, entry: { ...entry, stream: left.stream } });
            if (section) leave[roomId] = section;
          }
        }
      } else if (entry.membership === 'knock') {
        if (!since || fullState || entry.stream > since.stream) knock[roomId] = this.knockedRoom(room, userId);
      } else if (entry.membership === 'leave' || entry.membership === 'ban') {
        const include = since ? entry.stream > since.stream || (fullState && filter.includeLeave) : filter.includeLeave;
        if (include && entry.stream <= upTo) {
          const section = await this.leftRoom(context);
          if (section) leave[roomId] = section;
        }
      }
    }

    // The peeked room, as a joined room whose every event is checked against history visibility.
    let peekedMembers: ReadonlySet<string> = new Set();
    const peeked = peek ? await this.cache.room(peek.roomId) : undefined;
    if (peeked) peekedMembers = new Set(peeked.joinedUsers());
    if (peeked && !peek!.member) {
      const entry: UserRoom = { membership: 'join', stream: -1, forgotten: false };
      const context: RoomContext = { room: peeked, entry, since, upTo, typingSerial, filter, viewer, fullState, accountData: [], ignored, newlyShared, peeking: true };
      const section = await this.joinedRoom(context);
      if (section) join[peeked.roomId] = section;
    }

    const toDevice = legacy ? { events: [] } : await this.toDevice.forSync(userId, requester.deviceId, since?.stream, upTo);
    const presence = (await this.presence.forSync(userId, since?.stream, upTo, newlyShared, peekedMembers))
      .filter((e) => filter.presence.matches({ type: 'm.presence', sender: String(e.sender) }))
      .filter((e) => !peek || peekedMembers.has(String(e.sender)));
    const changedDevices = since && this.keys && !legacy ? await this.keys.changedFor(userId, since.stream, upTo, await this.usersWhoMayHaveJoined(userId, join)) : [];
    const leftDevices = since && this.keys && !legacy ? await this.keys.leftOf(userId, await this.usersWhoMayHaveLeft(userId, join, Object.keys(leave))) : [];
    const keyCounts = this.keys ? await this.keys.countsFor({ userId, deviceId: requester.deviceId }) : { counts: {}, fallbackTypes: [] };
    const empty =
      Object.keys(join).length === 0 &&
      Object.keys(invite).length === 0 &&
      Object.keys(leave).length === 0 &&
      Object.keys(knock).length === 0 &&
      globalAccountData.length === 0 &&
      toDevice.events.length === 0 &&
      presence.length === 0 &&
      changedDevices.length === 0 &&
      leftDevices.length === 0;
    return {
      empty,
      body: {
        next_batch: formatSyncToken({ stream: upTo, typing: typingSerial }),
        rooms: { join, invite, leave, knock },
        account_data: { events: globalAccountData },
        presence: { events: presence },
        to_device: { events: toDevice.events },
        device_lists: { changed: changedDevices, left: leftDevices },
        device_one_time_keys_count: keyCounts.counts,
        device_unused_fallback_key_types: keyCounts.fallbackTypes,
      },
    };
  }

  /**
   * Users whose devices may be new to the syncing user since the token: those this answer shows
   * joining a joined room, and the members of the rooms it shows the user joining (a profile
   * change is a join too: counted, as Synapse counts it).
   */
  private async usersWhoMayHaveJoined(userId: string, join: Record<string, JsonObject>): Promise<Set<string>> {
    const users = new Set<string>();
    for (const [roomId, section] of Object.entries(join)) {
      const events = [...(((section.timeline as JsonObject | undefined)?.events ?? []) as JsonObject[]), ...(((section.state as JsonObject | undefined)?.events ?? []) as JsonObject[])];
      for (const event of events) {
        if (event.type !== 'm.room.member' || typeof event.state_key !== 'string' || (event.content as JsonObject | undefined)?.membership !== 'join') continue;
        if (event.state_key !== userId) users.add(event.state_key);
        else for (const member of (await this.cache.room(roomId))?.joinedUsers() ?? []) users.add(member);
      }
    }
    return users;
  }

  /**
   * Users the syncing user may have stopped sharing every room with since the token: those this
   * answer shows leaving (or banned from) a joined room, and the members of the rooms the user
   * left. `device_lists.left` is those of them who share no room with the user any more.
   */
  private async usersWhoMayHaveLeft(userId: string, join: Record<string, JsonObject>, leftRooms: readonly string[]): Promise<Set<string>> {
    const users = new Set<string>();
    for (const section of Object.values(join)) {
      const events = [...(((section.timeline as JsonObject | undefined)?.events ?? []) as JsonObject[]), ...(((section.state as JsonObject | undefined)?.events ?? []) as JsonObject[])];
      for (const event of events) {
        const membership = (event.content as JsonObject | undefined)?.membership;
        if (event.type === 'm.room.member' && typeof event.state_key === 'string' && event.state_key !== userId && (membership === 'leave' || membership === 'ban')) users.add(event.state_key);
      }
    }
    for (const roomId of leftRooms) for (const member of (await this.cache.room(roomId))?.joinedUsers() ?? []) if (member !== userId) users.add(member);
    return users;
  }

  /** Nothing happened in the room since the token: no event, receipt or typing change. */
  private quietSince(room: RoomSnapshot, since: SyncToken): boolean {
    return room.latestStream <= since.stream && !this.typing.changedSince(room.roomId, since.typing);
  }

  private async joinedRoom(context: RoomContext): Promise<JsonObject | undefined> {
    const { room, entry, since, upTo, filter, viewer } = context;
    const userId = viewer.userId;
    // A room is new to this sync when there is no token or the user joined after it (a profile
    // change is a join too, so the membership at the token decides); then it comes whole.
    let fresh = !since;
    let visibility: VisibilityContext | undefined;
    if (!since || entry.stream > since.stream || context.peeking) {
      // The user's membership changed since the token (or there is none), or they peek: what they
      // may see of the room is checked event by event. Otherwise they were joined throughout.
      visibility = await this.reader.visibilityFor(room, userId);
      // New to this sync unless joined at the token and ever since (a profile change is a join too).
      // A peek goes on from its token like a member's sync.
      if (since && !context.peeking) fresh = membershipAt(visibility.history, since.stream) !== 'join' || leftSince(visibility.history, since.stream);
    }
    const fullState = fresh || context.fullState;
    if (!fullState && this.quietSince(room, since!) && context.accountData.length === 0) return undefined;
    const typingChanged = this.typing.changedSince(room.roomId, fresh ? -1 : since!.typing);

    const limit = filter.timeline.limit ?? DEFAULT_TIMELINE_LIMIT;
    const page = await this.reader.pageBackwards(room, {
      before: upTo,
      stopAt: fresh ? -1 : since!.stream,
      limit,
      visibility,
      matches: (e) => !isIgnored(context.ignored, e) && filter.timeline.matches(e),
      stopAtGap: true,
      // The room's current state shows in the timeline even when set while the user could not see
      // the room's history (as Synapse does, for clients that build the state from the timeline).
      alwaysVisible: (e) => e.stateKey !== undefined && e.rejected === undefined && room.get(e.type, e.stateKey)?.eventId === e.eventId,
    });
    let timelineEvents = page.events.reverse();
    const firstStream = timelineEvents[0]?.stream ?? upTo + 1;
    // An unfiltered, unlimited timeline of a user joined throughout holds every change since the
    // token: there is no state to add. Otherwise the state is derived (see stateDelta).
    // (Not when state resolution changed the state since the token other than by new events.)
    const stateReset = since !== undefined && room.stateResetStream > since.stream;
    const timelineHoldsEverything = !fullState && !stateReset && !page.more && !filter.timeline.restrictive && visibility === undefined;
    const stateEvents = timelineHoldsEverything
      ? []
      : await this.stateDelta(room, timelineEvents, firstStream, upTo, fullState ? undefined : since!.stream);
    // A state key whose last change the user could not see (history visibility; a filter or an
    // ignore list can do the same) would end, applied after the state, at an older event of the
    // timeline: "invited" for someone who has joined since. That key's events leave the timeline
    // and its current event goes in the state, so state and timeline end in the true state.
    const stale = supersededKeys(room, timelineEvents, upTo);
    if (stale.size > 0) {
      timelineEvents = timelineEvents.filter((e) => e.stateKey === undefined || !stale.has(stateKeyOf(e)));
      for (const key of stale) {
        const current = room.get(key.slice(0, key.indexOf('\u0000')), key.slice(key.indexOf('\u0000') + 1))!;
        const at = stateEvents.findIndex((e) => stateKeyOf(e) === key);
        if (at >= 0) stateEvents.splice(at, 1, current);
        else stateEvents.push(current);
      }
    }
    const ephemeral = (await this.ephemeral(room, fresh ? undefined : since, upTo, typingChanged, userId)).filter((e) =>
      filter.ephemeral.typeAllowed(String(e.type)),
    );

    // A timeline that found nothing but stopped scanning early (a filter matching little in a long
    // run of other events) still comes, limited, so the client knows there is a gap to fill.
    // (State the filter leaves out counts as none: a profile change of one's own under a filter
    // without members is no news.)
    const anyState = stateEvents.some((e) => filter.state.matches(e));
    if (!fullState && timelineEvents.length === 0 && !page.more && !anyState && ephemeral.length === 0 && context.accountData.length === 0) {
      return undefined;
    }
    if (since) {
      if (fresh) for (const member of room.joinedUsers()) context.newlyShared.add(member);
      else {
        for (const e of [...stateEvents, ...timelineEvents]) {
          if (e.type === 'm.room.member' && e.stateKey !== undefined && e.stream > since.stream && e.content.membership === 'join' && e.prevContent?.membership !== 'join') {
            context.newlyShared.add(e.stateKey);
          }
        }
      }
    }
    const lazyMembers = filter.state.lazyLoadMembers || filter.timeline.lazyLoadMembers;
    const senders = new Set(timelineEvents.map((e) => e.sender));
    senders.add(userId);
    // Lazy loading: the whole state (a new room, full_state) keeps only the members of the
    // timeline's senders; an incremental one keeps every membership change of the gap, which the
    // client cannot learn from anything else.
    const state = stateEvents.filter(
      (e) => filter.state.matches(e) && (!lazyMembers || !fullState || e.type !== 'm.room.member' || senders.has(e.stateKey ?? '')),
    );
    if (lazyMembers) {
      const sentToDevice = this.lazyMembersSent(viewer, room.roomId, fresh);
      const redundantWanted = filter.state.includeRedundantMembers || filter.timeline.includeRedundantMembers;
      if (!fullState) {
        // The member events of this timeline's senders, unless here already or (without
        // include_redundant_members) sent to this device before.
        const present = new Set([...state, ...timelineEvents].filter((e) => e.type === 'm.room.member').map((e) => e.stateKey));
        for (const sender of senders) {
          const member = room.get('m.room.member', sender);
          if (!member || present.has(sender) || member.stream > upTo || sender === userId) continue;
          if (!redundantWanted && sentToDevice.has(member.eventId)) continue;
          state.push(member);
        }
      }
      for (const e of [...state, ...timelineEvents]) if (e.type === 'm.room.member') sentToDevice.add(e.eventId);
    }
    return {
      timeline: {
        // Bundled aggregations where the spec asks for them: limited timelines.
        events: await this.renderFor(timelineEvents, viewer, filter, page.more ? { visibility } : undefined),
        // A room newly joined since the token is limited whatever came (as Synapse marks it): the
        // client has no timeline of it to go on from, and pages back from prev_batch.
        limited: page.more || (since !== undefined && fresh),
        prev_batch: await this.prevBatch(room, page.gapBefore, timelineEvents[0], firstStream),
      },
      state: { events: await this.renderFor(state, viewer, filter) },
      ephemeral: { events: ephemeral },
      account_data: {
        events: context.accountData
          .filter((row) => filter.roomAccountData.matches({ type: row.type, sender: userId, roomId: room.roomId }))
          .map((row) => ({ type: row.type, content: parseStoredJson<JsonObject>(row.content, {}) })),
      },
      // A peek (the legacy event stream, which has neither) counts nothing and keeps no count.
      ...(context.peeking
        ? {}
        : {
            summary: this.summary(room, userId),
            // An unfiltered, unlimited incremental timeline holds every new event: counts carry forward.
            unread_notifications: await this.unread.countsAt(
              room,
              userId,
              upTo,
              context.ignored,
              !fresh && !page.more && !filter.timeline.restrictive ? { after: since!.stream, events: timelineEvents } : undefined,
            ),
          }),
    };
  }

  /**
   * Where a client pages back from the timeline's start: a stream token, as Synapse gives, unless
   * the timeline stopped at a gap (events that came late from another server, `gapBefore`). Then
   * the stream position would skip the gap's events (they are deeper than anything before it in
   * arrival order), so the token is a place in the room's order: right before the timeline's
   * first event, but no shallower than the deepest event that arrived before it (on a fork, those
   * can be deeper than the gap; some of the timeline then comes again, as with a stream token).
   */
  private async prevBatch(room: RoomSnapshot, gapBefore: StoredEvent | undefined, first: StoredEvent | undefined, firstStream: number): Promise<string> {
    if (!gapBefore) return formatSyncToken({ stream: firstStream - 1, typing: 0 });
    const start = first ?? gapBefore;
    const arrivedBefore = await this.reader.topologicalAt(room, start.stream - 1);
    return topologicalToken({ depth: Math.max(start.depth, arrivedBefore.depth), stream: start.stream - 1 });
  }

  /**
   * The state a client needs beside the timeline, as Synapse computes it: the state at the
   * timeline's start and at its end, minus what the client had at the token and what the timeline
   * itself carries. That covers the gap before a limited timeline and the changes a filter or
   * history visibility kept out of it. One event per state key, the newest.
   *
   * With a token, only keys changed since it can differ, so only the changes since are read.
   */
  private async stateDelta(room: RoomSnapshot, timeline: StoredEvent[], firstStream: number, upTo: number, previousPosition: number | undefined): Promise<StoredEvent[]> {
    const inTimeline = new Set(timeline.map((e) => e.eventId));
    const candidates: StoredEvent[] = [];
    // State resolution changed the state since the token other than by new events: the client
    // gets it all again (what it had may have been replaced by older events, or dropped).
    if (previousPosition !== undefined && room.stateResetStream > previousPosition) {
      candidates.push(...room.stateEvents());
    } else if (previousPosition === undefined) {
      candidates.push(...(await this.reader.stateAt(room, firstStream - 1)), ...(await this.reader.stateAt(room, upTo)));
    } else {
      const changesByKey = new Map<string, StoredEvent[]>();
      for (const change of await this.reader.stateChangesAfter(room, previousPosition)) {
        const key = `${change.type}\u0000${change.stateKey}`;
        const list = changesByKey.get(key) ?? [];
        list.push(change);
        changesByKey.set(key, list);
      }
      for (const changes of changesByKey.values()) {
        // The state at the timeline's start and at its end, for this key; when no change falls
        // before that point, it is what the client had at the token, which it needs no repeat of.
        const atStart = changes.filter((c) => c.stream <= firstStream - 1).at(-1);
        const atEnd = changes.filter((c) => c.stream <= upTo).at(-1);
        for (const event of [atStart, atEnd]) if (event) candidates.push(event);
      }
    }
    const byKey = new Map<string, StoredEvent>();
    for (const event of candidates) {
      if (inTimeline.has(event.eventId)) continue;
      const key = `${event.type}\u0000${event.stateKey}`;
      const have = byKey.get(key);
      if (!have || have.stream < event.stream) byKey.set(key, event);
    }
    return [...byKey.values()].sort((a, b) => a.stream - b.stream);
  }

  private async ephemeral(room: RoomSnapshot, since: SyncToken | undefined, upTo: number, typingChanged: boolean, userId: string): Promise<JsonObject[]> {
    const events: JsonObject[] = [];
    // Only members type: someone who left or was banned while typing drops off at once.
    if (typingChanged) events.push({ type: 'm.typing', content: { user_ids: this.typing.typingIn(room.roomId).filter((u) => room.isJoined(u)) } });
    const after = since?.stream ?? -1;
    const receipts = room.latestReceiptStream > after ? await this.storage.userData.receiptsChanged(room.roomId, after, upTo) : [];
    const content: Record<string, Record<string, Record<string, JsonObject>>> = {};
    for (const receipt of receipts) {
      if (receipt.receipt_type === 'm.read.private' && receipt.user_id !== userId) continue;
      const byType = (content[receipt.event_id] ??= {});
      const byUser = (byType[receipt.receipt_type] ??= {});
      byUser[receipt.user_id] = { ts: Number(receipt.ts), ...(receipt.thread_id ? { thread_id: receipt.thread_id } : {}) };
    }
    if (Object.keys(content).length > 0) events.push({ type: 'm.receipt', content });
    return events;
  }

  private summary(room: RoomSnapshot, userId: string): JsonObject {
    const joined = room.joinedUsers();
    const invited = room.invitedUsers();
    const counts = { 'm.joined_member_count': joined.size, 'm.invited_member_count': invited.size };
    // Heroes name a room that has no name of its own (the spec's calculation); a room with a name
    // or canonical alias has none, as on Synapse.
    const name = room.get('m.room.name', '')?.content.name;
    const alias = room.get('m.room.canonical_alias', '')?.content.alias;
    if ((typeof name === 'string' && name !== '') || (typeof alias === 'string' && alias !== '')) return counts;
    return { 'm.heroes': heroes(userId, [joined, invited]), ...counts };
  }

  private invitedRoom(room: RoomSnapshot, userId: string): JsonObject {
    const events: JsonObject[] = room.strippedState();
    const own = room.get('m.room.member', userId);
    if (own) {
      const inviter = room.get('m.room.member', own.sender);
      if (inviter && inviter.sender !== userId) events.push(toStrippedState(inviter));
      // bot-sdk only auto-joins when it finds its own invite here, with the inviter as sender.
      events.push({ ...toStrippedState(own), event_id: own.eventId, origin_server_ts: own.originServerTs });
    }
    return { invite_state: { events } };
  }

  /**
   * A membership kept for a room this server is not in: an invite shows the stripped state its
   * server sent; a rejected invite shows the leave event.
   */
  private async outOfRoomSection(roomId: string, userId: string, membership: string, ignored: ReadonlySet<string>): Promise<JsonObject | undefined> {
    const kept = await this.storage.federation.remoteMembership(roomId, userId);
    if (!kept || kept.membership !== membership) return undefined;
    const pdu = parseStoredJson<JsonObject>(kept.pdu, {});
    if (membership === 'invite' && typeof pdu.sender === 'string' && ignored.has(pdu.sender)) return undefined;
    const event: JsonObject = {
      type: pdu.type,
      state_key: pdu.state_key,
      sender: pdu.sender,
      content: pdu.content,
      event_id: kept.event_id,
      origin_server_ts: pdu.origin_server_ts,
    };
    if (membership === 'invite' || membership === 'knock') {
      const stripped = parseStoredJson<JsonObject[]>(kept.stripped_state, []);
      return membership === 'invite' ? { invite_state: { events: [...stripped, event] } } : { knock_state: { events: [...stripped, event] } };
    }
    return {
      timeline: { events: [{ ...event, room_id: roomId, unsigned: {} }], limited: false },
      state: { events: [] },
      account_data: { events: [] },
    };
  }

  /** A room the user knocked on: its stripped state and the knock. */
  private knockedRoom(room: RoomSnapshot, userId: string): JsonObject {
    const events: JsonObject[] = room.strippedState();
    const own = room.get('m.room.member', userId);
    if (own) events.push({ ...toStrippedState(own), event_id: own.eventId, origin_server_ts: own.originServerTs });
    return { knock_state: { events } };
  }

  /** A left room's section, or undefined when there is nothing the user may see in it (as Synapse). */
  private async leftRoom(context: RoomContext): Promise<JsonObject | undefined> {
    const { room, entry, since, filter, viewer } = context;
    const visibility = await this.reader.visibilityFor(room, viewer.userId);
    const limit = filter.timeline.limit ?? DEFAULT_TIMELINE_LIMIT;
    const page = await this.reader.pageBackwards(room, {
      before: entry.stream,
      stopAt: since?.stream ?? -1,
      limit,
      visibility,
      matches: (e) => !isIgnored(context.ignored, e) && filter.timeline.matches(e),
      stopAtGap: true,
    });
    const timeline = page.events.reverse();
    // The state as of the leave: what changed since the token when the user was in the room then;
    // all of it when they joined after the token (and left again); none when they were not in the
    // room at all in between (a ban long after leaving). Never what came after the leave.
    const joinedAtToken = since !== undefined && membershipAt(visibility.history, since.stream) === 'join';
    const joinedSince = visibility.history.some((c) => c.membership === 'join' && c.stream > (since?.stream ?? -1) && c.stream <= entry.stream);
    const firstStream = timeline[0]?.stream ?? entry.stream + 1;
    const state =
      joinedAtToken || joinedSince
        ? (await this.stateDelta(room, timeline, firstStream, entry.stream, joinedAtToken ? since.stream : undefined)).filter((e) => filter.state.matches(e))
        : [];
    if (timeline.length === 0 && state.length === 0 && context.accountData.length === 0) return undefined;
    return {
      timeline: {
        events: await this.renderFor(timeline, viewer, filter),
        limited: page.more,
        prev_batch: await this.prevBatch(room, page.gapBefore, timeline[0], timeline[0]?.stream ?? entry.stream),
      },
      state: { events: await this.renderFor(state, viewer, filter) },
      account_data: {
        events: context.accountData.map((row) => ({ type: row.type, content: parseStoredJson<JsonObject>(row.content, {}) })),
      },
    };
  }

  private async renderFor(events: StoredEvent[], viewer: Viewer, filter: CompiledFilter, bundle?: { visibility: VisibilityContext | undefined }): Promise<JsonObject[]> {
    const rendered: ClientEvent[] = await this.reader.render(events, viewer, bundle);
    if (filter.federationFormat && events.length > 0) {
      // The PDU as other servers get it, with the event id and the client's unsigned data, as
      // Synapse serves this format; an event from before events were PDUs stays as it is.
      const version = (await this.cache.room(events[0]!.roomId))?.version;
      return rendered.map((event, i) => {
        const pdu = version ? pduOf(events[i]!, version) : undefined;
        return filter.project((pdu ? { ...pdu, event_id: event.event_id, unsigned: event.unsigned } : event) as ClientEvent);
      });
    }
    // room_id stays in although the spec's sync form may omit it: some bots read it from the event.
    return rendered.map((event) => filter.project(event));
  }
}

const HERO_COUNT = 5;

/**
 * The first few other members by user id, picked in one pass: a sync of a room with thousands
 * of members must not sort them all.
 */
function heroes(self: string, groups: Iterable<string>[]): string[] {
  const picked: string[] = [];
  for (const group of groups) {
    for (const userId of group) {
      if (userId === self) continue;
      if (picked.length === HERO_COUNT && userId >= picked[HERO_COUNT - 1]!) continue;
      let at = picked.length;
      while (at > 0 && picked[at - 1]! > userId) at--;
      picked.splice(at, 0, userId);
      if (picked.length > HERO_COUNT) picked.pop();
    }
  }
  return picked;
}

/** Whether the user's membership left `join` at any point after `position`. */
function leftSince(history: readonly MembershipChange[], position: number): boolean {
  return history.some((change) => change.stream > position && change.membership !== 'join');
}

interface RoomContext {
  room: RoomSnapshot;
  entry: UserRoom;
  since: SyncToken | undefined;
  upTo: number;
  typingSerial: number;
  filter: CompiledFilter;
  viewer: Viewer;
  fullState: boolean;
  accountData: AccountDataRow[];
  /** Whom the user ignores: their messages and invites are left out. */
  ignored: ReadonlySet<string>;
  /** Collects the users the sync shows the user coming to share a room with (for presence). */
  newlyShared: Set<string>;
  /** The user is not in the room and peeks into it (a world-readable room). */
  peeking?: boolean;
}

const MAX_LAZY_MEMBER_SETS = 20_000;
const MAX_LAZY_MEMBERS_PER_SET = 5_000;

function stateKeyOf(event: { type: string; stateKey?: string | undefined }): string {
  return `${event.type}\u0000${event.stateKey ?? ''}`;
}

/**
 * The state keys the timeline changes whose current value (at `upTo`) is not the timeline's last
 * event for them: a later change was left out of the timeline.
 */
function supersededKeys(room: RoomSnapshot, timeline: readonly StoredEvent[], upTo: number): Set<string> {
  const lastInTimeline = new Map<string, StoredEvent>();
  for (const event of timeline) if (event.stateKey !== undefined && event.rejected === undefined) lastInTimeline.set(stateKeyOf(event), event);
  const stale = new Set<string>();
  for (const [key, last] of lastInTimeline) {
    const current = room.get(last.type, last.stateKey!);
    if (current && current.eventId !== last.eventId && current.stream > last.stream && current.stream <= upTo) stale.add(key);
  }
  return stale;
}
