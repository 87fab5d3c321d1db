/**
 * The port through which the room side asks other servers for what their events need (events by
 * id, the events in a gap, the state at an event), implemented by the federation layer
 * (federation/remote-source.ts) and read through gathered-answers.ts.
 */
import type { Pdu } from './pdu.js';

/** A PDU whose format, signatures and hashes the federation layer has checked. */
export interface VerifiedPdu {
  eventId: string;
  /** The PDU as it will be stored (its redacted form when its content hash failed). */
  pdu: Pdu;
  /** Servers whose signatures on it are valid (for join_authorised_via_users_server). */
  signers?: ReadonlySet<string> | undefined;
}

/** What the room side may ask the sending server (implemented by the federation layer). */
export interface RemoteEventSource {
  /** Events by id, checked (format, signatures, hashes); missing ones are left out. */
  events(roomId: string, eventIds: readonly string[]): Promise<VerifiedPdu[]>;
  /** Events between what we have (`earliest`) and `latest`, checked: the gap before an event. */
  missingEvents(roomId: string, earliest: readonly string[], latest: readonly string[], limit: number): Promise<VerifiedPdu[]>;
  /** The state before an event, as ids (with its auth chain), for a gap we cannot fill. */
  stateIdsBefore(roomId: string, eventId: string): Promise<{ stateIds: string[]; authChainIds: string[] }>;
  /** The same as whole events, checked: one request instead of one per event we lack. */
  stateBefore(roomId: string, eventId: string): Promise<VerifiedPdu[]>;
  /** An event's whole auth chain, checked (/event_auth): one request instead of one per level. */
  authChain(roomId: string, eventId: string): Promise<VerifiedPdu[]>;
  /** Whether it will ask nothing more (its budget is spent). */
  exhausted?(): boolean;
}

/** The source will ask nothing more for this batch (its budget is spent, or its deadline passed). */
export class FetchRefused extends Error {
  override name = 'FetchRefused';
}
