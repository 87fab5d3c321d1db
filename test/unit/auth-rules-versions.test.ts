/**
 * What the auth rules do differently from one room version to the next (rooms/v3..v12), as tables.
 * The v10 rules themselves are covered by auth-rules.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { ed25519Signer, signJson } from '../../src/core/signed-json.js';
import {
  authEventKeys,
  checkAuthEventsSelection,
  checkEventAuth,
  effectivePowerLevels,
  userPowerLevel,
  type ProposedEvent,
  type StateEvent,
  type StateLookup,
} from '../../src/rooms/auth-rules.js';
import { knownRoomVersion } from '../../src/rooms/room-versions.js';

const ALICE = '@alice:a.example';
const BOB = '@bob:b.example';
const CAROL = '@carol:a.example';
const DAVE = '@dave:d.example';

function state(version: string, extra: StateEvent[] = [], createContent: Record<string, unknown> = {}): StateLookup {
  const v = knownRoomVersion(version);
  const events: StateEvent[] = [
    { event_id: '$create', type: 'm.room.create', state_key: '', sender: ALICE, content: { room_version: version, ...(v.v11 ? {} : { creator: ALICE }), ...createContent } },
    { event_id: '$alice', type: 'm.room.member', state_key: ALICE, sender: ALICE, content: { membership: 'join' } },
    { event_id: '$carol', type: 'm.room.member', state_key: CAROL, sender: CAROL, content: { membership: 'join' } },
    { event_id: '$pl', type: 'm.room.power_levels', state_key: '', sender: ALICE, content: { users: v.privilegedCreators ? { [CAROL]: 50 } : { [ALICE]: 100, [CAROL]: 50 } } },
    ...extra,
  ];
  const byKey = new Map(events.map((event) => [`${event.type}\u0000${event.state_key}`, event]));
  return (type, stateKey) => byKey.get(`${type}\u0000${stateKey}`);
}

const joinRules = (rule: string, extra: Record<string, unknown> = {}): StateEvent => ({ event_id: '$jr', type: 'm.room.join_rules', state_key: '', sender: ALICE, content: { join_rule: rule, ...extra } });
const member = (target: string, membership: string, sender = target, content: Record<string, unknown> = {}): ProposedEvent => ({
  type: 'm.room.member', state_key: target, sender, content: { membership, ...content },
});

function outcome(event: ProposedEvent, lookup: StateLookup, version: string, isSignedBy?: (server: string) => boolean): string {
  const result = checkEventAuth(event, lookup, knownRoomVersion(version), isSignedBy ? { isSignedBy } : {});
  return result.allowed ? 'allow' : `deny: ${result.reason}`;
}

describe('knocking (v7+), knock_restricted (v10+)', () => {
  it.each([
    ['6', 'knock', /not part of room version 6/],
    ['7', 'knock', 'allow'],
    ['9', 'knock_restricted', /does not allow knocking/],
    ['10', 'knock_restricted', 'allow'],
  ])('v%s, join rule %s', (version, rule, expected) => {
    const result = outcome(member(BOB, 'knock'), state(version, [joinRules(rule)]), version);
    if (expected === 'allow') expect(result).toBe('allow');
    else expect(result).toMatch(expected);
  });

  it('lets a knock be withdrawn from v7 on', () => {
    const knocked: StateEvent = { type: 'm.room.member', state_key: BOB, sender: BOB, content: { membership: 'knock' } };
    expect(outcome(member(BOB, 'leave'), state('7', [joinRules('knock'), knocked]), '7')).toBe('allow');
  });
});

describe('restricted joins (v8+)', () => {
  const vouched = member(BOB, 'join', BOB, { join_authorised_via_users_server: CAROL });
  const signedByA = (server: string) => server === 'a.example';

  it.each([
    ['7', 'restricted', signedByA, /join rule restricted does not allow joining/],
    ['8', 'restricted', signedByA, 'allow'],
    ['8', 'restricted', () => false, /not signed by a.example/],
    ['9', 'knock_restricted', signedByA, /does not allow joining/],
    ['10', 'knock_restricted', signedByA, 'allow'],
  ])('v%s, join rule %s', (version, rule, signed, expected) => {
    const result = outcome(vouched, state(version, [joinRules(rule, { allow: [] })]), version, signed);
    if (expected === 'allow') expect(result).toBe('allow');
    else expect(result).toMatch(expected);
  });

  it('needs the voucher joined and able to invite', () => {
    const lookup = state('10', [joinRules('restricted'), { type: 'm.room.power_levels', state_key: '', sender: ALICE, content: { users: { [ALICE]: 100 }, invite: 50 } }]);
    expect(outcome(vouched, lookup, '10', () => true)).toMatch(/may not vouch/);
    const byAlice = member(BOB, 'join', BOB, { join_authorised_via_users_server: ALICE });
    expect(outcome(byAlice, lookup, '10', () => true)).toBe('allow');
    const outsider = member(BOB, 'join', BOB, { join_authorised_via_users_server: DAVE });
    expect(outcome(outsider, lookup, '10', () => true)).toMatch(/may not vouch/);
  });
});

describe('power levels: strings (v1-v9), floats (v1-v5), integers only (v10+)', () => {
  const withLevels = (content: Record<string, unknown>): StateEvent => ({ type: 'm.room.power_levels', state_key: '', sender: ALICE, content });
  it('reads "+050" as 50 up to v9 and not from v10', () => {
    const content = { users: { [ALICE]: '100', [CAROL]: ' +050 ' }, ban: '75' };
    const v9 = effectivePowerLevels(state('9', [withLevels(content)]), knownRoomVersion('9'));
    expect(userPowerLevel(v9, CAROL)).toBe(50);
    expect(v9.ban).toBe(75);
    const v10 = effectivePowerLevels(state('10', [withLevels(content)]), knownRoomVersion('10'));
    expect(userPowerLevel(v10, CAROL)).toBe(0);
    expect(v10.ban).toBe(50);
  });

  it('truncates floats up to v5', () => {
    const content = { users: { [ALICE]: 100, [CAROL]: 50.9 } };
    expect(userPowerLevel(effectivePowerLevels(state('5', [withLevels(content)]), knownRoomVersion('5')), CAROL)).toBe(50);
    expect(userPowerLevel(effectivePowerLevels(state('6', [withLevels(content)]), knownRoomVersion('6')), CAROL)).toBe(0);
  });

  it.each([
    ['9', { users: { [ALICE]: 100, [CAROL]: '50' }, kick: '50' }, 'allow'],
    ['10', { users: { [ALICE]: 100, [CAROL]: 50 }, kick: '50' }, /kick must be an integer/],
    ['10', { users: { [ALICE]: 100, [CAROL]: '50' } }, /Power level of @carol:a.example must be an integer/],
  ])('v%s accepts or refuses %j', (version, content, expected) => {
    const result = outcome({ type: 'm.room.power_levels', state_key: '', sender: ALICE, content }, state(version), version);
    if (expected === 'allow') expect(result).toBe('allow');
    else expect(result).toMatch(expected);
  });

  it('checks changes to notifications from v6 on', () => {
    const current: StateEvent = { type: 'm.room.power_levels', state_key: '', sender: ALICE, content: { users: { [ALICE]: 100, [CAROL]: 50 }, events: { 'm.room.power_levels': 50 }, notifications: { room: 100 } } };
    const change: ProposedEvent = { type: 'm.room.power_levels', state_key: '', sender: CAROL, content: { ...current.content, notifications: { room: 10 } } };
    expect(outcome(change, state('5', [current]), '5')).toBe('allow');
    expect(outcome(change, state('6', [current]), '6')).toMatch(/notifications.room/);
  });
});

describe('m.room.aliases (v3-v5)', () => {
  const aliases = (stateKey: string): ProposedEvent => ({ type: 'm.room.aliases', state_key: stateKey, sender: BOB, content: { aliases: ['#x:b.example'] } });
  it('belongs to the server in its state key up to v5, and is ordinary state from v6', () => {
    expect(outcome(aliases('b.example'), state('5'), '5')).toBe('allow');
    expect(outcome(aliases('a.example'), state('5'), '5')).toMatch(/only be set by the server/);
    // From v6, Bob (not joined) is refused like any state event.
    expect(outcome(aliases('b.example'), state('6'), '6')).toMatch(/not joined/);
  });
});

describe('the create event', () => {
  const create = (version: string, extra: Partial<ProposedEvent> = {}, content: Record<string, unknown> = {}): ProposedEvent => ({
    type: 'm.room.create', state_key: '', sender: ALICE, content: { room_version: version, ...content }, ...extra,
  });
  const none: StateLookup = () => undefined;

  it.each([
    ['10', create('10', { room_id: '!r:a.example' }, { creator: ALICE }), 'allow'],
    ['10', create('10', { room_id: '!r:a.example' }), /no creator/],
    ['11', create('11', { room_id: '!r:a.example' }), 'allow'],
    ['11', create('11', { room_id: '!r:b.example' }), /room id's domain/],
    ['11', create('11', { room_id: '!r:a.example', prev_events: ['$x'] }), /no prev_events/],
    ['12', create('12'), 'allow'],
    ['12', create('12', { room_id: '!r:a.example' }), /no room_id/],
    ['12', create('12', {}, { additional_creators: [BOB] }), 'allow'],
    ['12', create('12', {}, { additional_creators: ['bob'] }), /additional_creators/],
    ['12', create('12', {}, { room_version: '99' }), /Unknown room version/],
  ])('v%s: %j', (version, event, expected) => {
    const result = outcome(event, none, version);
    if (expected === 'allow') expect(result).toBe('allow');
    else expect(result).toMatch(expected);
  });

  it('knows the creator\'s first join by its prev_events', () => {
    const justCreated: StateLookup = (type, key) => (type === 'm.room.create' && key === '' ? { event_id: '$create', type, state_key: '', sender: ALICE, content: { room_version: '11' } } : undefined);
    expect(outcome({ ...member(ALICE, 'join'), prev_events: ['$create'] }, justCreated, '11')).toBe('allow');
    expect(outcome({ ...member(ALICE, 'join'), prev_events: ['$other'] }, justCreated, '11')).toMatch(/not invited/);
  });
});

describe('v12 creators', () => {
  it('have infinite power that power levels cannot list or lower', () => {
    const lookup = state('12', [], { additional_creators: [DAVE] });
    const levels = effectivePowerLevels(lookup, knownRoomVersion('12'));
    expect(userPowerLevel(levels, ALICE)).toBe(Number.POSITIVE_INFINITY);
    expect(userPowerLevel(levels, DAVE)).toBe(Number.POSITIVE_INFINITY);
    expect(userPowerLevel(levels, CAROL)).toBe(50);
    const listing = (userId: string): ProposedEvent => ({ type: 'm.room.power_levels', state_key: '', sender: ALICE, content: { users: { [userId]: 100 } } });
    expect(outcome(listing(ALICE), lookup, '12')).toMatch(/room creator/);
    expect(outcome(listing(DAVE), lookup, '12')).toMatch(/room creator/);
    expect(outcome(listing(CAROL), lookup, '12')).toBe('allow');
  });

  it('cannot be kicked or banned, even by the highest level', () => {
    const lookup = state('12', [{ type: 'm.room.power_levels', state_key: '', sender: ALICE, content: { users: { [CAROL]: 9_007_199_254_740_991 } } }]);
    expect(outcome(member(ALICE, 'ban', CAROL), lookup, '12')).toMatch(/Banning needs/);
    expect(outcome(member(CAROL, 'ban', ALICE), lookup, '12')).toBe('allow');
  });
});

describe('m.federate', () => {
  it('keeps other servers out of a room that does not federate', () => {
    const lookup = state('10', [joinRules('public')], { 'm.federate': false });
    expect(outcome(member(BOB, 'join'), lookup, '10')).toMatch(/does not federate/);
    expect(outcome(member('@zed:a.example', 'join'), lookup, '10')).toBe('allow');
  });
});

describe('third-party invites', () => {
  const key = ed25519Signer('id.example', '0', Buffer.alloc(32, 7));
  const token: StateEvent = { type: 'm.room.third_party_invite', state_key: 'tok', sender: ALICE, content: { display_name: 'b…', public_keys: [{ public_key: key.publicKey }] } };
  const signed = signJson({ mxid: BOB, token: 'tok', sender: ALICE }, key);
  it('admits the invited user when the identity server signed the token', () => {
    expect(outcome(member(BOB, 'invite', ALICE, { third_party_invite: { display_name: 'b', signed } }), state('10', [token]), '10')).toBe('allow');
  });
  it.each([
    ['a signature by another key', { ...signed, signatures: { 'id.example': { 'ed25519:0': 'A'.repeat(86) } } }, /No signature/],
    ['another mxid', { ...signed, mxid: CAROL }, /not the invited user/],
    ['an unknown token', { ...signed, token: 'nope' }, /matches the token/],
  ])('refuses %s', (_name, altered, expected) => {
    expect(outcome(member(BOB, 'invite', ALICE, { third_party_invite: { signed: altered } }), state('10', [token]), '10')).toMatch(expected);
  });
});

describe('auth events selection', () => {
  const roomId = '!r:a.example';
  const of = (type: string, stateKey: string, extra: Partial<StateEvent & { room_id: string; rejected: boolean }> = {}) => ({ type, state_key: stateKey, sender: ALICE, content: {}, room_id: roomId, ...extra });
  const join = member(BOB, 'join');

  it('names the create event up to v11 and never in v12', () => {
    // A join names its sender as sender and as target: the key once (twice is refused by other servers).
    expect(authEventKeys(join, knownRoomVersion('11'))).toEqual([['m.room.create', ''], ['m.room.power_levels', ''], ['m.room.member', BOB], ['m.room.join_rules', '']]);
    expect(authEventKeys(join, knownRoomVersion('12'))).toEqual([['m.room.power_levels', ''], ['m.room.member', BOB], ['m.room.join_rules', '']]);
    expect(authEventKeys({ ...join, content: { membership: 'join', join_authorised_via_users_server: CAROL } }, knownRoomVersion('8'))).toContainEqual(['m.room.member', CAROL]);
    expect(authEventKeys({ ...join, content: { membership: 'join', join_authorised_via_users_server: CAROL } }, knownRoomVersion('7'))).not.toContainEqual(['m.room.member', CAROL]);
  });

  it.each([
    ['11', [of('m.room.create', ''), of('m.room.power_levels', ''), of('m.room.join_rules', '')], 'allow'],
    ['11', [of('m.room.power_levels', '')], /no m.room.create/],
    ['11', [of('m.room.create', ''), of('m.room.create', '')], /two m.room.create/],
    ['11', [of('m.room.create', ''), of('m.room.topic', '')], /does not authorise/],
    ['11', [of('m.room.create', ''), of('m.room.power_levels', '', { rejected: true })], /rejected/],
    ['11', [of('m.room.create', ''), of('m.room.power_levels', '', { room_id: '!other:a.example' })], /another room/],
    ['12', [of('m.room.power_levels', ''), of('m.room.join_rules', '')], 'allow'],
    ['12', [of('m.room.create', ''), of('m.room.power_levels', '')], /does not authorise/],
  ])('v%s: %#', (version, authEvents, expected) => {
    const result = checkAuthEventsSelection(join, authEvents, knownRoomVersion(version), roomId);
    if (expected === 'allow') expect(result).toEqual({ allowed: true });
    else expect(result.allowed ? 'allow' : result.reason).toMatch(expected);
  });
});
