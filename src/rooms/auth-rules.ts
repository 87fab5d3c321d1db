/**
 * Room authorization rules as pure functions: given an event, the room state to judge it by and
 * the room version, say whether the event is allowed. Used for local events (against the room's
 * current state), for remote ones (against their auth events, the state before them and the
 * current state) and by state resolution.
 *
 * Follows "Authorisation rules" of room versions 3 to 12 (rooms/v3..v12). Comments cite the rule
 * numbers of room version 12 ("rule 5.3.5"); older versions number some rules one lower (no rule 2
 * for the room id) or differ where marked. The checks of an event's `auth_events` list (v12 rule 3,
 * v3-v11 rule 2) are in `checkAuthEventsSelection`, since they need the auth events themselves.
 */
import { decodeBase64, ed25519PublicKey, hasValidSignature } from '../core/signed-json.js';
import type { KeyObject } from 'node:crypto';
import { knownRoomVersion, roomVersion, type RoomVersion } from './room-versions.js';

export interface StateEvent {
  /** Known for stored events; needed to tell "the only previous event is the create event". */
  event_id?: string;
  type: string;
  state_key: string;
  sender: string;
  content: Record<string, unknown>;
}

/** Looks up the state to judge an event by (the state before it). */
export type StateLookup = (type: string, stateKey: string) => StateEvent | undefined;

export interface ProposedEvent {
  type: string;
  state_key?: string;
  sender: string;
  content: Record<string, unknown>;
  /** Set on PDUs; v12 create events have none. */
  room_id?: string;
  /** Set on PDUs: a create event must have none, and a creator's first join follows the create event alone. */
  prev_events?: readonly string[];
  /** v1/v2 rooms: the event's own id (`$opaque:server`), for rule 11; absent for a local event not yet made (its id will be on the sender's server). */
  event_id?: string;
  /** The event a redaction redacts (top-level `redacts`, or in content from v11). */
  redacts?: string;
}

export interface AuthOptions {
  /**
   * Whether the event is validly signed by a server (`join_authorised_via_users_server`, v8+).
   * The default says yes for this server's own name only, for events this server signs itself.
   */
  isSignedBy?: (serverName: string) => boolean;
}

export type AuthResult = { allowed: true } | { allowed: false; reason: string };

export interface PowerLevels {
  users: Readonly<Record<string, number>>;
  users_default: number;
  events: Readonly<Record<string, number>>;
  events_default: number;
  state_default: number;
  ban: number;
  kick: number;
  redact: number;
  invite: number;
  notifications: Readonly<Record<string, number>>;
  /** v12: the room's creators, whose power is infinite; empty before. */
  creators: ReadonlySet<string>;
}

const ALLOW: AuthResult = { allowed: true };

function deny(reason: string): AuthResult {
  return { allowed: false, reason };
}

/** The server name of a user id (or room id, alias, event id with a domain). */
export function domainOf(id: string): string {
  const colon = id.indexOf(':');
  return colon === -1 ? '' : id.slice(colon + 1);
}

/** Checks an event against the state before it, by the rules of `version`. */
export function checkEventAuth(event: ProposedEvent, state: StateLookup, version: RoomVersion, options: AuthOptions = {}): AuthResult {
  // Rule 1.
  if (event.type === 'm.room.create') return checkCreate(event, state, version);

  const create = state('m.room.create', '');
  // Rule 2 (v12) and the create event among the auth events (v3-v11 rule 2.4): a room with no
  // create event is no room.
  if (!create) return deny('The room has no m.room.create event');

  // Rule 4 (v3-v11: 3).
  if (create.content['m.federate'] === false && domainOf(event.sender) !== domainOf(create.sender)) {
    return deny(`The room does not federate, and ${event.sender} is not on ${domainOf(create.sender)}`);
  }

  // v1-v5 rule 4: m.room.aliases belongs to the server in its state key.
  if (version.aliasesAuthRule && event.type === 'm.room.aliases') {
    if (event.state_key === undefined) return deny('m.room.aliases has no state_key');
    if (domainOf(event.sender) !== event.state_key) return deny('m.room.aliases may only be set by the server in its state_key');
    return ALLOW;
  }

  // Rule 5.
  if (event.type === 'm.room.member') return checkMembership(event, state, create, version, options);

  // Rule 6.
  if (membershipOf(state, event.sender) !== 'join') return deny(`${event.sender} is not joined to the room`);

  const levels = effectivePowerLevels(state, version);
  const senderLevel = userPowerLevel(levels, event.sender);

  // Rule 7: third-party invite tokens are governed by the invite level alone.
  if (event.type === 'm.room.third_party_invite') {
    return senderLevel >= levels.invite ? ALLOW : deny(`m.room.third_party_invite needs power level ${levels.invite}, ${event.sender} has ${senderLevel}`);
  }

  // Rule 8.
  const required = requiredPowerForEvent(levels, event.type, event.state_key !== undefined);
  if (senderLevel < required) return deny(`Sending ${event.type} needs power level ${required}, ${event.sender} has ${senderLevel}`);

  // Rule 9: a state key naming a user belongs to that user alone.
  if (event.state_key !== undefined && event.state_key.startsWith('@') && event.state_key !== event.sender) {
    return deny(`Only ${event.state_key} may set state with their user id as the state key`);
  }

  // Rule 10.
  if (event.type === 'm.room.power_levels') {
    return checkPowerLevelsChange(event, state('m.room.power_levels', '')?.content, create, version, senderLevel);
  }

  // v1-v2 rule 11: a redaction needs the redact level, or to come from the server of the
  // redacted event's id (both ids name their server).
  if (version.redactionAuthRule && event.type === 'm.room.redaction') {
    if (senderLevel >= levels.redact) return ALLOW;
    const ownServer = domainOf(event.event_id ?? event.sender);
    if (event.redacts !== undefined && domainOf(event.redacts) === ownServer) return ALLOW;
    return deny(`Redacting needs power level ${levels.redact}, or an event of ${ownServer}; ${event.sender} has ${senderLevel}`);
  }

  // Rule 11 (v3+: 11 is the last). Redactions land here too: whether the redaction may take
  // effect is checked when it is applied (canRedact), as the spec's "Handling redactions" says.
  return ALLOW;
}

/** Rule 1. */
function checkCreate(event: ProposedEvent, state: StateLookup, version: RoomVersion): AuthResult {
  // 1.1: a create event has no prev_events; for a local one, the room must not exist yet.
  if ((event.prev_events?.length ?? 0) > 0) return deny('m.room.create must have no prev_events');
  if (state('m.room.create', '')) return deny('The room already has an m.room.create event');
  if (version.roomIdFromCreateEvent) {
    // 1.2 (v12): the room id is derived from the create event, which carries none.
    if (event.room_id !== undefined) return deny('m.room.create must have no room_id in this room version');
  } else if (event.room_id !== undefined && domainOf(event.room_id) !== domainOf(event.sender)) {
    // 1.2 (v3-v11).
    return deny("The room id's domain does not match the sender's");
  }
  // 1.3: an absent room_version means version 1 (m.room.create schema).
  const declared = event.content['room_version'] ?? '1';
  if (typeof declared !== 'string' || !isRecognisedRoomVersion(declared)) return deny(`Unknown room version ${JSON.stringify(declared)}`);
  if (version.privilegedCreators) {
    // 1.4 (v12).
    const additional = event.content['additional_creators'];
    if (additional !== undefined && (!Array.isArray(additional) || !additional.every((id) => typeof id === 'string' && isUserId(id)))) {
      return deny('additional_creators must be a list of user ids');
    }
  } else if (!version.v11 && typeof event.content['creator'] !== 'string') {
    // v3-v10 rule 1.4 (dropped in v11, where the sender is the creator).
    return deny('m.room.create content has no creator');
  }
  return ALLOW;
}

/** Versions a create event may name: every version the spec defines, supported here or not. */
function isRecognisedRoomVersion(id: string): boolean {
  return /^(?:[1-9]|1[0-2])$/.test(id) || roomVersion(id) !== undefined;
}

/** Rule 5. */
function checkMembership(event: ProposedEvent, state: StateLookup, create: StateEvent, version: RoomVersion, options: AuthOptions): AuthResult {
  const target = event.state_key;
  const membership = event.content['membership'];
  // 5.1.
  if (target === undefined) return deny('m.room.member event has no state_key');
  if (typeof membership !== 'string') return deny('m.room.member content has no string membership');

  // 5.2 (v8+): whoever vouched for a restricted join must have signed it.
  const authorisedVia = event.content['join_authorised_via_users_server'];
  if (version.restrictedJoins && authorisedVia !== undefined) {
    if (typeof authorisedVia !== 'string' || !isUserId(authorisedVia)) return deny('join_authorised_via_users_server is not a user id');
    const signed = options.isSignedBy ? options.isSignedBy(domainOf(authorisedVia)) : false;
    if (!signed) return deny(`The join is not signed by ${domainOf(authorisedVia)}, which authorised it`);
  }

  const sender = event.sender;
  const senderMembership = membershipOf(state, sender);
  const targetMembership = membershipOf(state, target);

  switch (membership) {
    case 'join':
      return checkJoin(event, target, state, create, version, senderMembership);
    case 'invite':
      return checkInvite(event, target, state, version, senderMembership, targetMembership);
    case 'leave': {
      // 5.5.1: leaving, or rejecting an invite (or a knock, v7+), is one's own business.
      if (sender === target) {
        const mayLeave = senderMembership === 'invite' || senderMembership === 'join' || (version.knocking && senderMembership === 'knock');
        return mayLeave ? ALLOW : deny(`${sender} cannot leave a room they are not in (membership ${senderMembership})`);
      }
      if (senderMembership !== 'join') return deny(`${sender} is not joined to the room`); // 5.5.2
      const levels = effectivePowerLevels(state, version);
      const senderLevel = userPowerLevel(levels, sender);
      const targetLevel = userPowerLevel(levels, target);
      // 5.5.3: unbanning is a kick of a banned user, so it needs the ban level as well.
      if (targetMembership === 'ban' && senderLevel < levels.ban) return deny(`Unbanning needs power level ${levels.ban}, ${sender} has ${senderLevel}`);
      if (senderLevel >= levels.kick && targetLevel < senderLevel) return ALLOW; // 5.5.4
      return deny(`Kicking needs power level ${levels.kick} and above the target's ${targetLevel}; ${sender} has ${senderLevel}`); // 5.5.5
    }
    case 'ban': {
      if (senderMembership !== 'join') return deny(`${sender} is not joined to the room`); // 5.6.1
      const levels = effectivePowerLevels(state, version);
      const senderLevel = userPowerLevel(levels, sender);
      const targetLevel = userPowerLevel(levels, target);
      if (senderLevel >= levels.ban && targetLevel < senderLevel) return ALLOW; // 5.6.2
      return deny(`Banning needs power level ${levels.ban} and above the target's ${targetLevel}; ${sender} has ${senderLevel}`); // 5.6.3
    }
    case 'knock': {
      if (!version.knocking) return deny(`Knocking is not part of room version ${version.id}`);
      const joinRule = joinRuleOf(state);
      // 5.7.1: knock_restricted only from v10.
      if (joinRule !== 'knock' && !(version.knockRestricted && joinRule === 'knock_restricted')) {
        return deny(`The room's join rule ${joinRule} does not allow knocking`);
      }
      if (sender !== target) return deny('Users can only knock on their own behalf'); // 5.7.2
      if (senderMembership !== 'ban' && senderMembership !== 'invite' && senderMembership !== 'join') return ALLOW; // 5.7.3
      return deny(`${sender} cannot knock with membership ${senderMembership}`); // 5.7.4
    }
    default:
      return deny(`Unknown membership ${JSON.stringify(membership)}`); // 5.8
  }
}

/** Rule 5.3. */
function checkJoin(event: ProposedEvent, target: string, state: StateLookup, create: StateEvent, version: RoomVersion, senderMembership: string): AuthResult {
  // 5.3.1: the creator's own join right after the create event.
  const creator = roomCreator(create, version);
  if (target === creator && isFirstJoin(event, state, create)) return ALLOW;

  if (event.sender !== target) return deny('Users can only join on their own behalf'); // 5.3.2
  if (senderMembership === 'ban') return deny(`${target} is banned from the room`); // 5.3.3

  const joinRule = joinRuleOf(state);
  const invited = senderMembership === 'invite' || senderMembership === 'join';
  // 5.3.4.
  if (joinRule === 'invite' || (version.knocking && joinRule === 'knock')) {
    return invited ? ALLOW : deny(`The room's join rule is ${joinRule} and ${target} is not invited`);
  }
  // 5.3.5 (v8+; knock_restricted from v10).
  if ((version.restrictedJoins && joinRule === 'restricted') || (version.knockRestricted && joinRule === 'knock_restricted')) {
    if (invited) return ALLOW; // 5.3.5.1
    const via = event.content['join_authorised_via_users_server'];
    if (typeof via !== 'string') return deny(`The room is ${joinRule} and ${target} is not invited, nor vouched for`);
    const levels = effectivePowerLevels(state, version);
    if (membershipOf(state, via) !== 'join' || userPowerLevel(levels, via) < levels.invite) {
      return deny(`${via} may not vouch for ${target}: they must be joined and able to invite`); // 5.3.5.2
    }
    return ALLOW; // 5.3.5.3
  }
  if (joinRule === 'public') return ALLOW; // 5.3.6
  return deny(`The room's join rule ${joinRule} does not allow joining`); // 5.3.7
}

/**
 * "The only previous event is the m.room.create event". With the event's prev_events known (a PDU),
 * exactly that; for a local draft without them, read from the state: the create event is all
 * there is (no member, power levels or join rules yet).
 */
function isFirstJoin(event: ProposedEvent, state: StateLookup, create: StateEvent): boolean {
  if (event.prev_events !== undefined && create.event_id !== undefined) {
    return event.prev_events.length === 1 && event.prev_events[0] === create.event_id;
  }
  return event.sender === event.state_key && !state('m.room.member', event.sender) && !state('m.room.power_levels', '') && !state('m.room.join_rules', '');
}

/** Rule 5.4. */
function checkInvite(event: ProposedEvent, target: string, state: StateLookup, version: RoomVersion, senderMembership: string, targetMembership: string): AuthResult {
  const thirdPartyInvite = event.content['third_party_invite'];
  if (thirdPartyInvite !== undefined) return checkThirdPartyInvite(event, target, state, targetMembership, thirdPartyInvite);
  if (senderMembership !== 'join') return deny(`${event.sender} is not joined to the room`); // 5.4.2
  if (targetMembership === 'join') return deny(`${target} is already joined to the room`); // 5.4.3
  if (targetMembership === 'ban') return deny(`${target} is banned from the room`); // 5.4.3
  const levels = effectivePowerLevels(state, version);
  const senderLevel = userPowerLevel(levels, event.sender);
  if (senderLevel >= levels.invite) return ALLOW; // 5.4.4
  return deny(`Inviting needs power level ${levels.invite}, ${event.sender} has ${senderLevel}`); // 5.4.5
}

/** Rule 5.4.1: an invite redeeming a third-party invite token. */
function checkThirdPartyInvite(event: ProposedEvent, target: string, state: StateLookup, targetMembership: string, invite: unknown): AuthResult {
  if (targetMembership === 'ban') return deny(`${target} is banned from the room`); // 5.4.1.1
  const signed = isPlainObject(invite) ? invite['signed'] : undefined;
  if (!isPlainObject(signed)) return deny('third_party_invite has no signed object'); // 5.4.1.2
  const { mxid, token } = signed;
  if (typeof mxid !== 'string' || typeof token !== 'string') return deny('third_party_invite.signed needs mxid and token'); // 5.4.1.3
  if (mxid !== target) return deny('third_party_invite.signed.mxid is not the invited user'); // 5.4.1.4
  const tokenEvent = state('m.room.third_party_invite', token);
  if (!tokenEvent) return deny('No m.room.third_party_invite matches the token'); // 5.4.1.5
  if (tokenEvent.sender !== event.sender) return deny('The invite was not sent by who made the third-party invite'); // 5.4.1.6
  // 5.4.1.7: any signature in `signed` by any of the invite's public keys.
  const keys: KeyObject[] = [];
  const single = tokenEvent.content['public_key'];
  if (typeof single === 'string') keys.push(...compact([ed25519PublicKey(single)]));
  const listed = tokenEvent.content['public_keys'];
  if (Array.isArray(listed)) {
    for (const entry of listed) if (isPlainObject(entry) && typeof entry['public_key'] === 'string') keys.push(...compact([ed25519PublicKey(entry['public_key'])]));
  }
  const signatures = signed['signatures'];
  if (isPlainObject(signatures)) {
    for (const [entity, byKey] of Object.entries(signatures)) {
      if (!isPlainObject(byKey)) continue;
      for (const keyId of Object.keys(byKey)) {
        for (const key of keys) {
          if (decodeBase64(String(byKey[keyId])) && hasValidSignature(signed, entity, new Map([[keyId, key]]))) return ALLOW;
        }
      }
    }
  }
  return deny('No signature in third_party_invite.signed matches the invite\'s public keys'); // 5.4.1.8
}

function compact<T>(values: Array<T | undefined>): T[] {
  return values.filter((value): value is T => value !== undefined);
}

/** Rule 10, once the sender has passed rule 8 for m.room.power_levels. */
function checkPowerLevelsChange(event: ProposedEvent, current: Record<string, unknown> | undefined, create: StateEvent, version: RoomVersion, senderLevel: number): AuthResult {
  const next = event.content;
  if (version.integerPowerLevels) {
    // 10.1 and 10.2 (v10+): only integers.
    for (const key of LEVEL_KEYS) {
      if (next[key] !== undefined && !Number.isSafeInteger(next[key])) return deny(`Power level ${key} must be an integer`);
    }
    for (const key of ['events', 'notifications'] as const) {
      if (next[key] !== undefined && !(isPlainObject(next[key]) && Object.values(next[key]).every(Number.isSafeInteger))) {
        return deny(`Power level ${key} must be an object of integers`);
      }
    }
  }
  // 10.3: users must be user ids with integer levels (numeric strings too before v10).
  const nextUsers = next['users'];
  if (nextUsers !== undefined) {
    if (!isPlainObject(nextUsers)) return deny('Power level users must be an object');
    for (const [userId, level] of Object.entries(nextUsers)) {
      if (!isUserId(userId)) return deny(`Power level users key ${JSON.stringify(userId)} is not a user id`);
      if (readLevel(level, version) === undefined) return deny(`Power level of ${userId} must be an integer`);
    }
    // 10.4 (v12): creators are above power levels and cannot appear in them.
    if (version.privilegedCreators) {
      const creator = [...roomCreators(create, version)].find((id) => Object.hasOwn(nextUsers, id));
      if (creator !== undefined) return deny(`${creator} is a room creator and cannot be given a power level`);
    }
  }

  // 10.5: the first power levels event sets the room up freely.
  if (!current) return ALLOW;

  // 10.6.
  for (const key of LEVEL_KEYS) {
    const problem = outOfReach(key, readLevel(ownValue(current, key), version), readLevel(ownValue(next, key), version), senderLevel, false);
    if (problem) return deny(problem);
  }
  // 10.7 and 10.8 (`notifications` from v6 on).
  for (const key of version.notificationsPowerLevels ? (['events', 'notifications'] as const) : (['events'] as const)) {
    const before = asRecord(current[key]);
    const after = asRecord(next[key]);
    for (const entry of new Set([...Object.keys(before), ...Object.keys(after)])) {
      const problem = outOfReach(`${key}.${entry}`, readLevel(ownValue(before, entry), version), readLevel(ownValue(after, entry), version), senderLevel, false);
      if (problem) return deny(problem);
    }
  }
  // 10.9 and 10.10: other users at the sender's own level are peers and stay untouched; the
  // sender's own entry may go down but never up.
  const usersBefore = asRecord(current['users']);
  const usersAfter = asRecord(next['users']);
  for (const userId of new Set([...Object.keys(usersBefore), ...Object.keys(usersAfter)])) {
    const problem = outOfReach(
      `users.${userId}`,
      readLevel(ownValue(usersBefore, userId), version),
      readLevel(ownValue(usersAfter, userId), version),
      senderLevel,
      userId !== event.sender,
    );
    if (problem) return deny(problem);
  }
  return ALLOW; // 10.11
}

/**
 * Why the sender may not move one power level value from `before` to `after` (either may be absent:
 * added or removed), or undefined if they may. An old value above the sender's level is out of
 * reach, and so is one equal to it when `equalIsOutOfReach` (rule 10.9's "greater than or equal").
 */
function outOfReach(name: string, before: number | undefined, after: number | undefined, senderLevel: number, equalIsOutOfReach: boolean): string | undefined {
  if (before === after) return undefined;
  if (before !== undefined && (before > senderLevel || (equalIsOutOfReach && before === senderLevel))) {
    return `Cannot change ${name}: it is ${before} and the sender's level is ${senderLevel}`;
  }
  if (after !== undefined && after > senderLevel) return `Cannot set ${name} to ${after}, above the sender's level ${senderLevel}`;
  return undefined;
}

const LEVEL_KEYS = ['users_default', 'events_default', 'state_default', 'ban', 'redact', 'kick', 'invite'] as const;

/**
 * A power level value as the room version reads it: integers; before v10 also strings holding an
 * integer ("+100", " 050 "); before v6 also floats, truncated. Undefined for anything else.
 */
export function readLevel(value: unknown, version: RoomVersion): number | undefined {
  if (typeof value === 'number') {
    if (Number.isSafeInteger(value)) return value;
    if (version.floatyPowerLevels && Number.isFinite(value)) return Math.trunc(value);
    return undefined;
  }
  if (typeof value === 'string' && version.stringyPowerLevels) {
    const match = /^\s*([+-]?)0*(\d+)\s*$/.exec(value);
    if (!match) return undefined;
    const parsed = Number(match[2]) * (match[1] === '-' ? -1 : 1);
    return Number.isSafeInteger(parsed) ? parsed : undefined;
  }
  return undefined;
}

/**
 * The effective power levels: the m.room.power_levels content with the spec's defaults, or, when
 * the room has none yet, the creator at 100 and everyone else at 0. In v12 the creators stand
 * above all of it (`creators`). Values the room version cannot read fall back to the defaults.
 */
export function effectivePowerLevels(state: StateLookup, version: RoomVersion): PowerLevels {
  const create = state('m.room.create', '');
  const powerLevels = state('m.room.power_levels', '');
  if (!powerLevels) {
    // The m.room.power_levels schema: "If the room contains no m.room.power_levels event, the
    // room's creator has a power level of 100, and all other users have a power level of 0."
    if (version.privilegedCreators) return { ...defaultLevels(), creators: create ? roomCreators(create, version) : NO_CREATORS };
    return { ...defaultLevels(), users: create ? { [roomCreator(create, version)]: 100 } : {}, creators: NO_CREATORS };
  }
  const parsed = parsedLevels(powerLevels.content, version);
  if (!version.privilegedCreators || !create) return parsed;
  // Keyed by the create event's content: lookups may hand out a new event object each time, but
  // a room's create content is one object for as long as the room is held.
  let withCreators = creatorLevels.get(parsed)?.get(create.content);
  if (!withCreators) {
    withCreators = Object.freeze({ ...parsed, creators: roomCreators(create, version) });
    const byCreate = creatorLevels.get(parsed) ?? new WeakMap<object, PowerLevels>();
    byCreate.set(create.content, withCreators);
    creatorLevels.set(parsed, byCreate);
  }
  return withCreators;
}

const NO_CREATORS: ReadonlySet<string> = new Set();

/**
 * Power levels read from a power-levels event's content, by that content object and the way the
 * room version reads values: every event a room writes is checked against them, and the content
 * only changes as a new object (a new power-levels event, or a redaction). Frozen, since every
 * check shares them.
 */
const levelsByContent = {
  strict: new WeakMap<object, PowerLevels>(),
  stringy: new WeakMap<object, PowerLevels>(),
  floaty: new WeakMap<object, PowerLevels>(),
};
const creatorLevels = new WeakMap<PowerLevels, WeakMap<object, PowerLevels>>();

function parsedLevels(content: Record<string, unknown>, version: RoomVersion): PowerLevels {
  const cache = version.floatyPowerLevels ? levelsByContent.floaty : version.stringyPowerLevels ? levelsByContent.stringy : levelsByContent.strict;
  let levels = cache.get(content);
  if (!levels) {
    levels = readPowerLevels(content, version);
    cache.set(content, levels);
  }
  return levels;
}

function readPowerLevels(content: Record<string, unknown>, version: RoomVersion): PowerLevels {
  const defaults = defaultLevels();
  const levelOr = (key: (typeof LEVEL_KEYS)[number]): number => readLevel(content[key], version) ?? defaults[key];
  const levelMap = (value: unknown, keep: (key: string) => boolean = () => true): Record<string, number> => {
    const entries: [string, number][] = [];
    for (const [key, raw] of Object.entries(asRecord(value))) {
      const level = readLevel(raw, version);
      if (level !== undefined && keep(key)) entries.push([key, level]);
    }
    return Object.freeze(Object.fromEntries(entries));
  };
  return Object.freeze({
    users: levelMap(content['users'], isUserId),
    users_default: levelOr('users_default'),
    events: levelMap(content['events']),
    events_default: levelOr('events_default'),
    state_default: levelOr('state_default'),
    ban: levelOr('ban'),
    kick: levelOr('kick'),
    redact: levelOr('redact'),
    invite: levelOr('invite'),
    notifications: Object.freeze({ ...defaults.notifications, ...levelMap(content['notifications']) }),
    creators: NO_CREATORS,
  });
}

/**
 * Defaults from the m.room.power_levels schema: the same with or without a power levels event
 * ("If there is no state_default ..., or there is no m.room.power_levels event, the state_default
 * is 50"; events_default 0; kick, ban and redact 50; invite 0; notifications.room 50).
 */
function defaultLevels(): Omit<PowerLevels, 'creators'> {
  return { users: {}, users_default: 0, events: {}, events_default: 0, state_default: 50, ban: 50, kick: 50, redact: 50, invite: 0, notifications: { room: 50 } };
}

/** A user's power level; infinite for a v12 room's creators. */
export function userPowerLevel(levels: PowerLevels, userId: string): number {
  if (levels.creators.has(userId)) return Number.POSITIVE_INFINITY;
  return Object.hasOwn(levels.users, userId) ? (levels.users[userId] ?? levels.users_default) : levels.users_default;
}

/** Power needed to send an event of this type (state or not). */
export function requiredPowerForEvent(levels: PowerLevels, type: string, isState: boolean): number {
  const fallback = isState ? levels.state_default : levels.events_default;
  return Object.hasOwn(levels.events, type) ? (levels.events[type] ?? fallback) : fallback;
}

/**
 * Whether `userId` may redact an event sent by `originalSender`, asked by a local client: the
 * level to send m.room.redaction, and for someone else's event the `redact` level too (the
 * m.room.power_levels schema).
 */
export function canRedact(levels: PowerLevels, userId: string, originalSender: string): boolean {
  const level = userPowerLevel(levels, userId);
  if (level < requiredPowerForEvent(levels, 'm.room.redaction', false)) return false;
  return userId === originalSender || level >= levels.redact;
}

/**
 * Whether a redaction (already allowed by the auth rules) takes effect on its target, as
 * "Handling redactions" (v3+) says: its sender has the redact level, or is on the same server as
 * the target's sender. In versions whose auth rules judge redactions (`redactionAuthRule`, v1/v2)
 * their own test: the redact level, or the two event ids on the same server.
 */
export function redactionApplies(
  levels: PowerLevels,
  version: RoomVersion,
  redaction: { readonly sender: string; readonly eventId: string },
  target: { readonly sender: string; readonly eventId: string },
): boolean {
  if (userPowerLevel(levels, redaction.sender) >= levels.redact) return true;
  return version.redactionAuthRule ? domainOf(redaction.eventId) === domainOf(target.eventId) : domainOf(redaction.sender) === domainOf(target.sender);
}

/** Membership of a user in the state ('join' | 'invite' | 'leave' | 'ban' | 'knock'); 'leave' when none. */
export function membershipOf(state: StateLookup, userId: string): string {
  const membership = state('m.room.member', userId)?.content['membership'];
  return typeof membership === 'string' ? membership : 'leave';
}

/** The room's creator: `content.creator` up to room version 10, the create event's sender from 11. */
export function roomCreator(create: StateEvent, version: RoomVersion): string {
  const creator = create.content['creator'];
  if (version.v11 || typeof creator !== 'string') return create.sender;
  return creator;
}

/** v12's room creators: the create event's sender and its `additional_creators`. */
export function roomCreators(create: StateEvent, version: RoomVersion): ReadonlySet<string> {
  const creators = new Set([roomCreator(create, version)]);
  const additional = create.content['additional_creators'];
  if (version.privilegedCreators && Array.isArray(additional)) for (const id of additional) if (typeof id === 'string') creators.add(id);
  return creators;
}

/**
 * The room's join rule. The spec leaves a room without m.room.join_rules rejecting every join
 * (rule 5.3.7); like Synapse we read it as `invite` instead, so invited users can still join.
 */
export function joinRuleOf(state: StateLookup): string {
  const joinRule = state('m.room.join_rules', '')?.content['join_rule'];
  return typeof joinRule === 'string' ? joinRule : 'invite';
}

/** The (type, state_key) pairs an event's auth_events should hold ("Auth events selection"). */
export function authEventKeys(event: ProposedEvent, version: RoomVersion): Array<[string, string]> {
  if (event.type === 'm.room.create') return [];
  const keys: Array<[string, string]> = [];
  if (version.createInAuthEvents) keys.push(['m.room.create', '']);
  keys.push(['m.room.power_levels', ''], ['m.room.member', event.sender]);
  if (event.type === 'm.room.member' && event.state_key !== undefined) {
    keys.push(['m.room.member', event.state_key]);
    const membership = event.content['membership'];
    if (membership === 'join' || membership === 'invite' || membership === 'knock') keys.push(['m.room.join_rules', '']);
    const invite = event.content['third_party_invite'];
    const token = isPlainObject(invite) && isPlainObject(invite['signed']) ? invite['signed']['token'] : undefined;
    if (membership === 'invite' && typeof token === 'string') keys.push(['m.room.third_party_invite', token]);
    const via = event.content['join_authorised_via_users_server'];
    if (membership === 'join' && version.restrictedJoins && typeof via === 'string') keys.push(['m.room.member', via]);
  }
  // A join names its sender twice (as sender and as target): each key once.
  return keys.filter(([type, stateKey], index) => keys.findIndex(([t, k]) => t === type && k === stateKey) === index);
}

/**
 * The checks on an event's own auth_events (v12 rule 3, v3-v11 rule 2): no duplicate keys, only
 * keys the selection algorithm names, none rejected, all of this room, and (v3-v11) the create
 * event among them.
 */
export function checkAuthEventsSelection(
  event: ProposedEvent,
  authEvents: ReadonlyArray<StateEvent & { room_id?: string; rejected?: boolean }>,
  version: RoomVersion,
  roomId: string,
): AuthResult {
  const allowed = new Set(authEventKeys(event, version).map(([type, key]) => `${type}\u0000${key}`));
  const seen = new Set<string>();
  for (const authEvent of authEvents) {
    const key = `${authEvent.type}\u0000${authEvent.state_key}`;
    if (seen.has(key)) return deny(`auth_events holds two ${authEvent.type} events for "${authEvent.state_key}"`);
    seen.add(key);
    if (!allowed.has(key)) return deny(`auth_events holds ${authEvent.type} "${authEvent.state_key}", which does not authorise this event`);
    if (authEvent.rejected) return deny(`auth_events holds a rejected event`);
    // v12's create event has no room_id: its id is the room id.
    const authRoom = authEvent.type === 'm.room.create' && version.roomIdFromCreateEvent ? roomId : authEvent.room_id;
    if (authRoom !== undefined && authRoom !== roomId) return deny('auth_events holds an event of another room');
  }
  // The create event itself has no auth events (rule 1 checks it).
  if (event.type !== 'm.room.create' && version.createInAuthEvents && !seen.has('m.room.create\u0000')) return deny('auth_events holds no m.room.create event');
  return ALLOW;
}

/** "@localpart:server" with a non-empty localpart and server, at most 255 bytes. */
export function isUserId(value: string): boolean {
  return /^@[^:]+:.+$/.test(value) && Buffer.byteLength(value) <= 255;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function asRecord(value: unknown): Record<string, unknown> {
  return isPlainObject(value) ? value : {};
}

/** A key's own value, so JSON keys like "constructor" never hit Object.prototype. */
function ownValue(record: Record<string, unknown>, key: string): unknown {
  return Object.hasOwn(record, key) ? record[key] : undefined;
}

/** The version object for a room's stored version string (for callers holding only the id). */
export function versionFor(id: string): RoomVersion {
  return knownRoomVersion(id);
}
