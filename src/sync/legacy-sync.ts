/**
 * The legacy read APIs that Synapse still serves and SyTest uses for its set-up: the event stream
 * (`GET /events`), `GET /initialSync` and `GET /rooms/{roomId}/initialSync`. Each is a sync under
 * another shape (the spec's old client-server API, r0.6): the event stream is an incremental sync
 * flattened into one list of events, each with its `room_id`; an initial sync is a full sync with
 * each room's current state and latest messages. Nothing here keeps state of its own: the tokens
 * are sync tokens, so the same wake-ups and positions serve both.
 */
import { MatrixError } from '../core/errors.js';
import type { ClientEvent, JsonObject } from '../rooms/events.js';
import type { RoomHistory } from '../rooms/room-reader.js';
import type { Requester } from '../users/session-service.js';
import type { FilterDefinition } from './filters.js';
import type { PresenceService } from './presence.js';
import { parseSyncToken } from './stream.js';
import type { SyncService } from './sync-service.js';

/** At most this many events of one room in one answer of the event stream (a sync timeline's cap). */
const EVENTS_PER_ROOM = 100;
/** The initial syncs' default number of messages per room (Synapse's). */
export const DEFAULT_INITIAL_SYNC_LIMIT = 10;
/** Members whose presence a room's initial sync carries at most. */
const MAX_PRESENCE = 500;

interface EventStreamRequest {
  requester: Requester;
  /** A sync token; none means now (only what happens from now on). */
  from: string | undefined;
  timeoutMs: number;
  /** Only this room's events (the spec's `room_id` of the old `/events`). */
  roomId?: string | undefined;
  signal?: AbortSignal | undefined;
}

type Section = JsonObject & {
  timeline?: { events: ClientEvent[]; prev_batch?: string };
  state?: { events: ClientEvent[] };
  ephemeral?: { events: JsonObject[] };
  account_data?: { events: JsonObject[] };
  invite_state?: { events: JsonObject[] };
};
type SyncRooms = { join: Record<string, Section>; invite: Record<string, Section>; leave: Record<string, Section> };

export class LegacySync {
  constructor(
    private readonly sync: SyncService,
    private readonly history: RoomHistory,
    private readonly presence: PresenceService,
    /** Whether the room is in this server's public directory. */
    private readonly directoryVisibility: (roomId: string) => Promise<'public' | 'private'>,
  ) {}

  /**
   * `GET /events`: what happened since `from` in the user's rooms (their events, typing, receipts,
   * the room's account data), presence and account data, waiting up to the timeout for news.
   */
  async events(request: EventStreamRequest): Promise<JsonObject> {
    // A token we cannot read would make this an initial sync, everything at once: refused instead.
    if (request.from !== undefined && parseSyncToken(request.from) === undefined) throw new MatrixError('M_INVALID_PARAM', 'from is not a token of this server');
    let from = request.from;
    const filter: FilterDefinition = {
      room: { timeline: { limit: EVENTS_PER_ROOM }, state: { types: [] }, ...(request.roomId !== undefined ? { rooms: [request.roomId] } : {}) },
    };
    const body = await this.sync.sync({
      requester: request.requester,
      since: from,
      fromNow: (token) => (from = token),
      timeoutMs: request.timeoutMs,
      fullState: false,
      filter: undefined,
      filterDefinition: filter,
      signal: request.signal,
      legacy: true,
      // One room: the user's own, or one they peek into (world-readable); 403 otherwise.
      peek: request.roomId,
    });
    if (request.signal?.aborted) return {};
    const rooms = body.rooms as SyncRooms;
    const chunk: JsonObject[] = [];
    for (const [roomId, section] of [...Object.entries(rooms.join), ...Object.entries(rooms.leave)]) {
      for (const event of section.timeline?.events ?? []) chunk.push(v1(event, roomId));
      for (const event of section.ephemeral?.events ?? []) chunk.push({ ...event, room_id: roomId });
      for (const event of section.account_data?.events ?? []) chunk.push({ ...event, room_id: roomId });
    }
    for (const [roomId, section] of Object.entries(rooms.invite)) {
      const invite = ownInvite(section, request.requester.userId);
      if (invite) chunk.push(v1(invite, roomId));
    }
    // With a room, only its members' presence (sync picks them).
    chunk.push(...((body.presence as { events: JsonObject[] }).events ?? []).map(withUserId));
    if (request.roomId === undefined) {
      chunk.push(...withoutPushRules((body.account_data as { events: JsonObject[] }).events ?? []));
    }
    return { chunk, start: from, end: body.next_batch };
  }

  /** An initial sync with full state, in the legacy event format, of the rooms `room` selects. */
  private snapshot(requester: Requester, room: JsonObject): Promise<JsonObject> {
    return this.sync.sync({ requester, since: undefined, timeoutMs: 0, fullState: true, filter: undefined, filterDefinition: { room }, legacy: true });
  }

  /** `GET /initialSync`: every room of the user with its current state and latest messages. */
  async initialSync(requester: Requester, options: { limit: number; archived: boolean }): Promise<JsonObject> {
    const body = await this.snapshot(requester, { timeline: { limit: options.limit }, include_leave: options.archived });
    const end = String(body.next_batch);
    const rooms = body.rooms as SyncRooms;
    const list: JsonObject[] = [];
    const receipts: JsonObject[] = [];
    for (const [roomId, section] of Object.entries(rooms.join)) {
      list.push({ ...this.shapeRoom(roomId, 'join', section, end), visibility: await this.directoryVisibility(roomId) });
      for (const event of section.ephemeral?.events ?? []) if (event.type === 'm.receipt') receipts.push({ ...event, room_id: roomId });
    }
    for (const [roomId, section] of Object.entries(rooms.invite)) {
      const invite = ownInvite(section, requester.userId);
      list.push({
        room_id: roomId,
        membership: 'invite',
        visibility: await this.directoryVisibility(roomId),
        state: section.invite_state?.events ?? [],
        messages: { chunk: [], start: end, end },
        account_data: [],
        ...(invite ? { invite: v1(invite, roomId), inviter: invite.sender } : {}),
      });
    }
    if (options.archived) {
      for (const [roomId, section] of Object.entries(rooms.leave)) {
        const own = currentState(section).find((e) => e.type === 'm.room.member' && e.state_key === requester.userId);
        const membership = (own?.content as JsonObject | undefined)?.membership === 'ban' ? 'ban' : 'leave';
        list.push({ ...this.shapeRoom(roomId, membership, section, end), visibility: await this.directoryVisibility(roomId) });
      }
    }
    const presence = ((body.presence as { events: JsonObject[] }).events ?? []).map(withUserId);
    // One's own presence is part of it (a sync leaves it out: syncing is what makes one online).
    if (!presence.some((e) => e.sender === requester.userId)) presence.push(...(await this.presence.legacyEvents([requester.userId])));
    // Push rules were never account data in these APIs (Synapse's leave them out).
    return { end, rooms: list, presence, account_data: withoutPushRules((body.account_data as { events: JsonObject[] }).events ?? []), receipts };
  }

  /**
   * `GET /rooms/{roomId}/initialSync`: one room as the user may see it: a member's room now, a
   * former member's as they left it, a world-readable room for anyone.
   */
  async roomInitialSync(requester: Requester, roomId: string, limit: number): Promise<JsonObject> {
    const body = await this.snapshot(requester, { rooms: [roomId], timeline: { limit }, include_leave: true });
    const end = String(body.next_batch);
    const rooms = body.rooms as SyncRooms;
    const joined = rooms.join[roomId];
    if (joined) {
      const shaped = this.shapeRoom(roomId, 'join', joined, end);
      const members = (shaped.state as ClientEvent[])
        .filter((e) => e.type === 'm.room.member' && (e.content as JsonObject).membership === 'join' && typeof e.state_key === 'string')
        .map((e) => e.state_key as string)
        .slice(0, MAX_PRESENCE);
      return {
        ...shaped,
        visibility: await this.directoryVisibility(roomId),
        presence: await this.presence.legacyEvents(members),
        receipts: (joined.ephemeral?.events ?? []).filter((e) => e.type === 'm.receipt').map((e) => ({ ...e, room_id: roomId })),
      };
    }
    const left = rooms.leave[roomId];
    if (left) {
      const shaped = this.shapeRoom(roomId, 'leave', left, end);
      const own = (shaped.state as ClientEvent[]).find((e) => e.type === 'm.room.member' && e.state_key === requester.userId);
      if ((own?.content as JsonObject | undefined)?.membership === 'ban') shaped.membership = 'ban';
      return { ...shaped, visibility: await this.directoryVisibility(roomId), presence: [], receipts: [] };
    }
    // Not a member and never was (or only invited): what history lets anyone see (world-readable).
    const state = await this.history.state(requester, roomId);
    const page = await this.history.messages(requester, roomId, { dir: 'b', limit, matches: () => true, lazyLoadMembers: false, from: undefined, to: undefined });
    const own = state.find((e) => e.type === 'm.room.member' && e.state_key === requester.userId);
    const membership = typeof (own?.content as JsonObject | undefined)?.membership === 'string' ? String((own!.content as JsonObject).membership) : undefined;
    return {
      room_id: roomId,
      ...(membership !== undefined ? { membership } : {}),
      visibility: await this.directoryVisibility(roomId),
      state: state.map((e) => v1(e, roomId)),
      messages: { chunk: (page.chunk as JsonObject[]).reverse().map((e) => v1(e, roomId)), start: page.end ?? page.start, end },
      presence: [],
      receipts: [],
      account_data: [],
    };
  }

  /** A sync section as an initial sync's room: the current state, the latest messages, the room's account data. */
  private shapeRoom(roomId: string, membership: string, section: Section, end: string): JsonObject {
    const timeline = (section.timeline?.events ?? []).map((e) => v1(e, roomId));
    return {
      room_id: roomId,
      membership,
      state: currentState(section).map((e) => v1(e, roomId)),
      messages: { chunk: timeline, start: section.timeline?.prev_batch ?? end, end },
      account_data: section.account_data?.events ?? [],
    };
  }
}

/** The state before a section's timeline, with the timeline's state events applied: the state at its end. */
function currentState(section: Section): ClientEvent[] {
  const byKey = new Map<string, ClientEvent>();
  for (const event of [...(section.state?.events ?? []), ...(section.timeline?.events ?? [])]) {
    if (typeof event.state_key !== 'string') continue;
    byKey.set(`${event.type}\u0000${event.state_key}`, event);
  }
  return [...byKey.values()];
}

/** The user's own invite among a room's invite state. */
function ownInvite(section: Section, userId: string): JsonObject | undefined {
  return (section.invite_state?.events ?? []).find((e) => e.type === 'm.room.member' && e.state_key === userId);
}

/**
 * An event as the legacy APIs gave it (the spec's r0 "v1" client format): with its `room_id`,
 * its sender also as `user_id`, and `age`, `prev_content`, `replaces_state`, `redacted_because`
 * also at the top level.
 */
export function v1(event: JsonObject | ClientEvent, roomId: string): JsonObject {
  const shaped: JsonObject = { ...(event as JsonObject), room_id: roomId };
  if (typeof event.sender === 'string') shaped.user_id = event.sender;
  const unsigned = event.unsigned;
  if (typeof unsigned === 'object' && unsigned !== null) {
    for (const key of ['age', 'redacted_because', 'replaces_state', 'prev_content'] as const) {
      if (key in unsigned) shaped[key] = (unsigned as JsonObject)[key];
    }
  }
  return shaped;
}

function withoutPushRules(events: JsonObject[]): JsonObject[] {
  return events.filter((event) => event.type !== 'm.push_rules');
}

/** Legacy presence events name their user in the content too. */
function withUserId(event: JsonObject): JsonObject {
  const content = (event.content ?? {}) as JsonObject;
  return { ...event, content: { status_msg: null, ...content, user_id: event.sender } };
}

/** `limit` of the legacy APIs: a count of messages, 0 included. */
export function legacyLimit(limit: number | undefined): number {
  if (limit === undefined) return DEFAULT_INITIAL_SYNC_LIMIT;
  if (!Number.isInteger(limit) || limit < 0) throw new MatrixError('M_INVALID_PARAM', 'limit must be a non-negative integer');
  return Math.min(limit, EVENTS_PER_ROOM);
}
