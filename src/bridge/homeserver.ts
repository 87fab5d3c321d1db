/**
 * What the bridge needs of a homeserver: to follow its rooms and act in them as the bridge user.
 * Two homeservers fit: this server, in process (`LocalHomeserver`, the default), and another
 * homeserver that runs the bridge as an application service (`AppserviceHomeserver`). The bridge's
 * commands, webhooks and feeds are the same over both.
 */
import type { JsonObject } from '../rooms/events.js';
import type { BridgeStore } from '../storage/bridge-store.js';

/** A message in a room the bridge is joined to, sent after it joined (a candidate command). */
export interface RoomMessage {
  roomId: string;
  sender: string;
  eventId: string;
  content: JsonObject;
}

/** What happened in the bridge's rooms since the last batch, in order. */
export interface RoomActivity {
  messages: RoomMessage[];
  /** Rooms the bridge was invited to. */
  invites: string[];
  /** Rooms the bridge left, was kicked or banned from. */
  leaves: string[];
  /** True for the first batch ever: history, in which no command was meant for the bridge. */
  initial: boolean;
}

/**
 * Takes a batch. `checkpoint` must run in the same storage transaction as whatever the handler
 * records of the batch: it marks the batch as taken (a sync token, a transaction id), so after a
 * crash the batch is either taken with its records or comes again.
 */
export type ActivityHandler = (activity: RoomActivity, checkpoint: Checkpoint) => Promise<void>;

/** Marks a batch as taken, inside the storage transaction that records it. */
export type Checkpoint = (stores: { bridge: BridgeStore }) => Promise<void>;

/** The power levels of a room, as far as the bridge asks. */
export interface RoomPowers {
  of(userId: string): number;
  stateDefault: number;
}

export interface BridgeHomeserver {
  /** The bridge user. */
  readonly userId: string;
  /** Before following: the bridge's account is usable (created, if the homeserver is this one). */
  prepare(): Promise<void>;
  /** Delivers batches to `handler` until `signal` aborts; resolves then. */
  follow(handler: ActivityHandler, signal: AbortSignal): Promise<void>;
  join(roomId: string): Promise<void>;
  /**
   * Sends an event as the bridge; resolves with its id once the homeserver has it. A `txnId`
   * makes it idempotent: the same one again answers the first event.
   */
  send(roomId: string, type: string, content: JsonObject, txnId?: string): Promise<string>;
  redact(roomId: string, eventId: string, reason: string): Promise<void>;
  /** A new direct-message room with `userId`, invited. */
  createDirectRoom(userId: string): Promise<string>;
  /** A user's membership in a room (`join`, `invite`, `leave`, `ban`), or undefined if none. */
  membership(roomId: string, userId: string): Promise<string | undefined>;
  powers(roomId: string): Promise<RoomPowers | undefined>;
  /** The room's name and canonical alias, where set. */
  roomNames(roomId: string): Promise<{ name?: string | undefined; alias?: string | undefined }>;
  /** An event of a room as the bridge may see it, or undefined. */
  event(roomId: string, eventId: string): Promise<{ sender: string; content: JsonObject; redacted: boolean } | undefined>;
  /** Whether the bridge has answered (replied to) the event already. */
  hasAnswered(roomId: string, eventId: string): Promise<boolean>;
  /** The bridge's global account data of `type`, or undefined. */
  accountData(type: string): Promise<JsonObject | undefined>;
  setAccountData(type: string, content: JsonObject): Promise<void>;
}
