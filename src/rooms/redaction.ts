// Which content keys survive a redaction. The list grows with the room version (rooms/v1..v11,
// "Redactions"): events are hashed and signed over their redacted form, so every server must
// strip exactly the same keys or signatures stop matching.

type Content = Record<string, unknown>;

/** What changed in the redaction algorithm, and from which room version on. */
interface RedactionRules {
  /** v1-v5 keep `aliases` of m.room.aliases; v6 drops the special case. */
  keepAliases: boolean;
  /** v8 added restricted joins, whose `allow` list the join rules must keep. */
  keepJoinRulesAllow: boolean;
  /** v9 keeps the server that authorised a restricted join. */
  keepJoinAuthorisedVia: boolean;
  /** v11 (MSC2176, MSC3821, MSC3989): create keeps everything, plus redacts/invite/3pid signed. */
  v11: boolean;
}

function rulesFor(roomVersion: string): RedactionRules {
  // Versions 1..10 are plain integers; 11, 12 and anything newer or unknown get v11 rules.
  const n = /^(?:[1-9]|10)$/.test(roomVersion) ? Number(roomVersion) : 11;
  return {
    keepAliases: n <= 5,
    keepJoinRulesAllow: n >= 8,
    keepJoinAuthorisedVia: n >= 9,
    v11: n >= 11,
  };
}

function contentKeysToKeep(type: string, rules: RedactionRules): string[] {
  switch (type) {
    case 'm.room.member':
      return rules.keepJoinAuthorisedVia ? ['membership', 'join_authorised_via_users_server'] : ['membership'];
    case 'm.room.create':
      // v11 keeps every key; handled by the caller. Before that only `creator` survived.
      return ['creator'];
    case 'm.room.join_rules':
      return rules.keepJoinRulesAllow ? ['join_rule', 'allow'] : ['join_rule'];
    case 'm.room.power_levels': {
      const keys = ['ban', 'events', 'events_default', 'kick', 'redact', 'state_default', 'users', 'users_default'];
      return rules.v11 ? [...keys, 'invite'] : keys;
    }
    case 'm.room.history_visibility':
      return ['history_visibility'];
    case 'm.room.aliases':
      return rules.keepAliases ? ['aliases'] : [];
    case 'm.room.redaction':
      // v11 moved `redacts` into content, so it must survive redaction of the redaction.
      return rules.v11 ? ['redacts'] : [];
    default:
      return [];
  }
}

function isPlainObject(value: unknown): value is Content {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The content an event keeps once redacted, per the spec's redaction algorithm for the given room version ("1".."12"; unknown versions → v11 rules). */
export function redactedContent(type: string, content: Record<string, unknown>, roomVersion: string): Record<string, unknown> {
  const rules = rulesFor(roomVersion);
  // structuredClone so the redacted copy never shares nested objects with the original event.
  if (type === 'm.room.create' && rules.v11) return structuredClone(content);

  const kept: Content = {};
  for (const key of contentKeysToKeep(type, rules)) {
    if (Object.hasOwn(content, key)) kept[key] = structuredClone(content[key]);
  }

  // v11 keeps only `signed` inside a member event's third_party_invite, which auth rules need.
  const invite = content['third_party_invite'];
  if (type === 'm.room.member' && rules.v11 && isPlainObject(invite)) {
    kept['third_party_invite'] = Object.hasOwn(invite, 'signed') ? { signed: structuredClone(invite['signed']) } : {};
  }
  return kept;
}

/** Top-level keys an event keeps when redacted; v11 dropped `origin`, `membership` and `prev_state`. */
const KEPT_TOP_LEVEL = ['event_id', 'type', 'room_id', 'sender', 'state_key', 'content', 'hashes', 'signatures', 'depth', 'prev_events', 'auth_events', 'origin_server_ts'];
const KEPT_TOP_LEVEL_BEFORE_V11 = [...KEPT_TOP_LEVEL, 'prev_state', 'origin', 'membership'];

/**
 * The whole event redacted (the form signatures and reference hashes are computed over): only
 * the essential top-level keys, and the content the room version keeps. Nested values are
 * shared with the original, except the content, which is a new object.
 */
export function redactPdu(pdu: Record<string, unknown>, roomVersion: string): Record<string, unknown> {
  const rules = rulesFor(roomVersion);
  const redacted: Record<string, unknown> = {};
  for (const key of rules.v11 ? KEPT_TOP_LEVEL : KEPT_TOP_LEVEL_BEFORE_V11) {
    if (Object.hasOwn(pdu, key)) redacted[key] = pdu[key];
  }
  const content = isPlainObject(pdu.content) ? pdu.content : {};
  redacted.content = redactedContent(typeof pdu.type === 'string' ? pdu.type : '', content, roomVersion);
  return redacted;
}
