/**
 * Push rule evaluation ("Push Rules" in the client-server spec's push module): which events notify
 * a user and which of those highlight, by the user's rules in order, the first enabled rule whose
 * conditions all hold deciding. Pure: the caller gives the event and what the conditions ask of
 * the room. Rules are compiled once per ruleset (glob patterns to matchers, dotted keys to paths),
 * since a sync evaluates every new event of every room against them.
 */
import { BoundedCache } from '../core/bounded-cache.js';
import { compileGlob, compileWords, type GlobTest } from '../core/glob.js';
import type { PushAction, PushCondition, PushRule, PushRuleKind } from './default-rules.js';

/** The event as push rules see it: the client format's top-level keys. */
export interface PushableEvent {
  type: string;
  sender: string;
  room_id: string;
  state_key?: string | undefined;
  content: Record<string, unknown>;
}

/** What the conditions ask of the room, at the time of the evaluation. */
export interface PushRoomContext {
  /** Joined members (`room_member_count`). */
  memberCount: number;
  /** The user's display name in the room (`contains_display_name`). */
  displayName: string | undefined;
  /** The sender's power level (`sender_notification_permission`). */
  senderPowerLevel: number;
  /** The power-levels event's `notifications` levels, defaults applied (`room`: 50). */
  notificationLevels: Readonly<Record<string, number>>;
}

export interface PushOutcome {
  notify: boolean;
  highlight: boolean;
  /** The rule's `set_tweak` actions (`sound`, `highlight`, ...), for push gateways; only when it notifies. */
  tweaks?: Readonly<Record<string, unknown>>;
}

const SILENT: PushOutcome = { notify: false, highlight: false };

type Test = (event: PushableEvent, room: PushRoomContext) => boolean;

interface CompiledRule {
  /** The event type the rule needs, lowercased, when it names one without wildcards: most rules
   * do, so most are passed over by one comparison. */
  type: string | undefined;
  tests: Test[];
  outcome: PushOutcome;
}

export type CompiledRuleset = readonly CompiledRule[];

const KIND_ORDER: readonly PushRuleKind[] = ['override', 'content', 'room', 'sender', 'underride'];

/** The enabled rules of a ruleset (`GET /pushrules/` shape), in evaluation order, ready to run. */
export function compileRuleset(ruleset: { global: Record<PushRuleKind, PushRule[]> }): CompiledRuleset {
  const compiled: CompiledRule[] = [];
  for (const kind of KIND_ORDER) {
    for (const rule of ruleset.global[kind] ?? []) {
      if (!rule.enabled) continue;
      // Content rules carry a pattern instead of conditions: a word-boundary match on the body.
      const conditions: PushCondition[] = kind === 'content' ? [{ kind: 'event_match', key: 'content.body', pattern: rule.pattern ?? '' }] : (rule.conditions ?? []);
      const typeCondition = conditions.find((c) => c.kind === 'event_match' && c.key === 'type' && typeof c.pattern === 'string' && !/[*?]/.test(c.pattern));
      const tests = conditions.filter((c) => c !== typeCondition).map(compileCondition);
      compiled.push({ type: typeCondition?.pattern?.toLowerCase(), tests, outcome: outcomeOf(rule.actions) });
    }
  }
  return compiled;
}

/** Whether the event notifies the user and whether it highlights. Events a user sent never notify them (the caller skips those). */
export function evaluatePush(rules: CompiledRuleset, event: PushableEvent, room: PushRoomContext): PushOutcome {
  const type = event.type.toLowerCase();
  next: for (const rule of rules) {
    if (rule.type !== undefined && rule.type !== type) continue;
    for (const test of rule.tests) if (!test(event, room)) continue next;
    return rule.outcome;
  }
  return SILENT;
}

function outcomeOf(actions: readonly PushAction[]): PushOutcome {
  const notify = actions.includes('notify');
  // A highlight tweak without a value means true; highlights count only among notifications.
  const highlight = actions.some((action) => typeof action === 'object' && action.set_tweak === 'highlight' && action.value !== false);
  if (!notify) return SILENT;
  const tweaks: Record<string, unknown> = {};
  for (const action of actions) {
    // A tweak without a value: highlight means true (the spec); others are passed on as given.
    if (typeof action === 'object' && typeof action.set_tweak === 'string') tweaks[action.set_tweak] = action.value ?? (action.set_tweak === 'highlight' ? true : undefined);
  }
  for (const key of Object.keys(tweaks)) if (tweaks[key] === undefined) delete tweaks[key];
  return { notify, highlight, tweaks };
}

const NEVER: Test = () => false;

function compileCondition(condition: PushCondition): Test {
  switch (condition.kind) {
    case 'event_match': {
      if (typeof condition.key !== 'string' || typeof condition.pattern !== 'string') return NEVER;
      const path = parseKey(condition.key);
      // The body matches at word boundaries anywhere in it; every other key matches whole.
      const matches = compileGlob(condition.pattern, { pushRuleSyntax: true, atWordBoundaries: condition.key === 'content.body' });
      return (event) => {
        const value = valueAt(event, path);
        return typeof value === 'string' && matches(value);
      };
    }
    case 'event_property_is': {
      if (typeof condition.key !== 'string' || !isScalar(condition.value)) return NEVER;
      const path = parseKey(condition.key);
      const expected = condition.value;
      return (event) => valueAt(event, path) === expected;
    }
    case 'event_property_contains': {
      if (typeof condition.key !== 'string' || !isScalar(condition.value)) return NEVER;
      const path = parseKey(condition.key);
      const expected = condition.value;
      return (event) => {
        const value = valueAt(event, path);
        return Array.isArray(value) && value.includes(expected);
      };
    }
    case 'room_member_count': {
      const compare = memberCountTest(condition.is);
      return compare ? (_event, room) => compare(room.memberCount) : NEVER;
    }
    case 'sender_notification_permission': {
      const key = condition.key;
      if (typeof key !== 'string') return NEVER;
      return (_event, room) => room.senderPowerLevel >= (room.notificationLevels[key] ?? 50);
    }
    case 'contains_display_name':
      return (event, room) => {
        const body = event.content.body;
        if (typeof body !== 'string' || !room.displayName) return false;
        return displayNameMatcher(room.displayName)(body);
      };
    default:
      // The spec: a condition of a kind the server does not know never matches.
      return NEVER;
  }
}

function isScalar(value: unknown): value is string | number | boolean | null {
  return value === null || typeof value === 'string' || typeof value === 'boolean' || (typeof value === 'number' && Number.isInteger(value));
}

/** `content.m\.relates_to.rel_type` → ['content', 'm.relates_to', 'rel_type']: `\.` is a dot inside a key, `\\` a backslash. */
export function parseKey(key: string): string[] {
  const parts: string[] = [];
  let current = '';
  for (let i = 0; i < key.length; i++) {
    const char = key[i]!;
    if (char === '\\' && (key[i + 1] === '.' || key[i + 1] === '\\')) {
      current += key[++i];
    } else if (char === '.') {
      parts.push(current);
      current = '';
    } else {
      current += char;
    }
  }
  parts.push(current);
  return parts;
}

function valueAt(event: PushableEvent, path: readonly string[]): unknown {
  // Sender rules match `user_id`, the sender's legacy name.
  let value: unknown = path[0] === 'user_id' ? event.sender : (event as unknown as Record<string, unknown>)[path[0]!];
  for (let i = 1; i < path.length; i++) {
    if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
    const object = value as Record<string, unknown>;
    if (!Object.hasOwn(object, path[i]!)) return undefined;
    value = object[path[i]!];
  }
  return value;
}

/** Display names are few and change rarely; their matchers are kept rather than built per event. */
const displayNameMatchers = new BoundedCache<string, GlobTest>(1000);

function displayNameMatcher(name: string): GlobTest {
  let matcher = displayNameMatchers.get(name);
  if (!matcher) {
    matcher = compileWords(name);
    displayNameMatchers.set(name, matcher);
  }
  return matcher;
}

function memberCountTest(is: string | undefined): ((count: number) => boolean) | undefined {
  const match = /^(==|<=|>=|<|>)?([0-9]+)$/.exec(is ?? '');
  if (!match) return undefined;
  const bound = Number(match[2]);
  switch (match[1] ?? '==') {
    case '<':
      return (count) => count < bound;
    case '>':
      return (count) => count > bound;
    case '<=':
      return (count) => count <= bound;
    case '>=':
      return (count) => count >= bound;
    default:
      return (count) => count === bound;
  }
}
