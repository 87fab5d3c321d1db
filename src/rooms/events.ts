/**
 * Events as stored and as clients see them. A stored event is immutable except for redaction;
 * the client form adds `unsigned` fields that depend on who looks and when.
 */
import { randomFillSync } from 'node:crypto';
import { MatrixError } from '../core/errors.js';
import type { EventRow } from '../storage/index.js';
import { parseStoredJson } from '../core/json.js';

export type JsonObject = Record<string, unknown>;

/** Spec limit on the size of an event (the whole PDU; we measure our stored form). */
export const MAX_EVENT_BYTES = 65_536;

export interface StoredEvent {
  stream: number;
  eventId: string;
  roomId: string;
  type: string;
  /** Present on state events only; '' is a valid state key. */
  stateKey: string | undefined;
  sender: string;
  originServerTs: number;
  content: JsonObject;
  replacesState: string | undefined;
  prevContent: JsonObject | undefined;
  prevSender: string | undefined;
  redacts: string | undefined;
  redactedBy: string | undefined;
  /** The room's history visibility when the event was sent. */
  historyVisibility: string;
  txnDeviceId: string | undefined;
  txnScope: string | undefined;
  txnId: string | undefined;
}

export interface ClientEvent {
  event_id: string;
  type: string;
  sender: string;
  origin_server_ts: number;
  content: JsonObject;
  room_id: string;
  state_key?: string;
  redacts?: string;
  unsigned: JsonObject;
}

/** Who is looking at an event: the sending device sees its transaction id. */
export interface Viewer {
  userId: string;
  deviceId: string;
}

/**
 * The url-safe base64 characters in ASCII order, so that numbers written with them sort as text
 * (SQLite compares ids byte by byte).
 */
const SORTABLE_DIGITS = '-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz';
/** 8 digits of 6 bits: milliseconds since 1970 sort correctly until the year 10889. */
const TIME_DIGITS = 8;
/** 27 random bytes are 36 base64 characters; 35 of them (210 random bits) complete the 43. */
const RANDOM_BYTES = 27;
const RANDOM_DIGITS = 43 - TIME_DIGITS;

/**
 * Random bytes for event ids, drawn from the CSPRNG 6.75 KiB at a time: one `randomBytes` call
 * per event cost more (about 4 µs) than the rest of building the event.
 */
const entropy = Buffer.alloc(RANDOM_BYTES * 256);
let entropyUsed = entropy.length;
let timePrefixMs = Number.NaN;
let timePrefix = '';
const LATEST_TIME = 2 ** (6 * TIME_DIGITS) - 1;

/**
 * A new event id: `$` and 43 url-safe base64 characters, shaped like the reference hash of
 * room versions 4 and later. The first 8 characters are the creation time written in sortable
 * digits, the other 35 are random. Ids of new events therefore land at the end of the event-id
 * index instead of on a random page of it, so a commit of ten messages writes one or two index
 * pages instead of ten (measured: a fifth less CPU per message insert at 50,000 events, more as
 * the table grows). The id gives away when the event was sent, to the millisecond, also to
 * someone who sees only the id (in a reply, a receipt or a redaction) and not the event.
 */
export function newEventId(now: number = Date.now()): string {
  if (now !== timePrefixMs) {
    timePrefixMs = now;
    let prefix = '';
    // A clock before 1970, past the year 10889 or not a number still gives a well-formed id.
    let rest = Number.isFinite(now) ? Math.min(LATEST_TIME, Math.max(0, Math.floor(now))) : 0;
    for (let digit = 0; digit < TIME_DIGITS; digit++) {
      prefix = SORTABLE_DIGITS[rest % 64]! + prefix;
      rest = Math.floor(rest / 64);
    }
    timePrefix = prefix;
  }
  if (entropyUsed === entropy.length) {
    randomFillSync(entropy);
    entropyUsed = 0;
  }
  const start = entropyUsed;
  entropyUsed += RANDOM_BYTES;
  return `$${timePrefix}${entropy.toString('base64url', start, entropyUsed).slice(0, RANDOM_DIGITS)}`;
}

export function stateKeyOf(type: string, stateKey: string): string {
  return `${type}\u0000${stateKey}`;
}

export function eventFromRow(row: EventRow): StoredEvent {
  return {
    stream: Number(row.stream_ordering),
    eventId: row.event_id,
    roomId: row.room_id,
    type: row.type,
    stateKey: row.state_key ?? undefined,
    sender: row.sender,
    originServerTs: Number(row.origin_server_ts),
    content: parseStoredJson<JsonObject>(row.content, {}),
    replacesState: row.replaces_state ?? undefined,
    prevContent: row.prev_content === null ? undefined : parseStoredJson<JsonObject>(row.prev_content, {}),
    prevSender: row.prev_sender ?? undefined,
    redacts: row.redacts ?? undefined,
    redactedBy: row.redacted_by ?? undefined,
    historyVisibility: row.history_visibility,
    txnDeviceId: row.txn_device_id ?? undefined,
    txnScope: row.txn_scope ?? undefined,
    txnId: row.txn_id ?? undefined,
  };
}

export function rowFromEvent(event: StoredEvent): EventRow {
  return {
    stream_ordering: event.stream,
    event_id: event.eventId,
    room_id: event.roomId,
    type: event.type,
    state_key: event.stateKey ?? null,
    sender: event.sender,
    origin_server_ts: event.originServerTs,
    content: takeContentJson(event.content),
    replaces_state: event.replacesState ?? null,
    prev_content: event.prevContent === undefined ? null : JSON.stringify(event.prevContent),
    prev_sender: event.prevSender ?? null,
    redacts: event.redacts ?? null,
    redacted_by: event.redactedBy ?? null,
    history_visibility: event.historyVisibility,
    txn_device_id: event.txnDeviceId ?? null,
    txn_scope: event.txnScope ?? null,
    txn_id: event.txnId ?? null,
  };
}

/**
 * Refuses an event whose client form (without `unsigned`) would exceed the spec's 64 KiB. Most
 * events are far below, which a bound shows without serializing the whole event: the content's
 * JSON (kept for the row, see rowFromEvent) plus at most 6 bytes per character of the other
 * strings (JSON's longest escape) and room for the keys and the timestamp.
 */
export function assertEventSize(event: StoredEvent, now: number): void {
  const contentJson = JSON.stringify(event.content);
  contentJsonOf.set(event.content, contentJson);
  const others = event.eventId.length + event.type.length + event.sender.length + event.roomId.length +
    (event.stateKey?.length ?? 0) + 2 * (event.redacts?.length ?? 0);
  if (Buffer.byteLength(contentJson, 'utf8') + 6 * others + 256 <= MAX_EVENT_BYTES) return;
  const client = toClientEvent(event, { now });
  const bytes = Buffer.byteLength(JSON.stringify({ ...client, unsigned: undefined }), 'utf8');
  if (bytes > MAX_EVENT_BYTES) {
    throw new MatrixError('M_TOO_LARGE', `Event is too large (${bytes} bytes; the limit is ${MAX_EVENT_BYTES})`);
  }
}

/** Content serialized by assertEventSize, reused (once) when the event's row is written. */
const contentJsonOf = new WeakMap<JsonObject, string>();

function takeContentJson(content: JsonObject): string {
  const json = contentJsonOf.get(content);
  if (json === undefined) return JSON.stringify(content);
  // Not kept past the write: recent events and room state live on, and so would a copy of each.
  contentJsonOf.delete(content);
  return json;
}

export interface ClientEventOptions {
  now: number;
  viewer?: Viewer | undefined;
  /** The redaction event, already in client form, when this event was redacted. */
  redactedBecause?: ClientEvent | undefined;
}

/** The client-server form of an event, as `/sync`, `/messages` and `/event` return it. */
export function toClientEvent(event: StoredEvent, options: ClientEventOptions): ClientEvent {
  const unsigned: JsonObject = { age: Math.max(0, options.now - event.originServerTs) };
  if (event.prevContent !== undefined) {
    unsigned.prev_content = event.prevContent;
    if (event.prevSender !== undefined) unsigned.prev_sender = event.prevSender;
    if (event.replacesState !== undefined) unsigned.replaces_state = event.replacesState;
  }
  if (
    event.txnId !== undefined &&
    options.viewer !== undefined &&
    options.viewer.userId === event.sender &&
    options.viewer.deviceId === event.txnDeviceId
  ) {
    unsigned.transaction_id = event.txnId;
  }
  if (options.redactedBecause !== undefined) unsigned.redacted_because = options.redactedBecause;
  const client: ClientEvent = {
    event_id: event.eventId,
    type: event.type,
    sender: event.sender,
    origin_server_ts: event.originServerTs,
    content: event.content,
    room_id: event.roomId,
    unsigned,
  };
  if (event.stateKey !== undefined) client.state_key = event.stateKey;
  if (event.redacts !== undefined) {
    // Room versions before 11 carry `redacts` at the top level; newer clients read it from content.
    client.redacts = event.redacts;
    client.content = { ...event.content, redacts: event.redacts };
  }
  return client;
}

/** The stripped form used in invite state: only type, state_key, sender and content. */
export function toStrippedState(event: StoredEvent): JsonObject {
  return { type: event.type, state_key: event.stateKey ?? '', sender: event.sender, content: event.content };
}
