/**
 * Room authorization rules as pure functions: given a proposed event and a
 * lookup into the room's current state, say whether the event is allowed.
 *
 * Follows "Authorization rules" of room version 10
 * (https://spec.matrix.org/latest/rooms/v10/#authorization-rules); comments
 * like "rule 4.5.3" cite that list. We are one server with no federation, so
 * the rules about signatures, `auth_events` selection, room id domains and
 * `m.federate` (rules 2 and 3, parts of 1) have nothing to check here, and
 * third-party invites are refused outright.
 */

export interface StateEvent {
  type: string;
  state_key: string;
  sender: string;
  content: Record<string, unknown>;
}

/** Looks up the room's current state (before the proposed event). */
export type StateLookup = (type: string, stateKey: string) => StateEvent | undefined;

export interface ProposedEvent {
  type: string;
  state_key?: string;
  sender: string;
  content: Record<string, unknown>;
}

export type AuthResult = { allowed: true } | { allowed: false; reason: string };

export interface PowerLevels {
  users: Record<string, number>;
  users_default: number;
  events: Record<string, number>;
  events_default: number;
  state_default: number;
  ban: number;
  kick: number;
  redact: number;
  invite: number;
  notifications: Record<string, number>;
}

/**
 * Room versions whose auth rules are the ones below. Version 12 is left out on
 * purpose: there creators have unlimited power, which these rules do not model.
 */
export const KNOWN_ROOM_VERSIONS: readonly string[] = ['1', '2', '3', '4', '5', '6', '7', '8', '9', '10', '11'];

const ALLOW: AuthResult = { allowed: true };

function deny(reason: string): AuthResult {
  return { allowed: false, reason };
}

/** The rules of room versions 1-11 as far as one server needs them (we create v10 rooms). */
export function checkEventAuth(event: ProposedEvent, state: StateLookup): AuthResult {
  const create = state('m.room.create', '');

  // Rule 1.
  if (event.type === 'm.room.create') return checkCreate(event, create);

  // Rule 2.4: nothing can happen in a room that was never created.
  if (!create) return deny('The room has no m.room.create event');

  // Rule 4.
  if (event.type === 'm.room.member') return checkMembership(event, state, create);

  // Rule 5.
  if (membershipOf(state, event.sender) !== 'join') {
    return deny(`${event.sender} is not joined to the room`);
  }

  const levels = effectivePowerLevels(state);
  const senderLevel = userPowerLevel(levels, event.sender);

  // Rule 6: third-party invite tokens are governed by the invite level alone.
  if (event.type === 'm.room.third_party_invite') {
    return senderLevel >= levels.invite
      ? ALLOW
      : deny(`m.room.third_party_invite needs power level ${levels.invite}, ${event.sender} has ${senderLevel}`);
  }

  // Rule 7.
  const isState = event.state_key !== undefined;
  const required = requiredPowerForEvent(levels, event.type, isState);
  if (senderLevel < required) {
    return deny(`Sending ${event.type} needs power level ${required}, ${event.sender} has ${senderLevel}`);
  }

  // Rule 8: a state key naming a user belongs to that user alone.
  if (event.state_key !== undefined && event.state_key.startsWith('@') && event.state_key !== event.sender) {
    return deny(`Only ${event.state_key} may set state with their user id as the state key`);
  }

  // Rule 9.
  if (event.type === 'm.room.power_levels') {
    return checkPowerLevelsChange(event.content, state('m.room.power_levels', '')?.content, event.sender, senderLevel);
  }

  // Rule 10. Redactions land here too; whether the redacter may touch the
  // target event is the caller's check (canRedact), as the spec defers it.
  return ALLOW;
}

/** Rule 1. "No prev_events" becomes "the room has no create event yet". */
function checkCreate(event: ProposedEvent, existing: StateEvent | undefined): AuthResult {
  if (existing) return deny('The room already has an m.room.create event');

  const version = event.content['room_version'];
  // An absent room_version means version 1 (m.room.create schema).
  const roomVersion = version === undefined ? '1' : version;
  if (typeof roomVersion !== 'string' || !KNOWN_ROOM_VERSIONS.includes(roomVersion)) {
    return deny(`Unknown room version ${JSON.stringify(version)}`);
  }

  // Rule 1.4 holds up to version 10; version 11 dropped `creator` for `sender`.
  if (roomVersion !== '11' && typeof event.content['creator'] !== 'string') {
    return deny('m.room.create content has no creator');
  }
  return ALLOW;
}

/** Rule 4. */
function checkMembership(event: ProposedEvent, state: StateLookup, create: StateEvent): AuthResult {
  const target = event.state_key;
  const membership = event.content['membership'];

  // Rule 4.1.
  if (target === undefined) return deny('m.room.member event has no state_key');
  if (typeof membership !== 'string') return deny('m.room.member content has no string membership');

  const sender = event.sender;
  const senderMembership = membershipOf(state, sender);
  const targetMembership = membershipOf(state, target);

  switch (membership) {
    case 'join':
      return checkJoin(event, target, state, create, senderMembership);
    case 'invite': {
      // Rule 4.4.1: we cannot verify third-party invite signatures.
      if (event.content['third_party_invite'] !== undefined) {
        return deny('Third-party invites are not supported');
      }
      if (senderMembership !== 'join') return deny(`${sender} is not joined to the room`); // 4.4.2
      if (targetMembership === 'join') return deny(`${target} is already joined to the room`); // 4.4.3
      if (targetMembership === 'ban') return deny(`${target} is banned from the room`); // 4.4.3
      const levels = effectivePowerLevels(state);
      const senderLevel = userPowerLevel(levels, sender);
      if (senderLevel >= levels.invite) return ALLOW; // 4.4.4
      return deny(`Inviting needs power level ${levels.invite}, ${sender} has ${senderLevel}`); // 4.4.5
    }
    case 'leave': {
      // Rule 4.5.1: leaving, or rejecting an invite or knock, is one's own business.
      if (sender === target) {
        return ['invite', 'join', 'knock'].includes(senderMembership)
          ? ALLOW
          : deny(`${sender} cannot leave a room they are not in (membership ${senderMembership})`);
      }
      if (senderMembership !== 'join') return deny(`${sender} is not joined to the room`); // 4.5.2
      const levels = effectivePowerLevels(state);
      const senderLevel = userPowerLevel(levels, sender);
      const targetLevel = userPowerLevel(levels, target);
      // Rule 4.5.3: unbanning is a kick of a banned user, so it needs the ban level as well.
      if (targetMembership === 'ban' && senderLevel < levels.ban) {
        return deny(`Unbanning needs power level ${levels.ban}, ${sender} has ${senderLevel}`);
      }
      if (senderLevel >= levels.kick && targetLevel < senderLevel) return ALLOW; // 4.5.4
      return deny(
        `Kicking needs power level ${levels.kick} and above the target's ${targetLevel}; ${sender} has ${senderLevel}`,
      ); // 4.5.5
    }
    case 'ban': {
      if (senderMembership !== 'join') return deny(`${sender} is not joined to the room`); // 4.6.1
      const levels = effectivePowerLevels(state);
      const senderLevel = userPowerLevel(levels, sender);
      const targetLevel = userPowerLevel(levels, target);
      if (senderLevel >= levels.ban && targetLevel < senderLevel) return ALLOW; // 4.6.2
      return deny(
        `Banning needs power level ${levels.ban} and above the target's ${targetLevel}; ${sender} has ${senderLevel}`,
      ); // 4.6.3
    }
    case 'knock': {
      const joinRule = joinRuleOf(state);
      if (joinRule !== 'knock' && joinRule !== 'knock_restricted') {
        return deny(`The room's join rule ${joinRule} does not allow knocking`); // 4.7.1
      }
      if (sender !== target) return deny('Users can only knock on their own behalf'); // 4.7.2
      if (!['ban', 'invite', 'join'].includes(senderMembership)) return ALLOW; // 4.7.3
      return deny(`${sender} cannot knock with membership ${senderMembership}`); // 4.7.4
    }
    default:
      return deny(`Unknown membership ${JSON.stringify(membership)}`); // 4.8
  }
}

/** Rule 4.3. */
function checkJoin(
  event: ProposedEvent,
  target: string,
  state: StateLookup,
  create: StateEvent,
  senderMembership: string,
): AuthResult {
  // Rule 4.3.1 speaks of "the only previous event is the create event". We
  // only see current state, so we read it as: the creator has never had a
  // member event and neither power levels nor join rules exist yet (a room
  // service sends those after the creator's join). We also insist the
  // creator sends it themself, which the spec leaves to rule 4.3.2 otherwise.
  const creator = roomCreator(create);
  if (
    target === creator &&
    event.sender === creator &&
    !state('m.room.member', creator) &&
    !state('m.room.power_levels', '') &&
    !state('m.room.join_rules', '')
  ) {
    return ALLOW;
  }

  if (event.sender !== target) return deny('Users can only join on their own behalf'); // 4.3.2
  if (senderMembership === 'ban') return deny(`${target} is banned from the room`); // 4.3.3

  const joinRule = joinRuleOf(state);
  switch (joinRule) {
    case 'public':
      return ALLOW; // 4.3.6
    // Rule 4.3.5 would also admit users vouched for through
    // join_authorised_via_users_server; we keep no restricted allow rules, so
    // restricted rooms admit only the invited, exactly like rule 4.3.4.
    case 'invite':
    case 'knock':
    case 'restricted':
    case 'knock_restricted':
      if (senderMembership === 'invite' || senderMembership === 'join') return ALLOW; // 4.3.4, 4.3.5.1
      return deny(`The room's join rule is ${joinRule} and ${target} is not invited`);
    default:
      return deny(`The room's join rule ${joinRule} does not allow joining`); // 4.3.7
  }
}


/** Rule 9, once the sender has passed rule 7 for m.room.power_levels. */
function checkPowerLevelsChange(
  next: Record<string, unknown>,
  current: Record<string, unknown> | undefined,
  sender: string,
  senderLevel: number,
): AuthResult {
  // Rules 9.1 to 9.3: room version 10 takes only integers, no numeric strings.
  for (const key of LEVEL_KEYS) {
    if (next[key] !== undefined && !isPowerLevelValue(next[key])) {
      return deny(`Power level ${key} must be an integer`);
    }
  }
  for (const key of ['events', 'notifications'] as const) {
    if (next[key] !== undefined && !isLevelMap(next[key])) {
      return deny(`Power level ${key} must be an object of integers`);
    }
  }
  const nextUsers = next['users'];
  if (nextUsers !== undefined) {
    if (!isLevelMap(nextUsers)) return deny('Power level users must be an object of integers');
    const notAUser = Object.keys(nextUsers).find((key) => !looksLikeUserId(key));
    if (notAUser !== undefined) return deny(`Power level users key ${JSON.stringify(notAUser)} is not a user id`);
  }

  // Rule 9.4: the first power levels event sets the room up freely.
  if (!current) return ALLOW;

  // Rule 9.5.
  for (const key of LEVEL_KEYS) {
    const problem = outOfReach(key, ownValue(current, key), ownValue(next, key), senderLevel, false);
    if (problem) return deny(problem);
  }

  // Rules 9.6 and 9.7.
  for (const key of ['events', 'notifications'] as const) {
    const before = asRecord(current[key]);
    const after = asRecord(next[key]);
    for (const entry of new Set([...Object.keys(before), ...Object.keys(after)])) {
      const name = `${key}.${entry}`;
      const problem = outOfReach(name, ownValue(before, entry), ownValue(after, entry), senderLevel, false);
      if (problem) return deny(problem);
    }
  }

  // Rules 9.8 and 9.9: other users at the sender's own level are peers and
  // stay untouched; the sender's own entry may go down but never up.
  const usersBefore = asRecord(current['users']);
  const usersAfter = asRecord(next['users']);
  for (const userId of new Set([...Object.keys(usersBefore), ...Object.keys(usersAfter)])) {
    const name = `users.${userId}`;
    const isPeer = userId !== sender;
    const problem = outOfReach(name, ownValue(usersBefore, userId), ownValue(usersAfter, userId), senderLevel, isPeer);
    if (problem) return deny(problem);
  }

  return ALLOW; // 9.10
}

/**
 * Why the sender may not move one power level value from `before` to `after`
 * (either may be absent: added or removed), or undefined if they may. An old
 * value above the sender's level is out of reach, and so is one equal to it
 * when `equalIsOutOfReach` (rule 9.8's "greater than or equal").
 */
function outOfReach(
  name: string,
  before: unknown,
  after: unknown,
  senderLevel: number,
  equalIsOutOfReach: boolean,
): string | undefined {
  if (before === after) return undefined;
  if (typeof before === 'number' && (before > senderLevel || (equalIsOutOfReach && before === senderLevel))) {
    return `Cannot change ${name}: it is ${before} and the sender's level is ${senderLevel}`;
  }
  if (typeof after === 'number' && after > senderLevel) {
    return `Cannot set ${name} to ${after}, above the sender's level ${senderLevel}`;
  }
  return undefined;
}

const LEVEL_KEYS = ['users_default', 'events_default', 'state_default', 'ban', 'redact', 'kick', 'invite'] as const;

/**
 * The effective power levels: the m.room.power_levels content with spec
 * defaults, or the creator at 100 and everyone else at 0 when the room has
 * none yet. Invalid values (rule 9 keeps them out of v10 rooms) fall back to
 * the defaults.
 */
export function effectivePowerLevels(state: StateLookup): PowerLevels {
  const powerLevels = state('m.room.power_levels', '');
  if (!powerLevels) {
    const create = state('m.room.create', '');
    return {
      ...defaultLevels(),
      // The m.room.power_levels schema: "If the room contains no
      // m.room.power_levels event, the room's creator has a power level of
      // 100, and all other users have a power level of 0."
      users: create ? { [roomCreator(create)]: 100 } : {},
    };
  }

  const content = powerLevels.content;
  const known = levelsByContent.get(content);
  if (known) return known;
  const levels = readPowerLevels(content);
  levelsByContent.set(content, levels);
  return levels;
}

/**
 * Power levels read from a power-levels event's content, by that content object: every event a
 * room writes is checked against them, and the content only changes as a new object (a new
 * power-levels event, or a redaction). Frozen, since every check shares them.
 */
const levelsByContent = new WeakMap<object, PowerLevels>();

function readPowerLevels(content: StateEvent['content']): PowerLevels {
  const defaults = defaultLevels();
  const levelOr = (key: (typeof LEVEL_KEYS)[number]): number => {
    const value = content[key];
    return isPowerLevelValue(value) ? value : defaults[key];
  };
  return Object.freeze({
    users: Object.freeze(Object.fromEntries(integerEntries(content['users']).filter(([userId]) => looksLikeUserId(userId)))),
    users_default: levelOr('users_default'),
    events: Object.freeze(Object.fromEntries(integerEntries(content['events']))),
    events_default: levelOr('events_default'),
    state_default: levelOr('state_default'),
    ban: levelOr('ban'),
    kick: levelOr('kick'),
    redact: levelOr('redact'),
    invite: levelOr('invite'),
    notifications: Object.freeze(Object.fromEntries([
      ...integerEntries(defaults.notifications),
      ...integerEntries(content['notifications']),
    ])),
  });
}

/**
 * Defaults from the m.room.power_levels schema (spec v1.19). They are the
 * same with or without a power levels event: "If there is no state_default
 * in the m.room.power_levels event, or there is no m.room.power_levels event,
 * the state_default is 50"; events_default 0; kick, ban and redact 50
 * "if they are not specified ..., or if the room contains no
 * m.room.power_levels event"; invite 0 "in either case"; notifications.room 50.
 */
function defaultLevels(): PowerLevels {
  return {
    users: {},
    users_default: 0,
    events: {},
    events_default: 0,
    state_default: 50,
    ban: 50,
    kick: 50,
    redact: 50,
    invite: 0,
    notifications: { room: 50 },
  };
}

export function userPowerLevel(levels: PowerLevels, userId: string): number {
  return Object.hasOwn(levels.users, userId) ? (levels.users[userId] ?? levels.users_default) : levels.users_default;
}

/** Power needed to send an event of this type (state or not). */
export function requiredPowerForEvent(levels: PowerLevels, type: string, isState: boolean): number {
  const fallback = isState ? levels.state_default : levels.events_default;
  return Object.hasOwn(levels.events, type) ? (levels.events[type] ?? fallback) : fallback;
}

/**
 * Whether `userId` may redact an event sent by `originalSender`. Everyone
 * needs the level to send m.room.redaction; redacting someone else's event
 * additionally needs the `redact` level (m.room.power_levels schema).
 */
export function canRedact(levels: PowerLevels, userId: string, originalSender: string): boolean {
  const level = userPowerLevel(levels, userId);
  if (level < requiredPowerForEvent(levels, 'm.room.redaction', false)) return false;
  return userId === originalSender || level >= levels.redact;
}

/**
 * Membership of a user in the state ('join' | 'invite' | 'leave' | 'ban' |
 * 'knock'), or 'leave' when no member event.
 */
export function membershipOf(state: StateLookup, userId: string): string {
  const membership = state('m.room.member', userId)?.content['membership'];
  return typeof membership === 'string' ? membership : 'leave';
}

/**
 * The room's creator: `content.creator` up to room version 10, the create
 * event's sender from version 11 (which dropped `creator`).
 */
function roomCreator(create: StateEvent): string {
  const creator = create.content['creator'];
  if (create.content['room_version'] === '11' || typeof creator !== 'string') return create.sender;
  return creator;
}

/**
 * The room's join rule. The spec leaves a room without m.room.join_rules
 * rejecting every join (rule 4.3.7); like Synapse we read it as `invite`
 * instead, so invited users can still join such a room.
 */
function joinRuleOf(state: StateLookup): string {
  const joinRule = state('m.room.join_rules', '')?.content['join_rule'];
  return typeof joinRule === 'string' ? joinRule : 'invite';
}

/** Integers within canonical JSON's range, [-(2**53)+1, (2**53)-1]. */
function isPowerLevelValue(value: unknown): value is number {
  return Number.isSafeInteger(value);
}

function isLevelMap(value: unknown): value is Record<string, number> {
  return isPlainObject(value) && Object.values(value).every(isPowerLevelValue);
}

function integerEntries(value: unknown): [string, number][] {
  if (!isPlainObject(value)) return [];
  return Object.entries(value).filter((entry): entry is [string, number] => isPowerLevelValue(entry[1]));
}

/** Shape only ("@localpart:server"); this server's own id rules live with users. */
function looksLikeUserId(value: string): boolean {
  return /^@[^:]+:.+$/.test(value) && value.length <= 255;
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
