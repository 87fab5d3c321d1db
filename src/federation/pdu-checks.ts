/**
 * Steps 1 to 3 of "Checks performed on receipt of a PDU": a PDU from another server must have the
 * format of its room version (else dropped), carry a valid signature of the sender's server (else
 * dropped) and match its content hash (else it is redacted before anything else sees it). What
 * passes goes on to the room side (rooms/remote-events.ts) for the auth checks.
 */
import { canonicalJsonProblem } from '../core/canonical-json.js';
import { MAX_JSON_DEPTH } from '../core/json.js';
import { domainOf, isUserId } from '../rooms/auth-rules.js';
import { MAX_EVENT_BYTES } from '../rooms/events.js';
import { eventIdOf, hasValidContentHash, pduFromWire, referencesProblem, signedForm, V1_REFERENCE_HASHES, type Pdu } from '../rooms/pdu.js';
import { redactPdu } from '../rooms/redaction.js';
import type { VerifiedPdu } from '../rooms/remote-events.js';
import type { RoomVersion } from '../rooms/room-versions.js';
import type { KeyRing } from './key-ring.js';
import type { FetchBudget } from './fetch-budget.js';

/** Synapse's limits on how many parents and auth events an event may name. */
const MAX_PREV_EVENTS = 20;
const MAX_AUTH_EVENTS = 10;

/**
 * `unsigned`: dropped for want of a valid signature of its sender's server (no hashes or
 * signatures at all, or none that verifies): a refusal (403), where a malformed PDU is a bad
 * request (400).
 */
export type PduCheck = { verified: VerifiedPdu & { signers: ReadonlySet<string> } } | { dropped: string; unsigned: boolean };

const UNHASHED = 'hashes.sha256 is missing';
const UNSIGNED = 'signatures is missing';

/** Step 1: the event format of the room version. Returns why it is malformed, or undefined. */
export function pduFormatProblem(raw: unknown, version: RoomVersion, roomId: string): string | undefined {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) return 'not an object';
  const pdu = raw as Record<string, unknown>;
  for (const key of ['type', 'sender'] as const) if (typeof pdu[key] !== 'string') return `${key} is not a string`;
  if (!isUserId(pdu.sender as string)) return 'sender is not a user id';
  if (typeof pdu.content !== 'object' || pdu.content === null || Array.isArray(pdu.content)) return 'content is not an object';
  if (!Number.isSafeInteger(pdu.origin_server_ts)) return 'origin_server_ts is not an integer';
  if (!Number.isSafeInteger(pdu.depth) || (pdu.depth as number) < 0) return 'depth is not a non-negative integer';
  if (pdu.state_key !== undefined && typeof pdu.state_key !== 'string') return 'state_key is not a string';
  const v1 = version.eventFormat === 'v1';
  if (v1) {
    // v1/v2: the event names itself, `$opaque:server`; the lists hold [event_id, hashes] pairs.
    if (typeof pdu.event_id !== 'string' || !/^\$[^:]+:.+$/.test(pdu.event_id) || Buffer.byteLength(pdu.event_id) > 255) return 'event_id is not an event id with a server';
    if (Object.hasOwn(pdu, V1_REFERENCE_HASHES)) return `${V1_REFERENCE_HASHES} is not a PDU key`;
  }
  for (const [key, max] of [['prev_events', MAX_PREV_EVENTS], ['auth_events', MAX_AUTH_EVENTS]] as const) {
    const list = pdu[key];
    if (Array.isArray(list) && list.length > max) return `${key} names more than ${max} events`;
    if (v1) {
      const problem = referencesProblem(list);
      if (problem) return `${key}: ${problem}`;
    } else if (!Array.isArray(list) || !list.every((id) => typeof id === 'string' && id.startsWith('$'))) return `${key} is not a list of event ids`;
  }
  const hashes = pdu.hashes as Record<string, unknown> | undefined;
  if (typeof hashes !== 'object' || hashes === null || typeof hashes.sha256 !== 'string') return UNHASHED;
  if (typeof pdu.signatures !== 'object' || pdu.signatures === null) return UNSIGNED;
  const isV12Create = version.roomIdFromCreateEvent && pdu.type === 'm.room.create';
  if (isV12Create ? pdu.room_id !== undefined : pdu.room_id !== roomId) return `room_id is not ${roomId}`;
  // v6+: canonical JSON throughout (no floats, integers in range); any version: our depth limit.
  const problem = canonicalJsonProblem(version.strictCanonicalJson ? pdu : { content: pdu.content }, MAX_JSON_DEPTH + 2);
  if (problem && (version.strictCanonicalJson || problem.includes('nested'))) return problem;
  if (Buffer.byteLength(JSON.stringify(pdu), 'utf8') > MAX_EVENT_BYTES) return `larger than ${MAX_EVENT_BYTES} bytes`;
  return undefined;
}

/**
 * All three steps for one PDU. `signers` holds every server whose signature is valid (the
 * sender's, and whoever vouched for a restricted join), for the auth rules to ask. A PDU can name
 * any server as its sender's: the keys fetched to check it count against `budget`, what the
 * inbound request that brought it may make us fetch (FetchBudget), so that fifty events of fifty
 * servers that never answer cost one request's deadline, not fifty key fetches' timeouts.
 */
export async function checkPdu(raw: unknown, version: RoomVersion, roomId: string, keyRing: KeyRing, budget?: FetchBudget): Promise<PduCheck> {
  const problem = pduFormatProblem(raw, version, roomId);
  if (problem) return { dropped: `malformed: ${problem}`, unsigned: problem === UNHASHED || problem === UNSIGNED };
  const { unsigned: _unsigned, ...pdu } = raw as Pdu;
  const lenient = !version.strictCanonicalJson;
  // Step 2: signatures over the redacted form, by the sender's server (keys valid at the event's
  // time from v5; the spec's key validity rules are in the key ring).
  const redacted = signedForm(pdu, version);
  const senderServer = domainOf(pdu.sender);
  const validAt = version.enforceKeyValidity ? pdu.origin_server_ts : 0;
  if (!(await keyRing.isSignedBy(redacted, senderServer, validAt, lenient, budget))) return { dropped: `not signed by ${senderServer}`, unsigned: true };
  const signers = new Set([senderServer]);
  // v1/v2: the server named in the event id must have signed it too (rooms/v1, auth rules).
  if (version.eventFormat === 'v1') {
    const idServer = domainOf(pdu.event_id as string);
    if (idServer !== senderServer) {
      if (!(await keyRing.isSignedBy(redacted, idServer, validAt, lenient, budget))) return { dropped: `not signed by ${idServer}, the server of its event id`, unsigned: true };
      signers.add(idServer);
    }
  }
  const via = (pdu.content as Record<string, unknown>).join_authorised_via_users_server;
  if (version.restrictedJoins && pdu.type === 'm.room.member' && typeof via === 'string' && isUserId(via)) {
    const viaServer = domainOf(via);
    if (viaServer !== senderServer && (await keyRing.isSignedBy(redacted, viaServer, validAt, lenient, budget))) signers.add(viaServer);
  }
  // Step 3: a content hash mismatch means we were handed something other than what was signed:
  // only the redacted form can be trusted.
  const stored = hasValidContentHash(pdu, version) ? pdu : (redactPdu(pdu, version.id) as Pdu);
  return { verified: { eventId: eventIdOf(pdu, version), pdu: pduFromWire(stored, version) as Pdu, signers } };
}
