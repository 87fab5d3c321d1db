/**
 * Events as stored and as clients see them. A stored event is immutable except for redaction;
 * the client form adds `unsigned` fields that depend on who looks and when.
 */
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
  /** The PDU's place in the room's DAG. Events older than PDUs here have depth 0 and no lists. */
  depth: number;
  prevEvents: readonly string[] | undefined;
  authEvents: readonly string[] | undefined;
  /** The PDU's keys that have no field of their own: hashes, signatures, anything else it carried. */
  pduExtra: JsonObject | undefined;
  /** The state group after the event. */
  stateGroup: number | undefined;
  /** Known for auth chains and state only, outside the room's timeline. */
  outlier: boolean;
  /** Why the event failed auth, when it did: stored to be referred to, never shown or built on. */
  rejected: string | undefined;
  /** Allowed by its own state but not by the room's current state: kept from clients. */
  softFailed: boolean;
  /** Placed on prev_events this server did not have: a gap lies before it (sync stops there). */
  gapBefore?: boolean | undefined;
  /**
   * History that came late, through /backfill (a position below zero, shown in history only): the
   * position at which history visibility judges it, that of the event its gap lay under.
   */
  backfilledAt?: number | undefined;
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
    depth: Number(row.depth),
    prevEvents: row.prev_events === null ? undefined : (JSON.parse(row.prev_events) as string[]),
    authEvents: row.auth_events === null ? undefined : (JSON.parse(row.auth_events) as string[]),
    pduExtra: row.pdu_extra === null ? undefined : parseStoredJson<JsonObject>(row.pdu_extra, {}),
    stateGroup: row.state_group === null ? undefined : Number(row.state_group),
    outlier: row.outlier === 1,
    rejected: row.rejected ?? undefined,
    softFailed: row.soft_failed === 1,
    gapBefore: row.gap_before === 1,
    backfilledAt: row.backfilled_at === null ? undefined : Number(row.backfilled_at),
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
    depth: event.depth,
    prev_events: event.prevEvents === undefined ? null : JSON.stringify(event.prevEvents),
    auth_events: event.authEvents === undefined ? null : JSON.stringify(event.authEvents),
    pdu_extra: event.pduExtra === undefined ? null : JSON.stringify(event.pduExtra),
    state_group: event.stateGroup ?? null,
    outlier: event.outlier ? 1 : 0,
    rejected: event.rejected ?? null,
    soft_failed: event.softFailed ? 1 : 0,
    gap_before: event.gapBefore ? 1 : 0,
    backfilled_at: event.backfilledAt ?? null,
  };
}

/**
 * Refuses an event whose client form (without `unsigned`) would exceed the spec's 64 KiB. Most
 * events are far below, which a bound shows without serializing the whole event: the content's
 * JSON (kept for the row, see rowFromEvent) plus at most 6 bytes per character of the other
 * strings (JSON's longest escape) and room for the keys and the timestamp.
 */
export function assertEventSize(event: StoredEvent, now: number): number {
  const contentJson = JSON.stringify(event.content);
  contentJsonOf.set(event.content, contentJson);
  const others = event.eventId.length + event.type.length + event.sender.length + event.roomId.length +
    (event.stateKey?.length ?? 0) + 2 * (event.redacts?.length ?? 0);
  const contentBytes = Buffer.byteLength(contentJson, 'utf8');
  if (contentBytes + 6 * others + 256 <= MAX_EVENT_BYTES) return contentBytes;
  const client = toClientEvent(event, { now });
  const bytes = Buffer.byteLength(JSON.stringify({ ...client, unsigned: undefined }), 'utf8');
  if (bytes > MAX_EVENT_BYTES) {
    throw new MatrixError('M_TOO_LARGE', `Event is too large (${bytes} bytes; the limit is ${MAX_EVENT_BYTES})`);
  }
  return contentBytes;
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
  if (options.redactedBecause !== undefined) {
    unsigned.redacted_because = options.redactedBecause;
    // Synapse's name for the redaction's id beside it, which clients and SyTest read.
    unsigned.redacted_by = options.redactedBecause.event_id;
  }
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
