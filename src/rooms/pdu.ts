/**
 * Events as the federation sees them (PDUs, room versions 3+): the content hash, the signature of
 * the originating server, and the event id, which is the event's reference hash
 * (server-server API, "Signing Events"). Every local event is finished here before it is
 * stored; every remote one is checked here before anything else looks at it.
 */
import { createHash } from 'node:crypto';
import { canonicalJsonBytes } from '../core/canonical-json.js';
import { decodeBase64, signJson, unpaddedBase64, type Signer, type Signatures } from '../core/signed-json.js';
import type { StoredEvent } from './events.js';
import { redactPdu } from './redaction.js';
import type { RoomVersion } from './room-versions.js';

export type JsonObject = Record<string, unknown>;

/** A PDU of room version 3 or later. Unknown top-level keys are kept: they are hashed too. */
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

/** Rooms v1-v5 predate canonical JSON's integer rule; their events are encoded leniently. */
function encodingOf(version: RoomVersion): { lenient: boolean } {
  return { lenient: !version.strictCanonicalJson };
}

/** The content hash (unpadded base64 SHA-256) over everything but `unsigned`, `signatures` and `hashes`. */
export function contentHash(pdu: JsonObject, version: RoomVersion): string {
  const { unsigned: _unsigned, signatures: _signatures, hashes: _hashes, ...covered } = pdu;
  return unpaddedBase64(createHash('sha256').update(canonicalJsonBytes(covered, encodingOf(version))).digest());
}

/** The bytes of the redacted event without `signatures` and `unsigned`: signed, and hashed for the id. */
function essentialBytes(pdu: JsonObject, version: RoomVersion): Buffer {
  const { signatures: _signatures, unsigned: _unsigned, ...redacted } = redactPdu(pdu, version.id);
  return canonicalJsonBytes(redacted, encodingOf(version));
}

/** The event id: `$` and the reference hash, in the room version's base64 alphabet. */
export function eventIdOf(pdu: JsonObject, version: RoomVersion): string {
  return eventIdFromHash(createHash('sha256').update(essentialBytes(pdu, version)).digest(), version);
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
  const hashed: JsonObject = { ...draft, hashes: { sha256: contentHash(draft, version) } };
  const bytes = essentialBytes(hashed, version);
  const signature = unpaddedBase64(signer.sign(bytes));
  const pdu = { ...hashed, signatures: { [signer.serverName]: { [signer.keyId]: signature } } } as Pdu;
  return { pdu, eventId: eventIdFromHash(createHash('sha256').update(bytes).digest(), version) };
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

/** The object a server's signature on the PDU covers (its redacted form), for verification. */
export function signedForm(pdu: JsonObject, version: RoomVersion): JsonObject {
  return redactPdu(pdu, version.id);
}

/** Signs any JSON object for this server (the key listing, requests, invites): re-exported for the rooms code. */
export { signJson };

/**
 * The PDU a stored event was made from, to serve to other servers: the columns and the extra keys
 * put back together. A redacted event comes out redacted (its signature still verifies; its
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
  return (event.redactedBy !== undefined ? redactPdu(pdu, version.id) : pdu) as Pdu;
}
