/**
 * Sync filters: what a client asks to see. Stored as the client sent them (so GET returns them
 * unchanged) and compiled into predicates when used.
 */
import { MatrixError } from '../http/errors.js';
import type { ClientEvent, JsonObject, StoredEvent } from '../rooms/events.js';

export interface EventFilterDefinition {
  limit?: number;
  types?: string[];
  not_types?: string[];
  senders?: string[];
  not_senders?: string[];
  rooms?: string[];
  not_rooms?: string[];
  lazy_load_members?: boolean;
  include_redundant_members?: boolean;
  contains_url?: boolean;
}

export interface FilterDefinition {
  event_fields?: string[];
  event_format?: string;
  presence?: EventFilterDefinition;
  account_data?: EventFilterDefinition;
  room?: {
    rooms?: string[];
    not_rooms?: string[];
    include_leave?: boolean;
    timeline?: EventFilterDefinition;
    state?: EventFilterDefinition;
    ephemeral?: EventFilterDefinition;
    account_data?: EventFilterDefinition;
  };
}

export const DEFAULT_TIMELINE_LIMIT = 10;
/** A client asking for more than this per room gets this many; a page is one query. */
export const MAX_TIMELINE_LIMIT = 1000;

export interface CompiledEventFilter {
  limit: number | undefined;
  lazyLoadMembers: boolean;
  matches(event: { type: string; sender: string; roomId?: string; content?: JsonObject }): boolean;
}

export interface CompiledFilter {
  definition: FilterDefinition;
  includesRoom(roomId: string): boolean;
  includeLeave: boolean;
  timeline: CompiledEventFilter;
  state: CompiledEventFilter;
  ephemeral: CompiledEventFilter;
  roomAccountData: CompiledEventFilter;
  accountData: CompiledEventFilter;
  /** Trims a client event to `event_fields`, when given. */
  project(event: ClientEvent): JsonObject;
}

/** Glob match with `*` as the spec allows in type filters. */
function typeMatches(pattern: string, type: string): boolean {
  if (!pattern.includes('*')) return pattern === type;
  const regex = new RegExp(`^${pattern.split('*').map(escapeRegex).join('.*')}$`);
  return regex.test(type);
}

function escapeRegex(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

export function compileEventFilter(definition: EventFilterDefinition | undefined): CompiledEventFilter {
  const d = definition ?? {};
  return {
    limit: typeof d.limit === 'number' ? Math.max(0, Math.min(MAX_TIMELINE_LIMIT, Math.floor(d.limit))) : undefined,
    lazyLoadMembers: d.lazy_load_members === true,
    matches(event) {
      if (d.not_types?.some((p) => typeMatches(p, event.type))) return false;
      if (d.types && !d.types.some((p) => typeMatches(p, event.type))) return false;
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
  const room = definition.room ?? {};
  const fields = definition.event_fields;
  return {
    definition,
    includesRoom(roomId) {
      if (room.not_rooms?.includes(roomId)) return false;
      return !room.rooms || room.rooms.includes(roomId);
    },
    includeLeave: room.include_leave === true,
    timeline: compileEventFilter(room.timeline),
    state: compileEventFilter(room.state),
    ephemeral: compileEventFilter(room.ephemeral),
    roomAccountData: compileEventFilter(room.account_data),
    accountData: compileEventFilter(definition.account_data),
    project(event) {
      if (!fields) return event as unknown as JsonObject;
      return projectFields(event as unknown as JsonObject, fields);
    },
  };
}

/** Keeps only the listed dotted paths (`content.body`); `\.` escapes a dot in a key. */
function projectFields(event: JsonObject, fields: readonly string[]): JsonObject {
  const result: JsonObject = {};
  for (const field of fields) {
    const path = field.split(/(?<!\\)\./).map((part) => part.replace(/\\\./g, '.'));
    let source: unknown = event;
    for (const key of path) {
      source = source !== null && typeof source === 'object' ? (source as JsonObject)[key] : undefined;
    }
    if (source === undefined) continue;
    let target = result;
    for (const key of path.slice(0, -1)) {
      const next = target[key];
      if (next === null || typeof next !== 'object') target[key] = {};
      target = target[key] as JsonObject;
    }
    target[path[path.length - 1]!] = source;
  }
  return result;
}

/** Reads a stored or inline filter; a definition that is not an object is a client error. */
export function parseFilterJson<T extends object = FilterDefinition>(text: string): T {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new MatrixError('M_INVALID_PARAM', 'filter is neither a filter id nor valid JSON');
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw new MatrixError('M_INVALID_PARAM', 'filter JSON must be an object');
  }
  return parsed as T;
}

export type { StoredEvent };
