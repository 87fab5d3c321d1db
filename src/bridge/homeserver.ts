/**
 * What the bridge needs of a homeserver: to follow its rooms and act in them as the bridge user.
 * Two homeservers fit: this server, in process (`LocalHomeserver`, the default), and another
 * homeserver that runs the bridge as an application service (`AppserviceHomeserver`). The bridge's
 * commands, webhooks and feeds are the same over both.
 */
import type { JsonObject } from '../rooms/events.js';
import type { BridgeStore } from '../storage/bridge-store.js';
import type { CryptoTransport, DeviceDelivery } from './crypto/crypto-device.js';

/**
 * A message in a room the bridge is joined to, sent after it joined (a candidate command):
 * `m.room.message`, or `m.room.encrypted` for the bridge's crypto device to decrypt.
 */
export interface RoomMessage {
  roomId: string;
  sender: string;
  eventId: string;
  type: string;
  content: JsonObject;
  /** The whole event as delivered (what decryption needs). */
  event: JsonObject;
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
  /** What came for the bridge's crypto device (to-device messages, device lists, key counts). */
  device?: DeviceDelivery | undefined;
}

/**
 * Takes a batch. `checkpoint` must run in the same storage transaction as whatever the handler
 * records of the batch: it marks the batch as taken (a sync token, a transaction id), so after a
 * crash the batch is either taken with its records or comes again.
 */
export type ActivityHandler = (activity: RoomActivity, checkpoint: Checkpoint) => Promise<void>;

/** Marks a batch as taken, inside the storage transaction that records it. */
export type Checkpoint = (stores: { bridge: BridgeStore }) => Promise<void>;

/**
 * Whether a client event is `userId` joining its room: its membership becomes `join` from
 * anything else. A join that follows a join (`unsigned.prev_content`) is a profile change (a new
 * display name or avatar, which the homeserver writes into every joined room), not a join: what
 * came before it in the room was meant for the user all the same.
 */
export function isJoinOf(event: JsonObject, userId: string): boolean {
  if (event.type !== 'm.room.member' || event.state_key !== userId) return false;
  if ((event.content as JsonObject | undefined)?.membership !== 'join') return false;
  const unsigned = event.unsigned as JsonObject | undefined;
  const before = (unsigned?.prev_content as JsonObject | undefined)?.membership;
  return before !== 'join';
}

/** The power levels of a room, as far as the bridge asks. */
export interface RoomPowers {
  of(userId: string): number;
  stateDefault: number;
}

export interface BridgeHomeserver extends CryptoTransport {
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
  /** A new direct-message room with `userId`, invited; encrypted when asked. */
  createDirectRoom(userId: string, encrypted?: boolean): Promise<string>;
  /** A user's membership in a room (`join`, `invite`, `leave`, `ban`), or undefined if none. */
  membership(roomId: string, userId: string): Promise<string | undefined>;
  powers(roomId: string): Promise<RoomPowers | undefined>;
  /** The room's name and canonical alias, where set. */
  roomNames(roomId: string): Promise<{ name?: string | undefined; alias?: string | undefined }>;
  /** An event of a room as the bridge may see it, or undefined. */
  event(roomId: string, eventId: string): Promise<{ sender: string; type: string; content: JsonObject; redacted: boolean; event: JsonObject } | undefined>;
  /**
   * The bridge's crypto device from now on: it exists on the homeserver (with this display
   * name), its requests are made as it, and what comes for it is delivered in `RoomActivity.device`.
   */
  useDevice(deviceId: string, displayName: string): Promise<void>;
  /** The room's `m.room.encryption` content, or undefined for a room that is not encrypted. */
  encryption(roomId: string): Promise<JsonObject | undefined>;
  /** Who a message in the room is encrypted for: its joined and invited members. */
  members(roomId: string): Promise<string[]>;
  /** Whether the bridge has answered (replied to) the event already. */
  hasAnswered(roomId: string, eventId: string): Promise<boolean>;
  /** The bridge's global account data of `type`, or undefined. */
  accountData(type: string): Promise<JsonObject | undefined>;
  setAccountData(type: string, content: JsonObject): Promise<void>;
}
