/** Push rule evaluation: the spec's conditions, glob matching, and the default rules' outcomes. */
import { describe, expect, it } from 'vitest';
import { defaultPushRules, type PushCondition, type PushRule } from '../../src/push/default-rules.js';
import { compileRuleset, evaluatePush, parseKey, type PushableEvent, type PushRoomContext } from '../../src/push/evaluator.js';
import { compileGlob, compileWords } from '../../src/core/glob.js';

const ME = '@bot:example.org';
const room: PushRoomContext = { memberCount: 5, displayName: 'Build Bot', senderPowerLevel: 0, notificationLevels: { room: 50 } };
const message = (content: Record<string, unknown>, extra: Partial<PushableEvent> = {}): PushableEvent => ({ type: 'm.room.message', sender: '@alice:example.org', room_id: '!r:example.org', content, ...extra });
const defaults = compileRuleset(defaultPushRules(ME));

function withRule(kind: 'override' | 'content' | 'underride', rule: Partial<PushRule>): ReturnType<typeof compileRuleset> {
  const rules = defaultPushRules(ME);
  rules.global[kind].unshift({ rule_id: 'mine', default: false, enabled: true, actions: ['notify', { set_tweak: 'highlight' }], ...rule });
  return compileRuleset(rules);
}

const matchesCondition = (condition: PushCondition, event: PushableEvent, context: PushRoomContext = room): boolean =>
  evaluatePush(compileRuleset({ global: { override: [{ rule_id: 'c', default: false, enabled: true, actions: ['notify'], conditions: [condition] }], content: [], room: [], sender: [], underride: [] } }), event, context).notify;

describe('default rules', () => {
  it('notify for messages, highlight for m.mentions, stay silent for notices, edits and reactions', () => {
    expect(evaluatePush(defaults, message({ msgtype: 'm.text', body: 'hi' }), room)).toMatchObject({ notify: true, highlight: false });
    expect(evaluatePush(defaults, message({ msgtype: 'm.text', body: 'hi', 'm.mentions': { user_ids: [ME] } }), room)).toMatchObject({ notify: true, highlight: true });
    // The rule's tweaks, for push gateways: a mention sounds and highlights.
    expect(evaluatePush(defaults, message({ msgtype: 'm.text', body: 'hi', 'm.mentions': { user_ids: [ME] } }), room).tweaks).toEqual({ sound: 'default', highlight: true });
    expect(evaluatePush(defaults, message({ msgtype: 'm.notice', body: 'beep' }), room).notify).toBe(false);
    expect(evaluatePush(defaults, message({ msgtype: 'm.text', body: '* hi', 'm.relates_to': { rel_type: 'm.replace', event_id: '$e' } }), room).notify).toBe(false);
    expect(evaluatePush(defaults, message({ 'm.relates_to': { rel_type: 'm.annotation', event_id: '$e', key: '👍' } }, { type: 'm.reaction' }), room).notify).toBe(false);
    expect(evaluatePush(defaults, message({ membership: 'join' }, { type: 'm.room.member', state_key: '@alice:example.org' }), room).notify).toBe(false);
    expect(evaluatePush(defaults, message({ algorithm: 'm.megolm.v1.aes-sha2' }, { type: 'm.room.encrypted' }), room)).toMatchObject({ notify: true, highlight: false });
  });

  it('highlight @room only from senders with the notifications.room level', () => {
    const atRoom = message({ msgtype: 'm.text', body: '@room', 'm.mentions': { room: true } });
    expect(evaluatePush(defaults, atRoom, room)).toMatchObject({ notify: true, highlight: false });
    expect(evaluatePush(defaults, atRoom, { ...room, senderPowerLevel: 50 })).toMatchObject({ notify: true, highlight: true });
    expect(evaluatePush(defaults, atRoom, { ...room, senderPowerLevel: 50, notificationLevels: { room: 100 } }).highlight).toBe(false);
  });

  it('are off entirely with .m.rule.master enabled', () => {
    const rules = defaultPushRules(ME);
    rules.global.override[0]!.enabled = true;
    expect(evaluatePush(compileRuleset(rules), message({ msgtype: 'm.text', body: 'hi', 'm.mentions': { user_ids: [ME] } }), room).notify).toBe(false);
  });
});

describe('conditions', () => {
  it('event_match matches a whole value, case-insensitively, and only strings', () => {
    expect(matchesCondition({ kind: 'event_match', key: 'sender', pattern: '@ALICE:*' }, message({}))).toBe(true);
    expect(matchesCondition({ kind: 'event_match', key: 'sender', pattern: 'alice' }, message({}))).toBe(false);
    expect(matchesCondition({ kind: 'event_match', key: 'content.n', pattern: '*' }, message({ n: 1 }))).toBe(false);
    expect(matchesCondition({ kind: 'event_match', key: 'content.missing', pattern: '*' }, message({}))).toBe(false);
    expect(matchesCondition({ kind: 'event_match', key: 'user_id', pattern: '@alice:example.org' }, message({}))).toBe(true);
  });

  it('event_match on content.body matches at word boundaries', () => {
    const body = (text: string) => matchesCondition({ kind: 'event_match', key: 'content.body', pattern: 'deploy*' }, message({ body: text }));
    expect(body('the deployment failed')).toBe(true);
    expect(body('Deploy now')).toBe(true);
    expect(body('redeploy')).toBe(false);
  });

  it('event_property_is and event_property_contains compare scalars exactly, with escaped dots in keys', () => {
    expect(parseKey('content.m\\.relates_to.rel_type')).toEqual(['content', 'm.relates_to', 'rel_type']);
    expect(parseKey('a\\\\b.c')).toEqual(['a\\b', 'c']);
    expect(matchesCondition({ kind: 'event_property_is', key: 'content.flag', value: true }, message({ flag: true }))).toBe(true);
    expect(matchesCondition({ kind: 'event_property_is', key: 'content.flag', value: true }, message({ flag: 'true' }))).toBe(false);
    expect(matchesCondition({ kind: 'event_property_is', key: 'content.none', value: null }, message({ none: null }))).toBe(true);
    expect(matchesCondition({ kind: 'event_property_is', key: 'content.none', value: null }, message({}))).toBe(false);
    expect(matchesCondition({ kind: 'event_property_contains', key: 'content.tags', value: 'ci' }, message({ tags: ['ops', 'ci'] }))).toBe(true);
    expect(matchesCondition({ kind: 'event_property_contains', key: 'content.tags', value: 'ci' }, message({ tags: 'ci' }))).toBe(false);
  });

  it('room_member_count, contains_display_name, sender_notification_permission, and unknown kinds', () => {
    const count = (is: string) => matchesCondition({ kind: 'room_member_count', is }, message({}));
    expect([count('5'), count('==5'), count('<6'), count('>4'), count('>=5'), count('<=4'), count('x')]).toEqual([true, true, true, true, true, false, false]);
    const named = (body: string) => matchesCondition({ kind: 'contains_display_name' }, message({ body }));
    expect([named('hey build bot!'), named('Build Botty'), named('')]).toEqual([true, false, false]);
    expect(matchesCondition({ kind: 'sender_notification_permission', key: 'room' }, message({}), { ...room, senderPowerLevel: 50 })).toBe(true);
    expect(matchesCondition({ kind: 'sender_notification_permission', key: 'room' }, message({}))).toBe(false);
    expect(matchesCondition({ kind: 'org.example.future' }, message({}))).toBe(false);
  });

  it('a user’s content rule highlights keywords before the default message rule decides', () => {
    const rules = withRule('content', { pattern: 'outage' });
    expect(evaluatePush(rules, message({ msgtype: 'm.text', body: 'Outage in eu-1' }), room)).toMatchObject({ notify: true, highlight: true });
    expect(evaluatePush(rules, message({ msgtype: 'm.text', body: 'all fine' }), room)).toMatchObject({ notify: true, highlight: false });
  });
});

describe('glob matching', () => {
  it('follows the glob rules: * any run, ? one character', () => {
    const whole = (glob: string, text: string) => compileGlob(glob, { pushRuleSyntax: true })(text);
    expect(whole('a*c', 'abbbc')).toBe(true);
    expect(whole('a*c', 'abbbcd')).toBe(false);
    expect(whole('a?c', 'abc')).toBe(true);
    expect(whole('a?c', 'ac')).toBe(false);
    expect(whole('*', '')).toBe(true);
    expect(whole('a*a', 'a')).toBe(false);
    expect(whole('*b*d*', 'abcde')).toBe(true);
    expect(whole('a.c', 'abc')).toBe(false);
    expect(whole('M.Room.*', 'm.room.message')).toBe(true);
    const words = (glob: string, text: string) => compileGlob(glob, { pushRuleSyntax: true, atWordBoundaries: true })(text);
    expect(words('ci fail*', 'the CI failed again')).toBe(true);
    expect(words('*fail', 'the ci failed')).toBe(false);
    expect(words('b?d', 'a bad day')).toBe(true);
    expect(compileWords('a.b')('x a.b y')).toBe(true);
    expect(compileWords('a.b')('axb')).toBe(false);
  });

  it('answers a pattern that would make a backtracking regex explode', () => {
    // `*a*a*...b` on a long run of a's is exponential for a backtracking regular expression.
    const pattern = `${'*a'.repeat(30)}*b`;
    expect(compileGlob(pattern, { pushRuleSyntax: true })('a'.repeat(60_000))).toBe(false);
    expect(compileGlob(pattern, { pushRuleSyntax: true, atWordBoundaries: true })('a'.repeat(60_000))).toBe(false);
  });
});
