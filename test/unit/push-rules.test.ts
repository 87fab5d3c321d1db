import { beforeAll, describe, expect, it } from 'vitest';
import { defaultPushRules, type PushRule } from '../../src/push/default-rules.js';
import { loadMatrixSpec, validateResponse } from '../support/spec-validator.js';

const USER = '@bot:example.org';
const ruleIds = (rules: PushRule[]): string[] => rules.map((r) => r.rule_id);

beforeAll(() => {
  loadMatrixSpec();
});

describe('defaultPushRules', () => {
  it('matches the spec response schema of GET /pushrules/', () => {
    expect(validateResponse('GET', '/_matrix/client/v3/pushrules/', 200, defaultPushRules(USER))).toEqual([]);
  });

  it('is checked by a schema that would catch a rule without `default`', () => {
    const broken = defaultPushRules(USER);
    delete (broken.global.override[0] as Partial<PushRule>).default;
    expect(validateResponse('GET', '/_matrix/client/v3/pushrules/', 200, broken).join('\n')).toMatch(/default/);
  });

  it('lists the Matrix v1.19 predefined rules in spec order', () => {
    const { global } = defaultPushRules(USER);
    expect(ruleIds(global.override)).toEqual([
      '.m.rule.master',
      '.m.rule.suppress_notices',
      '.m.rule.invite_for_me',
      '.m.rule.member_event',
      '.m.rule.is_user_mention',
      '.m.rule.is_room_mention',
      '.m.rule.tombstone',
      '.m.rule.reaction',
      '.m.rule.room.server_acl',
      '.m.rule.suppress_edits',
    ]);
    // The legacy mention rules (.m.rule.contains_user_name & co.) were removed in v1.17 (MSC4210).
    expect(global.content).toEqual([]);
    expect(global.room).toEqual([]);
    expect(global.sender).toEqual([]);
    expect(ruleIds(global.underride)).toEqual([
      '.m.rule.call',
      '.m.rule.encrypted_room_one_to_one',
      '.m.rule.room_one_to_one',
      '.m.rule.message',
      '.m.rule.encrypted',
    ]);
  });

  it('marks every rule as a server default, enabled except master', () => {
    const { global } = defaultPushRules(USER);
    for (const rule of Object.values(global).flat()) {
      expect(rule.default).toBe(true);
      expect(rule.enabled).toBe(rule.rule_id !== '.m.rule.master');
      expect(rule.rule_id.startsWith('.')).toBe(true);
      expect(Array.isArray(rule.actions)).toBe(true);
      expect(Array.isArray(rule.conditions)).toBe(true);
    }
  });

  it('names the user in invite_for_me and is_user_mention', () => {
    const { global } = defaultPushRules(USER);
    const invite = global.override.find((r) => r.rule_id === '.m.rule.invite_for_me');
    expect(invite?.conditions).toContainEqual({ kind: 'event_match', key: 'state_key', pattern: USER });
    const mention = global.override.find((r) => r.rule_id === '.m.rule.is_user_mention');
    expect(mention?.conditions).toEqual([{ kind: 'event_property_contains', key: 'content.m\\.mentions.user_ids', value: USER }]);
    expect(mention?.actions).toContainEqual({ set_tweak: 'highlight' });
  });

  it('returns fresh objects on every call', () => {
    const first = defaultPushRules(USER);
    first.global.override[1]!.enabled = false;
    first.global.underride[1]!.conditions!.push({ kind: 'event_match', key: 'x', pattern: 'y' });
    first.global.content.push({ rule_id: 'mine', default: false, enabled: true, actions: [], pattern: 'x' });
    const second = defaultPushRules(USER);
    expect(second.global.override[1]!.enabled).toBe(true);
    expect(second.global.underride[1]!.conditions).toHaveLength(2);
    expect(second.global.underride[2]!.conditions).toHaveLength(2);
    expect(second.global.content).toEqual([]);
  });
});
