/**
 * Room versions: what changes from one to the next (rooms/v1..v12), as data the event format,
 * the redaction algorithm, the auth rules and state resolution read. Versions 1 to 12 are
 * supported, for creating, joining and upgrading.
 */

export interface RoomVersion {
  readonly id: string;
  /**
   * v1-v2: events carry their own `event_id` (`$opaque:server`, chosen by the sending server, who
   * must sign the event), and `prev_events`/`auth_events` are `[event_id, {sha256}]` pairs.
   * v3+: the id is the reference hash and is not sent; the lists hold bare ids.
   */
  readonly eventFormat: 'v1' | 'v3';
  /** v1-v2: a redaction is allowed by the auth rules (rule 11) only with the redact level or from the redacted event's id domain. */
  readonly redactionAuthRule: boolean;
  /** v3: the reference hash in standard base64; v4+: url-safe base64 (v1-v2: unused, ids are not hashes). */
  readonly eventIdEncoding: 'base64' | 'base64url';
  /** v5+: signing keys must be valid at the event's origin_server_ts. */
  readonly enforceKeyValidity: boolean;
  /** v6+: events must be canonical JSON (integers in range, no floats); v1-v5 events may not be. */
  readonly strictCanonicalJson: boolean;
  /** v1-v5: m.room.aliases has its own auth rule (and keeps `aliases` when redacted). */
  readonly aliasesAuthRule: boolean;
  /** v6+: changes to `notifications` in power levels are checked like `events`. */
  readonly notificationsPowerLevels: boolean;
  /** v7+: knocking. */
  readonly knocking: boolean;
  /** v8+: restricted join rules (`join_authorised_via_users_server`). */
  readonly restrictedJoins: boolean;
  /** v10+: the `knock_restricted` join rule. */
  readonly knockRestricted: boolean;
  /** v1-v9: power levels may be strings holding integers. */
  readonly stringyPowerLevels: boolean;
  /** v1-v5: power levels may be floats (truncated). */
  readonly floatyPowerLevels: boolean;
  /** v10+: power levels must be integers (auth rules check every level property). */
  readonly integerPowerLevels: boolean;
  /** v11+: no `creator` in the create event (the sender is the creator); `redacts` in content. */
  readonly v11: boolean;
  /** v12: creators (the create event's sender and `additional_creators`) have infinite power. */
  readonly privilegedCreators: boolean;
  /** v12: the room id is the create event's id with `!`; the create event has no room_id. */
  readonly roomIdFromCreateEvent: boolean;
  /** v3-v11 put the create event in every event's auth_events; v12 must not. */
  readonly createInAuthEvents: boolean;
  /** The redaction algorithm's generation (rooms/vN "Redactions"). */
  readonly redaction: 'v3' | 'v6' | 'v8' | 'v9' | 'v11';
  readonly stateResolution: 'v1' | 'v2' | 'v2.1';
}

function version(n: number): RoomVersion {
  return {
    id: String(n),
    eventFormat: n <= 2 ? 'v1' : 'v3',
    redactionAuthRule: n <= 2,
    eventIdEncoding: n >= 4 ? 'base64url' : 'base64',
    enforceKeyValidity: n >= 5,
    strictCanonicalJson: n >= 6,
    aliasesAuthRule: n <= 5,
    notificationsPowerLevels: n >= 6,
    knocking: n >= 7,
    restrictedJoins: n >= 8,
    knockRestricted: n >= 10,
    stringyPowerLevels: n <= 9,
    floatyPowerLevels: n <= 5,
    integerPowerLevels: n >= 10,
    v11: n >= 11,
    privilegedCreators: n >= 12,
    roomIdFromCreateEvent: n >= 12,
    createInAuthEvents: n <= 11,
    redaction: n >= 11 ? 'v11' : n >= 9 ? 'v9' : n >= 8 ? 'v8' : n >= 6 ? 'v6' : 'v3',
    stateResolution: n >= 12 ? 'v2.1' : n >= 2 ? 'v2' : 'v1',
  };
}

const VERSIONS: ReadonlyMap<string, RoomVersion> = new Map([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12].map((n) => [String(n), Object.freeze(version(n))]));

/** What `createRoom` makes without a `room_version`: Synapse's default, which Element expects. */
export const DEFAULT_ROOM_VERSION = '10';

/** The versions this server creates and joins, oldest first; `/capabilities` advertises them all as stable. */
export const SUPPORTED_ROOM_VERSIONS: readonly string[] = [...VERSIONS.keys()];

/** The version's rules, or undefined for a version this server does not support. */
export function roomVersion(id: string): RoomVersion | undefined {
  return VERSIONS.get(id);
}

/** Like roomVersion, for a version already known to be supported (a room's stored version). */
export function knownRoomVersion(id: string): RoomVersion {
  const found = VERSIONS.get(id);
  if (!found) throw new Error(`unsupported room version ${id}`);
  return found;
}
