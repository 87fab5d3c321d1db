// The server-default push rules of Matrix v1.19 ("Predefined Rules" in the push notifications
// module), in the spec's order, which is also their evaluation order within each kind.
// v1.17 (MSC4210) removed the legacy mention rules .m.rule.contains_display_name,
// .m.rule.roomnotif and .m.rule.contains_user_name, so `content` starts empty; mentions now
// come only from m.mentions (.m.rule.is_user_mention, .m.rule.is_room_mention).

/** A push rule action: "notify", or a tweak such as `{ set_tweak: 'sound', value: 'default' }`. */
export type PushAction = string | { set_tweak: string; value?: string | boolean };

/** One condition of an override/underride rule (definitions/push_condition.yaml). */
export interface PushCondition {
  kind: string;
  key?: string;
  pattern?: string;
  is?: string;
  value?: string | number | boolean | null;
}

/** A push rule as `GET /pushrules/` returns it (definitions/push_rule.yaml). */
export interface PushRule {
  rule_id: string;
  default: boolean;
  enabled: boolean;
  actions: PushAction[];
  /** Only for override and underride rules. */
  conditions?: PushCondition[];
  /** Only for content rules. */
  pattern?: string;
}

export type PushRuleKind = 'override' | 'content' | 'room' | 'sender' | 'underride';

function serverDefault(ruleId: string, conditions: PushCondition[], actions: PushAction[]): PushRule {
  return { rule_id: ruleId, default: true, enabled: true, conditions, actions };
}

function eventMatch(key: string, pattern: string): PushCondition {
  return { kind: 'event_match', key, pattern };
}

const notifyWithSound = (sound: string): PushAction[] => ['notify', { set_tweak: 'sound', value: sound }];

function overrideRules(userId: string): PushRule[] {
  return [
    // Disabled by default; a user enables it to silence everything.
    { ...serverDefault('.m.rule.master', [], []), enabled: false },
    serverDefault('.m.rule.suppress_notices', [eventMatch('content.msgtype', 'm.notice')], []),
    serverDefault(
      '.m.rule.invite_for_me',
      [eventMatch('type', 'm.room.member'), eventMatch('content.membership', 'invite'), eventMatch('state_key', userId)],
      notifyWithSound('default'),
    ),
    serverDefault('.m.rule.member_event', [eventMatch('type', 'm.room.member')], []),
    serverDefault(
      '.m.rule.is_user_mention',
      // The backslash escapes the dot inside the "m.mentions" key (dotted-path syntax).
      [{ kind: 'event_property_contains', key: 'content.m\\.mentions.user_ids', value: userId }],
      [...notifyWithSound('default'), { set_tweak: 'highlight' }],
    ),
    serverDefault(
      '.m.rule.is_room_mention',
      [
        { kind: 'event_property_is', key: 'content.m\\.mentions.room', value: true },
        { kind: 'sender_notification_permission', key: 'room' },
      ],
      ['notify', { set_tweak: 'highlight' }],
    ),
    serverDefault(
      '.m.rule.tombstone',
      [eventMatch('type', 'm.room.tombstone'), eventMatch('state_key', '')],
      ['notify', { set_tweak: 'highlight' }],
    ),
    serverDefault('.m.rule.reaction', [eventMatch('type', 'm.reaction')], []),
    // The spec spells this one with ".room." in the id, unlike the event-type-named rules above.
    serverDefault('.m.rule.room.server_acl', [eventMatch('type', 'm.room.server_acl'), eventMatch('state_key', '')], []),
    serverDefault(
      '.m.rule.suppress_edits',
      [{ kind: 'event_property_is', key: 'content.m\\.relates_to.rel_type', value: 'm.replace' }],
      [],
    ),
  ];
}

function underrideRules(): PushRule[] {
  const inOneToOneRoom: PushCondition = { kind: 'room_member_count', is: '2' };
  return [
    serverDefault('.m.rule.call', [eventMatch('type', 'm.call.invite')], notifyWithSound('ring')),
    serverDefault(
      '.m.rule.encrypted_room_one_to_one',
      [inOneToOneRoom, eventMatch('type', 'm.room.encrypted')],
      notifyWithSound('default'),
    ),
    serverDefault(
      '.m.rule.room_one_to_one',
      [{ ...inOneToOneRoom }, eventMatch('type', 'm.room.message')],
      notifyWithSound('default'),
    ),
    serverDefault('.m.rule.message', [eventMatch('type', 'm.room.message')], ['notify']),
    serverDefault('.m.rule.encrypted', [eventMatch('type', 'm.room.encrypted')], ['notify']),
  ];
}

/** The spec's predefined push rules for a user, as `GET /pushrules/` answers them ({global: {override, content, room, sender, underride}}). */
export function defaultPushRules(userId: string): { global: Record<PushRuleKind, PushRule[]> } {
  // Built anew on every call so a caller may edit the result without touching later answers.
  return {
    global: {
      override: overrideRules(userId),
      content: [],
      room: [],
      sender: [],
      underride: underrideRules(),
    },
  };
}
