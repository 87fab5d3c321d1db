/**
 * Sync filters: what a client asks to see. Stored as the client sent them (so GET returns them
 * unchanged), validated the same way whether stored or given inline, and compiled into predicates.
 */
import { compileGlob } from '../core/glob.js';
import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { Ajv, type ValidateFunction } from 'ajv';
import { MatrixError } from '../core/errors.js';
import { JsonTooDeepError, parseJsonSafely, parseStoredJson } from '../core/json.js';
import type { ClientEvent, JsonObject } from '../rooms/events.js';
import { compiledOnFirstUse, StringEnum } from '../schemas.js';
import { isRoomId, isUserId } from '../rooms/ids.js';

/** Lists in a filter are capped: each entry costs work on every event a sync looks at. */
const MAX_LIST = 500;
const MAX_PATTERN = 255;
const Strings = Type.Array(Type.String({ maxLength: MAX_PATTERN }), { maxItems: MAX_LIST });

export const EventFilterSchema = Type.Object(
  {
    limit: Type.Optional(Type.Integer({ minimum: 0 })),
    types: Type.Optional(Strings),
    not_types: Type.Optional(Strings),
    senders: Type.Optional(Strings),
    not_senders: Type.Optional(Strings),
    rooms: Type.Optional(Strings),
    not_rooms: Type.Optional(Strings),
    lazy_load_members: Type.Optional(Type.Boolean()),
    include_redundant_members: Type.Optional(Type.Boolean()),
    contains_url: Type.Optional(Type.Boolean()),
    unread_thread_notifications: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: true },
);

export const FilterSchema = Type.Object(
  {
    event_fields: Type.Optional(Strings),
    event_format: Type.Optional(StringEnum(['client', 'federation'] as const)),
    presence: Type.Optional(EventFilterSchema),
    account_data: Type.Optional(EventFilterSchema),
    room: Type.Optional(
      Type.Object(
        {
          rooms: Type.Optional(Strings),
          not_rooms: Type.Optional(Strings),
          include_leave: Type.Optional(Type.Boolean()),
          timeline: Type.Optional(EventFilterSchema),
          state: Type.Optional(EventFilterSchema),
          ephemeral: Type.Optional(EventFilterSchema),
          account_data: Type.Optional(EventFilterSchema),
        },
        { additionalProperties: true },
      ),
    ),
  },
  { additionalProperties: true },
);

export type EventFilterDefinition = Static<typeof EventFilterSchema>;
export type FilterDefinition = Static<typeof FilterSchema>;

export const DEFAULT_TIMELINE_LIMIT = 10;
/** A client asking for more than this per room gets this many; a page is one query. */
export const MAX_TIMELINE_LIMIT = 1000;

export interface CompiledEventFilter {
  limit: number | undefined;
  lazyLoadMembers: boolean;
  /** With lazy loading: send member events the device already has again (default false). */
  includeRedundantMembers: boolean;
  /** False when the filter lets every event through. */
  restrictive: boolean;
  typeAllowed(type: string): boolean;
  matches(event: { type: string; sender: string; roomId?: string; content?: JsonObject }): boolean;
}

export interface CompiledFilter {
  includesRoom(roomId: string): boolean;
  includeLeave: boolean;
  timeline: CompiledEventFilter;
  state: CompiledEventFilter;
  ephemeral: CompiledEventFilter;
  roomAccountData: CompiledEventFilter;
  accountData: CompiledEventFilter;
  presence: CompiledEventFilter;
  /** Trims a client event to `event_fields`, when given. */
  project(event: ClientEvent): JsonObject;
  /** `event_format: federation`: events as their PDUs (with `event_id` and `unsigned`). */
  federationFormat: boolean;
}

/**
 * Only the fields a filter acts on are kept (filters may carry any other keys): a compiled
 * filter is shared by every sync that uses it, for as long as it is cached.
 */
export function compileEventFilter(definition: EventFilterDefinition | undefined): CompiledEventFilter {
  const given = definition ?? {};
  const d: EventFilterDefinition = {
    types: given.types,
    not_types: given.not_types,
    senders: given.senders,
    not_senders: given.not_senders,
    rooms: given.rooms,
    not_rooms: given.not_rooms,
    contains_url: given.contains_url,
  };
  // `*` matches any run of characters, as the spec allows in type filters.
  const types = d.types?.map((pattern) => compileGlob(pattern));
  const notTypes = d.not_types?.map((pattern) => compileGlob(pattern));
  const typeAllowed = (type: string): boolean => {
    if (notTypes?.some((matches) => matches(type))) return false;
    return !types || types.some((matches) => matches(type));
  };
  return {
    limit: typeof given.limit === 'number' ? Math.max(0, Math.min(MAX_TIMELINE_LIMIT, Math.floor(given.limit))) : undefined,
    lazyLoadMembers: given.lazy_load_members === true,
    includeRedundantMembers: given.include_redundant_members === true,
    restrictive: [d.types, d.not_types, d.senders, d.not_senders, d.rooms, d.not_rooms, d.contains_url].some((v) => v !== undefined),
    typeAllowed,
    matches(event) {
      if (!typeAllowed(event.type)) return false;
      if (d.not_senders?.includes(event.sender)) return false;
      if (d.senders && !d.senders.includes(event.sender)) return false;
      if (event.roomId !== undefined) {
        if (d.not_rooms?.includes(event.roomId)) return false;
        if (d.rooms && !d.rooms.includes(event.roomId)) return false;
      }
      if (d.contains_url !== undefined && event.content !== undefined) {
        const hasUrl = typeof event.content.url === 'string';
        if (hasUrl !== d.contains_url) return false;
      }
      return true;
    },
  };
}

export function compileFilter(definition: FilterDefinition): CompiledFilter {
  const given = definition.room ?? {};
  const room = { rooms: given.rooms, not_rooms: given.not_rooms, include_leave: given.include_leave };
  const fields = definition.event_fields;
  return {
    includesRoom(roomId) {
      if (room.not_rooms?.includes(roomId)) return false;
      return !room.rooms || room.rooms.includes(roomId);
    },
    includeLeave: room.include_leave === true,
    timeline: compileEventFilter(given.timeline),
    state: compileEventFilter(given.state),
    ephemeral: compileEventFilter(given.ephemeral),
    roomAccountData: compileEventFilter(given.account_data),
    accountData: compileEventFilter(definition.account_data),
    presence: compileEventFilter(definition.presence),
    federationFormat: definition.event_format === 'federation',
    project(event) {
      if (!fields) return event as unknown as JsonObject;
      return projectFields(event as unknown as JsonObject, fields);
    },
  };
}

/** Path segments that would reach an object's prototype rather than its data. */
const FORBIDDEN_KEYS = new Set(['__proto__', 'prototype', 'constructor']);

/** Keeps only the listed dotted paths (`content.body`); `\.` escapes a dot in a key. */
function projectFields(event: JsonObject, fields: readonly string[]): JsonObject {
  const result: JsonObject = {};
  for (const field of fields) {
    const path = field.split(/(?<!\\)\./).map((part) => part.replace(/\\\./g, '.'));
    if (path.some((key) => FORBIDDEN_KEYS.has(key))) continue;
    let source: unknown = event;
    for (const key of path) {
      source = source !== null && typeof source === 'object' && Object.hasOwn(source, key) ? (source as JsonObject)[key] : undefined;
    }
    if (source === undefined) continue;
    let target = result;
    for (const key of path.slice(0, -1)) {
      const next = Object.hasOwn(target, key) ? target[key] : undefined;
      if (next === null || typeof next !== 'object') target[key] = {};
      target = target[key] as JsonObject;
    }
    target[path[path.length - 1]!] = source;
  }
  return result;
}

// Compiled on first use, not at start-up (most bots never send a filter inline).
let ajv: Ajv | undefined;
const lazyValidator = (schema: TSchema): ValidateFunction =>
  compiledOnFirstUse(() => {
    ajv ??= new Ajv({ allErrors: false, strict: false, validateSchema: false });
    return ajv.compile(schema);
  });
const checkFilter = lazyValidator(FilterSchema as TSchema);
const checkEventFilter = lazyValidator(EventFilterSchema as TSchema);

/** Reads a filter given inline as JSON (a query parameter); refuses what a stored one could not be. */
export function parseInlineFilter(text: string): FilterDefinition {
  const filter = parseChecked(text, checkFilter) as FilterDefinition;
  assertFilterIds(filter);
  return filter;
}

/** Reads an event filter given inline (`/messages`, `/context`). */
export function parseInlineEventFilter(text: string): EventFilterDefinition {
  const filter = parseChecked(text, checkEventFilter) as EventFilterDefinition;
  assertEventFilterIds(filter);
  return filter;
}

/**
 * Room and sender lists must hold room ids and user ids (Synapse refuses a filter that names
 * `not_a_room_id`): 400 `M_INVALID_PARAM`.
 */
export function assertFilterIds(filter: FilterDefinition): void {
  assertIds(filter.room?.rooms, 'room.rooms', isRoomId, 'room id');
  assertIds(filter.room?.not_rooms, 'room.not_rooms', isRoomId, 'room id');
  for (const [name, part] of [['presence', filter.presence], ['account_data', filter.account_data], ['room.timeline', filter.room?.timeline], ['room.state', filter.room?.state], ['room.ephemeral', filter.room?.ephemeral], ['room.account_data', filter.room?.account_data]] as const) {
    if (part) assertEventFilterIds(part, `${name}.`);
  }
}

function assertEventFilterIds(filter: EventFilterDefinition, prefix = ''): void {
  assertIds(filter.rooms, `${prefix}rooms`, isRoomId, 'room id');
  assertIds(filter.not_rooms, `${prefix}not_rooms`, isRoomId, 'room id');
  assertIds(filter.senders, `${prefix}senders`, isUserId, 'user id');
  assertIds(filter.not_senders, `${prefix}not_senders`, isUserId, 'user id');
}

function assertIds(list: readonly string[] | undefined, name: string, valid: (value: string) => boolean, what: string): void {
  const bad = list?.find((value) => !valid(value));
  if (bad !== undefined) throw new MatrixError('M_INVALID_PARAM', `filter ${name}: ${JSON.stringify(bad.slice(0, 100))} is not a ${what}`);
}

/** Reads a stored filter (validated when it was stored). */
export function parseStoredFilter(text: string): FilterDefinition {
  return parseStoredJson<FilterDefinition>(text, {});
}

function parseChecked(text: string, check: (value: unknown) => boolean): unknown {
  let parsed: unknown;
  try {
    parsed = parseJsonSafely(text);
  } catch (err) {
    if (err instanceof JsonTooDeepError) throw new MatrixError('M_INVALID_PARAM', `filter is nested too deeply (more than ${err.limit} levels)`);
    throw new MatrixError('M_INVALID_PARAM', 'filter is neither a filter id nor valid JSON');
  }
  if (parsed === undefined || parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw new MatrixError('M_INVALID_PARAM', 'filter is neither a filter id nor a JSON object');
  }
  if (!check(parsed)) throw new MatrixError('M_INVALID_PARAM', 'filter has fields of the wrong type');
  return parsed;
}
