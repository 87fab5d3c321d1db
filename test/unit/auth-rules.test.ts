import { describe, expect, it } from 'vitest';
import {
  canRedact,
  checkEventAuth,
  effectivePowerLevels,
  membershipOf,
  requiredPowerForEvent,
  userPowerLevel,
  type ProposedEvent,
  type StateEvent,
  type StateLookup,
} from '../../src/rooms/auth-rules.js';
import { knownRoomVersion, roomVersion } from '../../src/rooms/room-versions.js';

/** The rules of the room's version (its create event's), v10 for a room without one. */
/** effectivePowerLevels' arguments for a state: the state and its room's version. */
function withState(state: StateLookup): [StateLookup, ReturnType<typeof versionIn>] {
  return [state, versionIn(state)];
}

function versionIn(state: StateLookup) {
  const declared = state('m.room.create', '')?.content.room_version;
  return (typeof declared === 'string' ? roomVersion(declared) : undefined) ?? knownRoomVersion('10');
}

// The cast of every table: alice created the room (100), two moderators (50),
// two ordinary members (0), and people at each other membership.
const ALICE = '@alice:test';
const MOD = '@mod:test';
const MOD2 = '@mod2:test';
const BOB = '@bob:test';
const CAROL = '@carol:test';
const IVY_INVITED = '@ivy:test';
const BART_BANNED = '@bart:test';
const KIM_KNOCKING = '@kim:test';
const EVE_OUTSIDER = '@eve:test';

const STANDARD_POWER_LEVELS = { users: { [ALICE]: 100, [MOD]: 50, [MOD2]: 50 } };

interface RoomOptions {
  joinRule?: string | null;
  /** Content of m.room.power_levels; null for a room without one. */
  powerLevels?: Record<string, unknown> | null;
  roomVersion?: string;
}

function stateEvent(type: string, stateKey: string, sender: string, content: Record<string, unknown>): StateEvent {
  return { type, state_key: stateKey, sender, content };
}

function lookupOf(events: StateEvent[]): StateLookup {
  const byKey = new Map(events.map((event) => [`${event.type}|${event.state_key}`, event]));
  return (type, stateKey) => byKey.get(`${type}|${stateKey}`);
}

/** A settled room with everyone of the cast at their membership. */
function room({ joinRule = 'invite', powerLevels = STANDARD_POWER_LEVELS, roomVersion = '10' }: RoomOptions = {}) {
  const membership = (userId: string, value: string, sender = userId) =>
    stateEvent('m.room.member', userId, sender, { membership: value });
  const events = [
    stateEvent('m.room.create', '', ALICE, { creator: ALICE, room_version: roomVersion }),
    membership(ALICE, 'join'),
    membership(MOD, 'join'),
    membership(MOD2, 'join'),
    membership(BOB, 'join'),
    membership(CAROL, 'join'),
    membership(IVY_INVITED, 'invite', ALICE),
    membership(BART_BANNED, 'ban', ALICE),
    membership(KIM_KNOCKING, 'knock'),
  ];
  if (joinRule !== null) events.push(stateEvent('m.room.join_rules', '', ALICE, { join_rule: joinRule }));
  if (powerLevels !== null) events.push(stateEvent('m.room.power_levels', '', ALICE, powerLevels));
  return lookupOf(events);
}

/** The room as it is between the create event and the creator's join. */
const justCreated = lookupOf([stateEvent('m.room.create', '', ALICE, { creator: ALICE, room_version: '10' })]);
const noRoom: StateLookup = () => undefined;

function member(target: string, membership: string, sender = target, extra: Record<string, unknown> = {}): ProposedEvent {
  return { type: 'm.room.member', state_key: target, sender, content: { membership, ...extra } };
}

function powerLevelsBy(sender: string, content: Record<string, unknown>): ProposedEvent {
  return { type: 'm.room.power_levels', state_key: '', sender, content };
}

interface AuthCase {
  name: string;
  event: ProposedEvent;
  state: StateLookup;
  /** Omitted when allowed; otherwise a pattern the refusal's reason must match. */
  refusedBecause?: RegExp;
}

function expectAuth({ event, state, refusedBecause }: AuthCase): void {
  // A create event is judged by the version it creates.
  const declared = event.type === 'm.room.create' && typeof event.content.room_version === 'string' ? roomVersion(event.content.room_version) : undefined;
  const result = checkEventAuth(event, state, declared ?? versionIn(state));
  if (!refusedBecause) {
    expect(result).toEqual({ allowed: true });
  } else {
    expect(result.allowed).toBe(false);
    if (!result.allowed) expect(result.reason).toMatch(refusedBecause);
  }
}

describe('m.room.create (rule 1)', () => {
  const create = (content: Record<string, unknown>): ProposedEvent => ({
    type: 'm.room.create',
    state_key: '',
    sender: ALICE,
    content,
  });

  it.each<AuthCase>([
    { name: 'a v10 room with a creator', event: create({ creator: ALICE, room_version: '10' }), state: noRoom },
    { name: 'no room_version means version 1', event: create({ creator: ALICE }), state: noRoom },
    { name: 'v11 needs no creator', event: create({ room_version: '11' }), state: noRoom },
    {
      name: 'a second create event',
      event: create({ creator: ALICE, room_version: '10' }),
      state: justCreated,
      refusedBecause: /already has/,
    },
    {
      name: 'an unknown room version',
      event: create({ creator: ALICE, room_version: '99' }),
      state: noRoom,
      refusedBecause: /Unknown room version/,
    },
    {
      name: 'a numeric room version',
      event: create({ creator: ALICE, room_version: 10 }),
      state: noRoom,
      refusedBecause: /Unknown room version/,
    },
    { name: 'v10 without creator', event: create({ room_version: '10' }), state: noRoom, refusedBecause: /creator/ },
    {
      name: 'any other event before the create event',
      event: member(ALICE, 'join'),
      state: noRoom,
      refusedBecause: /no m.room.create/,
    },
  ])('$name', expectAuth);
});

describe('joining (rule 4.3)', () => {
  it.each<AuthCase>([
    { name: "the creator's first join right after create", event: member(ALICE, 'join'), state: justCreated },
    {
      name: 'someone else joining a just-created room',
      event: member(BOB, 'join'),
      state: justCreated,
      refusedBecause: /not invited/,
    },
    {
      name: 'the creator joined on their behalf by someone else',
      event: member(ALICE, 'join', BOB),
      state: justCreated,
      refusedBecause: /own behalf/,
    },
    {
      name: 'an outsider joining a public room',
      event: member(EVE_OUTSIDER, 'join'),
      state: room({ joinRule: 'public' }),
    },
    {
      name: 'a banned user joining a public room',
      event: member(BART_BANNED, 'join'),
      state: room({ joinRule: 'public' }),
      refusedBecause: /banned/,
    },
    {
      name: 'joining someone else to a public room',
      event: member(EVE_OUTSIDER, 'join', BOB),
      state: room({ joinRule: 'public' }),
      refusedBecause: /own behalf/,
    },
    {
      name: 'an outsider joining an invite-only room',
      event: member(EVE_OUTSIDER, 'join'),
      state: room({ joinRule: 'invite' }),
      refusedBecause: /not invited/,
    },
    { name: 'an invited user joining an invite-only room', event: member(IVY_INVITED, 'join'), state: room() },
    {
      name: 'a member re-joining (profile change)',
      event: member(BOB, 'join', BOB, { displayname: 'B' }),
      state: room(),
    },
    {
      name: 'an invited user joining a knock room',
      event: member(IVY_INVITED, 'join'),
      state: room({ joinRule: 'knock' }),
    },
    {
      name: 'a knocking user joining before being invited',
      event: member(KIM_KNOCKING, 'join'),
      state: room({ joinRule: 'knock' }),
      refusedBecause: /not invited/,
    },
    {
      name: 'an outsider joining a restricted room (allow rules unsupported)',
      event: member(EVE_OUTSIDER, 'join'),
      state: room({ joinRule: 'restricted' }),
      refusedBecause: /not invited/,
    },
    {
      name: 'an invited user joining a knock_restricted room',
      event: member(IVY_INVITED, 'join'),
      state: room({ joinRule: 'knock_restricted' }),
    },
    {
      name: 'an invited user joining a room without join rules (read as invite)',
      event: member(IVY_INVITED, 'join'),
      state: room({ joinRule: null }),
    },
    {
      name: 'an invited user joining a private room',
      event: member(IVY_INVITED, 'join'),
      state: room({ joinRule: 'private' }),
      refusedBecause: /does not allow joining/,
    },
  ])('$name', expectAuth);
});

describe('membership events in general (rules 4.1, 4.8)', () => {
  it.each<AuthCase>([
    {
      name: 'no state_key',
      event: { type: 'm.room.member', sender: BOB, content: { membership: 'join' } },
      state: room(),
      refusedBecause: /state_key/,
    },
    {
      name: 'no membership',
      event: { type: 'm.room.member', state_key: BOB, sender: BOB, content: {} },
      state: room(),
      refusedBecause: /membership/,
    },
    {
      name: 'a non-string membership',
      event: { type: 'm.room.member', state_key: BOB, sender: BOB, content: { membership: 1 } },
      state: room(),
      refusedBecause: /membership/,
    },
    { name: 'an unknown membership', event: member(BOB, 'lurk'), state: room(), refusedBecause: /Unknown membership/ },
  ])('$name', expectAuth);
});

describe('inviting (rule 4.4)', () => {
  it.each<AuthCase>([
    {
      name: 'a 0 member inviting at the default invite level 0',
      event: member(EVE_OUTSIDER, 'invite', BOB),
      state: room(),
    },
    {
      name: 'a 0 member inviting when invite is 50',
      event: member(EVE_OUTSIDER, 'invite', BOB),
      state: room({ powerLevels: { ...STANDARD_POWER_LEVELS, invite: 50 } }),
      refusedBecause: /Inviting needs power level 50/,
    },
    {
      name: 'a moderator inviting when invite is 50',
      event: member(EVE_OUTSIDER, 'invite', MOD),
      state: room({ powerLevels: { ...STANDARD_POWER_LEVELS, invite: 50 } }),
    },
    {
      name: 'an invited user inviting others',
      event: member(EVE_OUTSIDER, 'invite', IVY_INVITED),
      state: room(),
      refusedBecause: /not joined/,
    },
    {
      name: 'inviting someone already joined',
      event: member(CAROL, 'invite', BOB),
      state: room(),
      refusedBecause: /already joined/,
    },
    {
      name: 'inviting a banned user',
      event: member(BART_BANNED, 'invite', ALICE),
      state: room(),
      refusedBecause: /banned/,
    },
    {
      name: 'a third-party invite without mxid and token',
      event: member(EVE_OUTSIDER, 'invite', ALICE, { third_party_invite: { signed: {} } }),
      state: room(),
      refusedBecause: /needs mxid and token/,
    },
  ])('$name', expectAuth);
});

describe('leaving, kicking and unbanning (rule 4.5)', () => {
  it.each<AuthCase>([
    { name: 'a member leaving', event: member(BOB, 'leave'), state: room() },
    { name: 'an invited user rejecting the invite', event: member(IVY_INVITED, 'leave'), state: room() },
    { name: 'a knocking user withdrawing the knock', event: member(KIM_KNOCKING, 'leave'), state: room() },
    {
      name: 'an outsider leaving',
      event: member(EVE_OUTSIDER, 'leave'),
      state: room(),
      refusedBecause: /not in/,
    },
    {
      name: 'a banned user unbanning themself',
      event: member(BART_BANNED, 'leave'),
      state: room(),
      refusedBecause: /not in/,
    },
    { name: 'a moderator kicking a 0 member', event: member(BOB, 'leave', MOD), state: room() },
    { name: 'a moderator revoking an invite', event: member(IVY_INVITED, 'leave', MOD), state: room() },
    {
      name: 'a moderator kicking another moderator',
      event: member(MOD2, 'leave', MOD),
      state: room(),
      refusedBecause: /Kicking needs/,
    },
    {
      name: 'a moderator kicking the creator',
      event: member(ALICE, 'leave', MOD),
      state: room(),
      refusedBecause: /Kicking needs/,
    },
    {
      name: 'a 0 member kicking another 0 member',
      event: member(CAROL, 'leave', BOB),
      state: room(),
      refusedBecause: /Kicking needs/,
    },
    {
      name: 'an outsider kicking',
      event: member(BOB, 'leave', EVE_OUTSIDER),
      state: room(),
      refusedBecause: /not joined/,
    },
    { name: 'a moderator unbanning at ban level 50', event: member(BART_BANNED, 'leave', MOD), state: room() },
    {
      name: 'a moderator unbanning at ban level 100',
      event: member(BART_BANNED, 'leave', MOD),
      state: room({ powerLevels: { ...STANDARD_POWER_LEVELS, ban: 100 } }),
      refusedBecause: /Unbanning needs power level 100/,
    },
  ])('$name', expectAuth);
});

describe('banning (rule 4.6)', () => {
  it.each<AuthCase>([
    { name: 'a moderator banning a 0 member', event: member(BOB, 'ban', MOD), state: room() },
    { name: 'a moderator banning an outsider', event: member(EVE_OUTSIDER, 'ban', MOD), state: room() },
    {
      name: 'a moderator banning another moderator',
      event: member(MOD2, 'ban', MOD),
      state: room(),
      refusedBecause: /Banning needs/,
    },
    {
      name: 'a moderator banning the creator',
      event: member(ALICE, 'ban', MOD),
      state: room(),
      refusedBecause: /Banning needs/,
    },
    {
      name: 'a 0 member banning',
      event: member(CAROL, 'ban', BOB),
      state: room(),
      refusedBecause: /Banning needs power level 50/,
    },
    {
      name: 'a moderator banning when ban is 75',
      event: member(BOB, 'ban', MOD),
      state: room({ powerLevels: { ...STANDARD_POWER_LEVELS, ban: 75 } }),
      refusedBecause: /Banning needs power level 75/,
    },
    {
      name: 'an invited user banning',
      event: member(BOB, 'ban', IVY_INVITED),
      state: room(),
      refusedBecause: /not joined/,
    },
  ])('$name', expectAuth);
});

describe('knocking (rule 4.7)', () => {
  it.each<AuthCase>([
    {
      name: 'an outsider knocking on a knock room',
      event: member(EVE_OUTSIDER, 'knock'),
      state: room({ joinRule: 'knock' }),
    },
    {
      name: 'an outsider knocking on a knock_restricted room',
      event: member(EVE_OUTSIDER, 'knock'),
      state: room({ joinRule: 'knock_restricted' }),
    },
    {
      name: 'knocking on an invite-only room',
      event: member(EVE_OUTSIDER, 'knock'),
      state: room({ joinRule: 'invite' }),
      refusedBecause: /does not allow knocking/,
    },
    {
      name: 'knocking on behalf of someone else',
      event: member(EVE_OUTSIDER, 'knock', BOB),
      state: room({ joinRule: 'knock' }),
      refusedBecause: /own behalf/,
    },
    {
      name: 'an invited user knocking',
      event: member(IVY_INVITED, 'knock'),
      state: room({ joinRule: 'knock' }),
      refusedBecause: /cannot knock/,
    },
    {
      name: 'a banned user knocking',
      event: member(BART_BANNED, 'knock'),
      state: room({ joinRule: 'knock' }),
      refusedBecause: /cannot knock/,
    },
  ])('$name', expectAuth);
});

describe('other events (rules 5 to 8)', () => {
  const message = (sender: string): ProposedEvent => ({
    type: 'm.room.message',
    sender,
    content: { msgtype: 'm.text', body: 'hi' },
  });
  const stateBy = (sender: string, type: string, stateKey = ''): ProposedEvent => ({
    type,
    state_key: stateKey,
    sender,
    content: {},
  });
  const withStatusEvents = room({ powerLevels: { ...STANDARD_POWER_LEVELS, events: { 'org.example.status': 0 } } });

  it.each<AuthCase>([
    { name: 'a member sending a message', event: message(BOB), state: room() },
    {
      name: 'an outsider sending a message',
      event: message(EVE_OUTSIDER),
      state: room(),
      refusedBecause: /not joined/,
    },
    {
      name: 'an invited user sending a message',
      event: message(IVY_INVITED),
      state: room(),
      refusedBecause: /not joined/,
    },
    {
      name: 'a 0 member sending a message when events_default is 10',
      event: message(BOB),
      state: room({ powerLevels: { ...STANDARD_POWER_LEVELS, events_default: 10 } }),
      refusedBecause: /needs power level 10/,
    },
    {
      name: 'a 0 member sending a redaction (events_default)',
      event: { type: 'm.room.redaction', sender: BOB, content: { redacts: '$x' } },
      state: room(),
    },
    {
      name: 'a 0 member setting the name (state_default 50)',
      event: stateBy(BOB, 'm.room.name'),
      state: room(),
      refusedBecause: /needs power level 50/,
    },
    { name: 'a moderator setting the name', event: stateBy(MOD, 'm.room.name'), state: room() },
    {
      name: 'a 0 member setting the name in a room without power levels',
      event: stateBy(BOB, 'm.room.name'),
      state: room({ powerLevels: null }),
      refusedBecause: /needs power level 50/,
    },
    {
      name: 'the creator setting the name without power levels',
      event: stateBy(ALICE, 'm.room.name'),
      state: room({ powerLevels: null }),
    },
    {
      name: 'a member setting state keyed by their own user id',
      event: stateBy(BOB, 'org.example.status', BOB),
      state: withStatusEvents,
    },
    {
      name: "a member setting state keyed by another user's id",
      event: stateBy(BOB, 'org.example.status', CAROL),
      state: withStatusEvents,
      refusedBecause: /Only @carol:test/,
    },
    {
      name: "even the creator setting state keyed by another user's id",
      event: stateBy(ALICE, 'org.example.status', BOB),
      state: withStatusEvents,
      refusedBecause: /Only @bob:test/,
    },
    {
      name: 'a 0 member sending m.room.third_party_invite (invite 0)',
      event: stateBy(BOB, 'm.room.third_party_invite', 'tok'),
      state: room(),
    },
    {
      name: 'a 0 member sending m.room.third_party_invite (invite 50)',
      event: stateBy(BOB, 'm.room.third_party_invite', 'tok'),
      state: room({ powerLevels: { ...STANDARD_POWER_LEVELS, invite: 50 } }),
      refusedBecause: /needs power level 50/,
    },
  ])('$name', expectAuth);
});

describe('m.room.power_levels changes (rule 9)', () => {
  const current = { ...STANDARD_POWER_LEVELS, events: { 'm.room.tombstone': 100, 'm.room.name': 50 } };
  const state = room({ powerLevels: current });
  // Lets a moderator send power levels even when state_default is above them.
  const modMayEdit = { ...current, events: { ...current.events, 'm.room.power_levels': 50 } };
  const modSends = (content: Record<string, unknown>) => powerLevelsBy(MOD, { ...current, ...content });
  const usersWith = (changes: Record<string, number | undefined>) => {
    const users: Record<string, number | undefined> = { ...current.users, ...changes };
    return Object.fromEntries(Object.entries(users).filter(([, level]) => level !== undefined));
  };

  it.each<AuthCase>([
    {
      name: 'the first power levels event',
      event: powerLevelsBy(ALICE, STANDARD_POWER_LEVELS),
      state: room({ powerLevels: null }),
    },
    {
      name: 'a 0 member changing power levels',
      event: powerLevelsBy(BOB, { ...current, users: usersWith({ [BOB]: 0 }) }),
      state,
      refusedBecause: /needs power level 50/,
    },
    {
      name: 'the creator promoting a moderator to 75',
      event: powerLevelsBy(ALICE, { ...current, users: usersWith({ [MOD]: 75 }) }),
      state,
    },
    { name: 'a moderator promoting a 0 member to 50', event: modSends({ users: usersWith({ [BOB]: 50 }) }), state },
    {
      name: 'a moderator promoting a 0 member to 51',
      event: modSends({ users: usersWith({ [BOB]: 51 }) }),
      state,
      refusedBecause: /Cannot set users.@bob:test to 51/,
    },
    {
      name: 'a moderator raising themself',
      event: modSends({ users: usersWith({ [MOD]: 100 }) }),
      state,
      refusedBecause: /Cannot set users.@mod:test to 100/,
    },
    { name: 'a moderator lowering themself', event: modSends({ users: usersWith({ [MOD]: 10 }) }), state },
    {
      name: 'a moderator demoting a peer moderator',
      event: modSends({ users: usersWith({ [MOD2]: 0 }) }),
      state,
      refusedBecause: /Cannot change users.@mod2:test/,
    },
    {
      name: 'a moderator removing the creator',
      event: modSends({ users: usersWith({ [ALICE]: undefined }) }),
      state,
      refusedBecause: /Cannot change users.@alice:test/,
    },
    { name: 'a moderator lowering ban to 40', event: modSends({ ban: 40 }), state },
    { name: 'a moderator setting kick to exactly 50', event: modSends({ kick: 50 }), state },
    {
      name: 'a moderator raising kick to 60',
      event: modSends({ kick: 60 }),
      state,
      refusedBecause: /Cannot set kick to 60/,
    },
    {
      name: 'a moderator changing a level above their own',
      event: powerLevelsBy(MOD, { ...modMayEdit, state_default: 50 }),
      state: room({ powerLevels: { ...modMayEdit, state_default: 75 } }),
      refusedBecause: /Cannot change state_default: it is 75/,
    },
    {
      name: 'a moderator lowering an event level above their own',
      event: modSends({ events: { 'm.room.tombstone': 50, 'm.room.name': 50 } }),
      state,
      refusedBecause: /Cannot change events.m.room.tombstone/,
    },
    {
      name: 'a moderator adding an event level above their own',
      event: modSends({ events: { ...current.events, 'm.room.topic': 60 } }),
      state,
      refusedBecause: /Cannot set events.m.room.topic to 60/,
    },
    {
      name: 'a moderator lowering an event level at their own',
      event: modSends({ events: { ...current.events, 'm.room.name': 0 } }),
      state,
    },
    {
      name: 'a moderator raising notifications.room above their own',
      event: modSends({ notifications: { room: 60 } }),
      state,
      refusedBecause: /Cannot set notifications.room to 60/,
    },
    {
      name: 'a string level (v10 wants integers)',
      event: powerLevelsBy(ALICE, { ...current, ban: '50' }),
      state,
      refusedBecause: /ban must be an integer/,
    },
    {
      name: 'a fractional level',
      event: powerLevelsBy(ALICE, { ...current, kick: 50.5 }),
      state,
      refusedBecause: /kick must be an integer/,
    },
    {
      name: 'events that is not an object of integers',
      event: powerLevelsBy(ALICE, { ...current, events: { 'm.room.name': '50' } }),
      state,
      refusedBecause: /events must be an object of integers/,
    },
    {
      name: 'a users key that is not a user id',
      event: powerLevelsBy(ALICE, { ...current, users: { ...current.users, 'not-a-user': 10 } }),
      state,
      refusedBecause: /not a user id/,
    },
  ])('$name', expectAuth);
});

describe('effectivePowerLevels', () => {
  it('gives the creator 100 and spec defaults when there is no power levels event', () => {
    expect(effectivePowerLevels(...withState(room({ powerLevels: null })))).toEqual({
      users: { [ALICE]: 100 },
      users_default: 0,
      events: {},
      events_default: 0,
      state_default: 50,
      ban: 50,
      kick: 50,
      redact: 50,
      invite: 0,
      notifications: { room: 50 },
      creators: new Set(),
    });
  });

  it('takes the creator from the sender in a v11 room', () => {
    const v11 = lookupOf([stateEvent('m.room.create', '', BOB, { room_version: '11' })]);
    expect(effectivePowerLevels(...withState(v11)).users).toEqual({ [BOB]: 100 });
  });

  it('fills omitted keys with defaults and does not give the creator 100 by itself', () => {
    const levels = effectivePowerLevels(...withState(room({ powerLevels: { users: { [MOD]: 50 }, invite: 25 } })));
    expect(levels).toMatchObject({
      users: { [MOD]: 50 },
      state_default: 50,
      ban: 50,
      invite: 25,
      notifications: { room: 50 },
    });
    expect(userPowerLevel(levels, ALICE)).toBe(0);
  });

  it('reads levels again when the power-levels content is replaced (a new event, a redaction), and hands out frozen levels', () => {
    const before = effectivePowerLevels(...withState(room({ powerLevels: { users: { [MOD]: 50 }, ban: 30 } })));
    expect(effectivePowerLevels(...withState(room({ powerLevels: { users: { [MOD]: 50 }, ban: 30 } })))).toEqual(before);
    // A redacted power-levels event keeps ban, users and the like; here: a content without them.
    const after = effectivePowerLevels(...withState(room({ powerLevels: {} })));
    expect(after.ban).toBe(50);
    expect(after.users).toEqual({});
    expect(Object.isFrozen(before) && Object.isFrozen(before.users)).toBe(true);
    expect(() => {
      (before.users as Record<string, number>)[BOB] = 100;
    }).toThrow(TypeError);
  });

  it('treats invalid values as the defaults', () => {
    const levels = effectivePowerLevels(...withState(
      room({ powerLevels: { ban: '30', kick: 1.5, users: { [BOB]: '40', 'bad-key': 10 }, notifications: { room: 'x' } } }),
    ));
    expect(levels).toMatchObject({ ban: 50, kick: 50, users: {}, notifications: { room: 50 } });
  });
});

describe('power level helpers', () => {
  const levels = effectivePowerLevels(...withState(
    room({ powerLevels: { ...STANDARD_POWER_LEVELS, users_default: 5, events: { 'm.room.name': 10, 'm.reaction': 20 } } }),
  ));

  it.each([
    [ALICE, 100],
    [MOD, 50],
    [BOB, 5],
    ['constructor', 5],
  ])('userPowerLevel(%s) = %i', (userId, expected) => {
    expect(userPowerLevel(levels, userId)).toBe(expected);
  });

  it.each([
    ['m.room.name', true, 10],
    ['m.reaction', false, 20],
    ['m.room.topic', true, 50],
    ['m.room.message', false, 0],
    ['constructor', false, 0],
  ])('requiredPowerForEvent(%s, state %s) = %i', (type, isState, expected) => {
    expect(requiredPowerForEvent(levels, type, isState)).toBe(expected);
  });

  it.each([
    { who: BOB, redactsEventOf: BOB, redactionLevel: undefined, allowed: true },
    { who: BOB, redactsEventOf: CAROL, redactionLevel: undefined, allowed: false },
    { who: MOD, redactsEventOf: BOB, redactionLevel: undefined, allowed: true },
    { who: BOB, redactsEventOf: BOB, redactionLevel: 10, allowed: false },
    { who: MOD, redactsEventOf: BOB, redactionLevel: 75, allowed: false },
  ])('canRedact($who, event of $redactsEventOf, m.room.redaction level $redactionLevel) = $allowed', (row) => {
    const events = row.redactionLevel === undefined ? {} : { 'm.room.redaction': row.redactionLevel };
    const levelsForRow = effectivePowerLevels(...withState(room({ powerLevels: { ...STANDARD_POWER_LEVELS, events } })));
    expect(canRedact(levelsForRow, row.who, row.redactsEventOf)).toBe(row.allowed);
  });

  it.each([
    [BOB, 'join'],
    [IVY_INVITED, 'invite'],
    [BART_BANNED, 'ban'],
    [KIM_KNOCKING, 'knock'],
    [EVE_OUTSIDER, 'leave'],
  ])('membershipOf(%s) = %s', (userId, expected) => {
    expect(membershipOf(room(), userId)).toBe(expected);
  });
});
