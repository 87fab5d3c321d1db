import { describe, expect, it } from 'vitest';
import { redactedContent } from '../../src/rooms/redaction.js';

const powerLevelsBeforeV11 = {
  ban: 50,
  events: { 'm.room.name': 50 },
  events_default: 0,
  kick: 50,
  redact: 50,
  state_default: 50,
  users: { '@alice:example.org': 100 },
  users_default: 0,
};
const powerLevelsV11 = { ...powerLevelsBeforeV11, invite: 0 };
// `notifications` is never kept, in any room version.
const powerLevels = { ...powerLevelsV11, notifications: { room: 50 } };

const member = {
  membership: 'join',
  displayname: 'Alice',
  avatar_url: 'mxc://example.org/abc',
  join_authorised_via_users_server: '@admin:example.org',
  third_party_invite: { display_name: 'alice@example.org', signed: { mxid: '@alice:example.org', token: 't', signatures: {} } },
};
const create = { creator: '@alice:example.org', 'm.federate': false, room_version: '5', predecessor: { room_id: '!old:example.org' } };
const joinRules = { join_rule: 'restricted', allow: [{ type: 'm.room_membership', room_id: '!space:example.org' }], extra: 1 };

describe('redactedContent', () => {
  it.each<[string, string, Record<string, unknown>, string, Record<string, unknown>]>([
    ['member before v9 keeps only membership', 'm.room.member', member, '8', { membership: 'join' }],
    [
      'member from v9 keeps join_authorised_via_users_server',
      'm.room.member',
      member,
      '9',
      { membership: 'join', join_authorised_via_users_server: '@admin:example.org' },
    ],
    [
      'member in v11 keeps only signed inside third_party_invite',
      'm.room.member',
      member,
      '11',
      { membership: 'join', join_authorised_via_users_server: '@admin:example.org', third_party_invite: { signed: member.third_party_invite.signed } },
    ],
    ['create before v11 keeps only creator', 'm.room.create', create, '10', { creator: '@alice:example.org' }],
    ['create in v11 keeps every key', 'm.room.create', create, '11', create],
    ['join rules before v8 drop allow', 'm.room.join_rules', joinRules, '7', { join_rule: 'restricted' }],
    ['join rules from v8 keep allow', 'm.room.join_rules', joinRules, '8', { join_rule: 'restricted', allow: joinRules.allow }],
    ['power levels before v11 drop invite', 'm.room.power_levels', powerLevels, '10', powerLevelsBeforeV11],
    ['power levels in v11 keep invite', 'm.room.power_levels', powerLevels, '11', powerLevelsV11],
    ['history visibility', 'm.room.history_visibility', { history_visibility: 'shared', x: 1 }, '1', { history_visibility: 'shared' }],
    ['aliases up to v5', 'm.room.aliases', { aliases: ['#a:example.org'], x: 1 }, '5', { aliases: ['#a:example.org'] }],
    ['aliases dropped from v6', 'm.room.aliases', { aliases: ['#a:example.org'] }, '6', {}],
    ['redaction before v11 keeps nothing', 'm.room.redaction', { redacts: '$ev', reason: 'spam' }, '10', {}],
    ['redaction in v11 keeps redacts', 'm.room.redaction', { redacts: '$ev', reason: 'spam' }, '11', { redacts: '$ev' }],
    ['other events keep nothing', 'm.room.message', { msgtype: 'm.text', body: 'hi' }, '11', {}],
    ['state events outside the list keep nothing', 'm.room.name', { name: 'Room' }, '1', {}],
    ['unknown versions use v11 rules', 'm.room.power_levels', powerLevels, '12', powerLevelsV11],
    ['custom version strings use v11 rules', 'm.room.create', create, 'org.example.custom', create],
    ['missing keys stay missing', 'm.room.member', { displayname: 'Bob' }, '11', {}],
  ])('%s', (_name, type, content, roomVersion, expected) => {
    expect(redactedContent(type, content, roomVersion)).toEqual(expected);
  });

  it('keeps a v11 third_party_invite without signed as an empty object', () => {
    const content = { membership: 'invite', third_party_invite: { display_name: 'x' } };
    expect(redactedContent('m.room.member', content, '11')).toEqual({ membership: 'invite', third_party_invite: {} });
  });

  it('never shares objects with the input', () => {
    const copy = redactedContent('m.room.power_levels', powerLevels, '11');
    expect(copy['users']).toEqual(powerLevels.users);
    expect(copy['users']).not.toBe(powerLevels.users);
    expect(copy['events']).not.toBe(powerLevels.events);

    const createCopy = redactedContent('m.room.create', create, '11');
    expect(createCopy).not.toBe(create);
    expect(createCopy['predecessor']).not.toBe(create.predecessor);

    const memberCopy = redactedContent('m.room.member', member, '11') as { third_party_invite: { signed: unknown } };
    expect(memberCopy.third_party_invite.signed).not.toBe(member.third_party_invite.signed);
  });
});
