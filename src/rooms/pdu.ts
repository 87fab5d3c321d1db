/**
 * Events as the federation sees them (PDUs): the content hash, the signature of the originating
 * server, and the event id (server-server API, "Signing Events"). From room version 3 the id is
 * the event's reference hash; in versions 1 and 2 it is `$opaque:server`, chosen by the server
 * that made the event and sent inside it, and `prev_events`/`auth_events` are
 * `[event_id, {sha256: reference hash}]` pairs. Every local event is finished here before it is
 * stored; every remote one is checked here before anything else looks at it.
 *
 * The rest of the server sees one form, whatever the version: `prev_events` and `auth_events` as
 * bare ids. A v1/v2 PDU keeps its `event_id` as an extra key, and the hashes of its pairs (when
 * they are not empty) under V1_REFERENCE_HASHES, so that `wirePdu` gives back exactly the bytes
 * that were signed.
 */
import { createHash, randomBytes } from 'node:crypto';
import { canonicalJsonBytes } from '../core/canonical-json.js';
import { decodeBase64, signJson, unpaddedBase64, type Signer, type Signatures } from '../core/signed-json.js';
import type { StoredEvent } from './events.js';
import { redactPdu } from './redaction.js';
import type { RoomVersion } from './room-versions.js';

export type JsonObject = Record<string, unknown>;

/**
 * A PDU in the server's own form (see above): for v3+ rooms the wire form itself. Unknown
 * top-level keys are kept: they are hashed too.
 */
export interface Pdu {
  /** Absent only on the create event of a v12 room (its id is the room id). */
  room_id?: string;
  sender: string;
  type: string;
  state_key?: string;
  content: JsonObject;
  origin_server_ts: number;
  depth: number;
  prev_events: string[];
  auth_events: string[];
  /** Top level before room version 11; in content from 11 on. */
  redacts?: string;
  hashes: { sha256: string } & Record<string, string>;
  signatures: Signatures;
  unsigned?: JsonObject;
  [key: string]: unknown;
}

/**
 * The largest depth an event may have: canonical JSON's integer limit (2^53 - 1). "If the room's
 * depth is already at the limit, the depth must be set to the limit" (the PDU's `depth`): a
 * remote event at the limit must not leave the room unable to take another event.
 */
export const MAX_DEPTH = Number.MAX_SAFE_INTEGER;

/** The depth of an event built on a room whose deepest forward extremity is at `headDepth`. */
export function nextDepth(headDepth: number): number {
  return Math.min(headDepth + 1, MAX_DEPTH);
}

/** A PDU before it is hashed and signed. */
export type UnsignedPdu = Omit<Pdu, 'hashes' | 'signatures'>;

/**
 * Where a v1/v2 PDU held in the server's form keeps the hashes of its `prev_events` and
 * `auth_events` pairs: `{prev_events: [...], auth_events: [...]}`, one object per id, present
 * only when some hash was not empty. Never a key of a PDU on the wire (pduFormatProblem refuses it).
 */
export const V1_REFERENCE_HASHES = 'bhs.v1_reference_hashes';
/**
 * Under V1_REFERENCE_HASHES: the references stay bare ids on the wire. Only for a make_ template
 * that a server sent for a room it called version 1 (or named no version for) with bare ids: we fill
 * in and sign the template it gave, without inventing `[id, {}]` pairs for events we do not have;
 * the create event of its send_join answer then shows what the room really is.
 */
export const BARE_REFERENCES = { bare: true } as const;

/** A pair of a v1/v2 `prev_events` or `auth_events` list: an id, and the referenced event's hashes. */
export type EventReference = [string, JsonObject];

function isReference(value: unknown): value is EventReference {
  return Array.isArray(value) && value.length === 2 && typeof value[0] === 'string' && typeof value[1] === 'object' && value[1] !== null && !Array.isArray(value[1]);
}

/** Why a v1/v2 reference list is malformed, or undefined. */
export function referencesProblem(list: unknown): string | undefined {
  if (!Array.isArray(list)) return 'not a list';
  for (const item of list) {
    if (!isReference(item)) return 'not a list of [event_id, hashes] pairs';
    if (!item[0].startsWith('$') || !item[0].includes(':')) return `${item[0].slice(0, 100)} is not an event id with a server`;
    const hashes = item[1];
    for (const value of Object.values(hashes)) if (typeof value !== 'string') return 'a hash is not a string';
  }
  return undefined;
}

/**
 * A received PDU in the server's form: for v1/v2 rooms the pair lists become ids, their hashes
 * kept aside. The lists must be well formed already (pduFormatProblem). The form of other
 * versions is the wire form.
 */
export function pduFromWire(raw: JsonObject, version: RoomVersion): JsonObject {
  if (version.eventFormat !== 'v1') return raw;
  const prev = raw.prev_events as EventReference[];
  const auth = raw.auth_events as EventReference[];
  const pdu: JsonObject = { ...raw, prev_events: prev.map(([id]) => id), auth_events: auth.map(([id]) => id) };
  delete pdu[V1_REFERENCE_HASHES];
  if ([...prev, ...auth].some(([, hashes]) => Object.keys(hashes).length > 0)) {
    pdu[V1_REFERENCE_HASHES] = { prev_events: prev.map(([, hashes]) => hashes), auth_events: auth.map(([, hashes]) => hashes) };
  }
  return pdu;
}

/** The PDU as other servers see it (and as it was hashed and signed): the inverse of pduFromWire. */
export function wirePdu<T extends JsonObject>(pdu: T, version: RoomVersion): T {
  if (version.eventFormat !== 'v1') return pdu;
  const { [V1_REFERENCE_HASHES]: kept, ...rest } = pdu as JsonObject;
  const hashes = (typeof kept === 'object' && kept !== null ? kept : {}) as { prev_events?: unknown; auth_events?: unknown; bare?: unknown };
  // A template that named its references by bare id (see BARE_REFERENCES) is signed as it came.
  if (hashes.bare === true) return { ...rest } as T;
  const pair = (list: unknown, known: unknown): unknown =>
    Array.isArray(list)
      ? list.map((id: unknown, i) => {
          if (isReference(id)) return id;
          const hash = Array.isArray(known) ? known[i] : undefined;
          return [id, typeof hash === 'object' && hash !== null ? hash : {}];
        })
      : list;
  const wire: JsonObject = { ...rest };
  if (rest.prev_events !== undefined) wire.prev_events = pair(rest.prev_events, hashes.prev_events);
  if (rest.auth_events !== undefined) wire.auth_events = pair(rest.auth_events, hashes.auth_events);
  return wire as T;
}

/** A new v1/v2 event id: `$`, 18 random url-safe characters (about 108 bits) and this server's name. */
export function newV1EventId(serverName: string): string {
  return `$${randomBytes(14).toString('base64url').slice(0, 18)}:${serverName}`;
}

/** Rooms v1-v5 predate canonical JSON's integer rule; their events are encoded leniently. */
function encodingOf(version: RoomVersion): { lenient: boolean } {
  return { lenient: !version.strictCanonicalJson };
}

/** The content hash (unpadded base64 SHA-256) over everything but `unsigned`, `signatures` and `hashes`. */
export function contentHash(pdu: JsonObject, version: RoomVersion): string {
  const { unsigned: _unsigned, signatures: _signatures, hashes: _hashes, ...covered } = wirePdu(pdu, version);
  return unpaddedBase64(createHash('sha256').update(canonicalJsonBytes(covered, encodingOf(version))).digest());
}

/** The bytes of the redacted event without `signatures` and `unsigned`: signed, and hashed for the id. */
function essentialBytes(pdu: JsonObject, version: RoomVersion): Buffer {
  const { signatures: _signatures, unsigned: _unsigned, ...redacted } = redactPdu(wirePdu(pdu, version), version.id);
  return canonicalJsonBytes(redacted, encodingOf(version));
}

/**
 * The event id: `$` and the reference hash, in the room version's base64 alphabet; for v1/v2
 * rooms the `event_id` the event carries ('' when it has none: pduFormatProblem refuses those).
 */
export function eventIdOf(pdu: JsonObject, version: RoomVersion): string {
  if (version.eventFormat === 'v1') return typeof pdu.event_id === 'string' ? pdu.event_id : '';
  return eventIdFromHash(referenceHash(pdu, version), version);
}

/** The reference hash: SHA-256 of the redacted event without signatures and unsigned. */
export function referenceHash(pdu: JsonObject, version: RoomVersion): Buffer {
  return createHash('sha256').update(essentialBytes(pdu, version)).digest();
}

function eventIdFromHash(hash: Buffer, version: RoomVersion): string {
  return `$${version.eventIdEncoding === 'base64url' ? hash.toString('base64url') : unpaddedBase64(hash)}`;
}

/** A v12 room's id: the create event's id with `!` for `$`. */
export function roomIdFromCreateEventId(eventId: string): string {
  return `!${eventId.slice(1)}`;
}

/**
 * Hashes and signs a local event and computes its id. The signature covers the redacted event
 * (so it still verifies after a redaction) and its content hash (so nothing else can change).
 */
export function finishPdu(draft: UnsignedPdu, version: RoomVersion, signer: Signer): { pdu: Pdu; eventId: string } {
  // v1/v2: the id is ours to choose, and is part of what is hashed and signed. The pairs' hashes
  // are left empty, as Synapse leaves them: no server checks them.
  const v1Id = version.eventFormat === 'v1' ? (typeof draft.event_id === 'string' ? draft.event_id : newV1EventId(signer.serverName)) : undefined;
  // Other servers take a v1/v2 id only on the domain of a server that signed the event.
  if (v1Id !== undefined && v1Id.slice(v1Id.indexOf(':') + 1) !== signer.serverName) throw new Error(`event id ${v1Id.slice(0, 100)} is not on ${signer.serverName}, the signing server`);
  const full: JsonObject = v1Id === undefined ? draft : { ...draft, event_id: v1Id };
  const hashed: JsonObject = { ...full, hashes: { sha256: contentHash(full, version) } };
  const bytes = essentialBytes(hashed, version);
  const signature = unpaddedBase64(signer.sign(bytes));
  const pdu = { ...hashed, signatures: { [signer.serverName]: { [signer.keyId]: signature } } } as Pdu;
  return { pdu, eventId: v1Id ?? eventIdFromHash(createHash('sha256').update(bytes).digest(), version) };
}

/** Whether the PDU's `hashes.sha256` matches its content: false means it must be redacted. */
export function hasValidContentHash(pdu: JsonObject, version: RoomVersion): boolean {
  const hashes = pdu.hashes;
  if (typeof hashes !== 'object' || hashes === null) return false;
  const claimed = (hashes as Record<string, unknown>).sha256;
  if (typeof claimed !== 'string') return false;
  const decoded = decodeBase64(claimed);
  if (!decoded) return false;
  try {
    return unpaddedBase64(decoded) === contentHash(pdu, version);
  } catch {
    return false;
  }
}

/**
 * Adds this server's signature to another server's PDU (an invite to one of our users, a
 * restricted join we vouch for). The id does not change: signatures are not part of it.
 */
export function cosignPdu(pdu: Pdu, version: RoomVersion, signer: Signer): Pdu {
  const signature = unpaddedBase64(signer.sign(essentialBytes(pdu, version)));
  const signatures: Signatures = { ...pdu.signatures, [signer.serverName]: { ...(pdu.signatures[signer.serverName] ?? {}), [signer.keyId]: signature } };
  return { ...pdu, signatures };
}

/** The object a server's signature on the PDU covers (its redacted wire form), for verification. */
export function signedForm(pdu: JsonObject, version: RoomVersion): JsonObject {
  return redactPdu(wirePdu(pdu, version), version.id);
}

/** Signs any JSON object for this server (the key listing, requests, invites): re-exported for the rooms code. */
export { signJson };

/**
 * The PDU a stored event was made from, to serve to other servers (in the wire form of the room
 * version): the columns and the extra keys put back together. A redacted event comes out redacted (its signature still verifies; its
 * content hash, rightly, does not). Undefined for events from before events were PDUs.
 */
export function pduOf(event: StoredEvent, version: RoomVersion): Pdu | undefined {
  if (event.prevEvents === undefined || event.authEvents === undefined || event.pduExtra === undefined) return undefined;
  const pdu: JsonObject = {
    ...event.pduExtra,
    sender: event.sender,
    type: event.type,
    content: event.content,
    origin_server_ts: event.originServerTs,
    depth: event.depth,
    prev_events: event.prevEvents,
    auth_events: event.authEvents,
  };
  // A v12 room's create event has no room_id: the room id is its own id.
  if (!(version.roomIdFromCreateEvent && event.type === 'm.room.create')) pdu.room_id = event.roomId;
  if (event.stateKey !== undefined) pdu.state_key = event.stateKey;
  if (event.redacts !== undefined && !version.v11) pdu.redacts = event.redacts;
  const wire = wirePdu(pdu, version);
  return (event.redactedBy !== undefined ? redactPdu(wire, version.id) : wire) as Pdu;
}
