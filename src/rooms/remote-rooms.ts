/**
 * What the room service asks of federation: joining and leaving rooms this server is not in,
 * having an invite countersigned by the invitee's server, remote aliases and profiles. Declared
 * here, implemented in federation/membership.ts, so rooms never import federation.
 */
import type { JsonObject } from './events.js';
import type { Pdu } from './pdu.js';
import type { RoomVersion } from './room-versions.js';

export interface RemoteRooms {
  /** Joins `userId` through one of `servers`; resolves once the room is stored here, joined. */
  join(userId: string, roomId: string, servers: readonly string[], content: JsonObject): Promise<void>;
  /** Knocks on a room this server is not in, through one of `servers`. */
  knock(userId: string, roomId: string, servers: readonly string[], content: JsonObject): Promise<void>;
  /** Leaves a room this server is not in (rejects an invite), through one of `servers`. */
  leave(userId: string, roomId: string, servers: readonly string[], reason: string | undefined): Promise<void>;
  /** Has the invitee's server countersign an invite built here; returns the signed event. */
  countersignInvite(roomId: string, version: RoomVersion, invite: { pdu: Pdu; eventId: string }, strippedState: JsonObject[]): Promise<Pdu>;
  /** A room alias of another server: its room and the servers to join through. */
  resolveAlias(alias: string): Promise<{ roomId: string; servers: string[] }>;
  /** Another server's public room directory, a page at a time. */
  publicRooms(server: string, query: PublicRoomsQuery): Promise<JsonObject>;
  /** The display name and avatar of a user of another server (undefined when unknown). */
  profile(userId: string, field?: 'displayname' | 'avatar_url'): Promise<JsonObject | undefined>;
}

/** A page of a room directory: at most `limit` rooms after `since`, whose name, topic or alias contains `searchTerm`. */
export interface PublicRoomsQuery {
  limit?: number | undefined;
  since?: string | undefined;
  searchTerm?: string | undefined;
}

/**
 * Gaps in a room's timeline filled from other servers (/backfill; implemented in
 * federation/backfill.ts). A gap opens when events arrive built on events this server never got
 * (after a long silence); /messages pages back over it and asks for it to be filled.
 */
export interface GapFiller {
  /**
   * Fills the room's gaps that lie below `belowDepth`, nearest first: 'filled' when events were
   * added, 'pending' when `waitMs` passed first (the fill goes on), 'none' when nothing could be
   * added (no server could help; it is not asked again for a while).
   */
  fill(roomId: string, belowDepth: number, waitMs: number): Promise<'filled' | 'pending' | 'none'>;
}
