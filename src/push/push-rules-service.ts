/**
 * A user's push rules (`/pushrules/...`): the server's defaults, with the user's own rules and
 * their changes to the defaults (turned off, other actions) kept apart, so that the defaults a new
 * version brings reach everyone. Each change is also written as the user's `m.push_rules` account
 * data, which is how clients learn of it in `/sync`. Pushers (`/pushers`) are stored and listed
 * here; the pusher sender (pusher-sender.ts) delivers to the HTTP ones.
 */
import type { Clock } from '../core/clock.js';
import { BoundedCache } from '../core/bounded-cache.js';
import { KeyedQueue } from '../core/keyed-queue.js';
import { MatrixError } from '../core/errors.js';
import { parseStoredJson } from '../core/json.js';
import type { JsonObject } from '../rooms/events.js';
import type { Storage } from '../storage/index.js';
import { compileRuleset, type CompiledRuleset } from './evaluator.js';
import { defaultPushRules, type PushAction, type PushCondition, type PushRule, type PushRuleKind } from './default-rules.js';

export const PUSH_RULE_KINDS: readonly PushRuleKind[] = ['override', 'content', 'room', 'sender', 'underride'];
const MAX_OWN_RULES = 500;
const MAX_CONDITIONS = 50;
const MAX_PUSHERS = 100;
const SIMPLE_ACTIONS = new Set(['notify', 'dont_notify', 'coalesce']);

/** What a user changed: their own rules in order, and changes to default rules by `kind/rule_id`. */
interface RuleChanges {
  own: Partial<Record<PushRuleKind, PushRule[]>>;
  defaults: Record<string, { enabled?: boolean; actions?: PushAction[] }>;
}

/** Writes the user's `m.push_rules` account data (the account-data service, without its client checks). */
export type WriteAccountData = (userId: string, type: string, content: JsonObject) => Promise<void>;

export class PushRulesService {
  /** One change at a time per user: read, change, write must not interleave. */
  private readonly queue = new KeyedQueue<string>();
  /** Compiled rules of users who sync: every new event of their rooms is evaluated against them. */
  private readonly compiled = new BoundedCache<string, CompiledRuleset>(10_000);

  constructor(
    private readonly storage: Storage,
    private readonly clock: Clock,
    private readonly writeAccountData: WriteAccountData,
  ) {}

  /** `GET /pushrules/`: every rule, in evaluation order. */
  async ruleset(userId: string): Promise<{ global: Record<PushRuleKind, PushRule[]> }> {
    return effectiveRules(userId, await this.changes(userId));
  }

  /** The user's enabled rules, ready to evaluate events with. */
  async compiledRules(userId: string): Promise<CompiledRuleset> {
    const kept = this.compiled.get(userId);
    if (kept) return kept;
    const generation = this.compiled.generation;
    const rules = compileRuleset(await this.ruleset(userId));
    this.compiled.setIfUnchanged(userId, rules, generation);
    return rules;
  }

  async rule(userId: string, kind: string, ruleId: string): Promise<PushRule> {
    const found = (await this.ruleset(userId)).global[assertKind(kind)].find((rule) => rule.rule_id === ruleId);
    if (!found) throw new MatrixError('M_NOT_FOUND', 'Unknown rule');
    return found;
  }

  /** `PUT /pushrules/global/{kind}/{ruleId}`: adds or replaces one of the user's own rules. */
  async putRule(userId: string, kindText: string, ruleId: string, body: { actions?: unknown; conditions?: unknown; pattern?: unknown }, place: { before?: string | undefined; after?: string | undefined }): Promise<void> {
    const kind = assertKind(kindText);
    if (ruleId.startsWith('.')) throw new MatrixError('M_INVALID_PARAM', "Cannot add new rule_ids that start with '.'", { status: 400 });
    if (ruleId === '' || ruleId.includes('/') || ruleId.length > 255) throw new MatrixError('M_INVALID_PARAM', 'Invalid rule_id', { status: 400 });
    const rule: PushRule = { rule_id: ruleId, default: false, enabled: true, actions: checkedActions(body.actions) };
    if (kind === 'content') {
      if (typeof body.pattern !== 'string' || body.pattern === '') throw new MatrixError('M_MISSING_PARAM', 'Content rules need a pattern', { status: 400 });
      rule.pattern = body.pattern;
    } else if (kind === 'override' || kind === 'underride') {
      rule.conditions = checkedConditions(body.conditions ?? []);
    }
    await this.update(userId, (changes) => {
      const list = [...(changes.own[kind] ?? [])];
      const existing = list.findIndex((r) => r.rule_id === ruleId);
      if (existing >= 0 && place.before === undefined && place.after === undefined) {
        // Kept where it was, enabled state included.
        list[existing] = { ...rule, enabled: list[existing]!.enabled };
      } else {
        if (existing >= 0) list.splice(existing, 1);
        const anchor = place.before ?? place.after;
        let at = 0;
        if (anchor !== undefined) {
          const index = list.findIndex((r) => r.rule_id === anchor);
          if (index < 0) throw new MatrixError('M_NOT_FOUND', `Unknown rule ${anchor} to place it ${place.before !== undefined ? 'before' : 'after'}`);
          at = place.before !== undefined ? index : index + 1;
        }
        if (countOwn(changes) >= MAX_OWN_RULES) throw new MatrixError('M_LIMIT_EXCEEDED', `At most ${MAX_OWN_RULES} push rules`, { status: 400 });
        list.splice(at, 0, rule);
      }
      changes.own[kind] = list;
    });
  }

  /**
   * The user joined `newRoomId`, the upgrade of `oldRoomId`: their own rules about the old room (a
   * room rule named after it, rules whose conditions match its id) are copied for the new one, as
   * Synapse copies them. Rules already there are left alone; nothing is written when there is
   * nothing to copy.
   */
  async copyRoomRules(userId: string, oldRoomId: string, newRoomId: string): Promise<void> {
    const aboutOldRoom = (rule: PushRule): boolean =>
      rule.rule_id === oldRoomId || (rule.conditions ?? []).some((c) => c.kind === 'event_match' && c.key === 'room_id' && c.pattern === oldRoomId);
    const stored = await this.changes(userId);
    if (!PUSH_RULE_KINDS.some((kind) => (stored.own[kind] ?? []).some(aboutOldRoom))) return;
    await this.update(userId, (changes) => {
      for (const kind of PUSH_RULE_KINDS) {
        const list = [...(changes.own[kind] ?? [])];
        for (const rule of list.filter(aboutOldRoom)) {
          const copy: PushRule = { ...rule, rule_id: rule.rule_id.split(oldRoomId).join(newRoomId) };
          if (rule.conditions) copy.conditions = rule.conditions.map((c) => (c.kind === 'event_match' && c.key === 'room_id' && c.pattern === oldRoomId ? { ...c, pattern: newRoomId } : c));
          if (list.some((r) => r.rule_id === copy.rule_id) || countOwn(changes) >= MAX_OWN_RULES) continue;
          list.push(copy);
          changes.own[kind] = list;
        }
      }
    });
  }

  /** `DELETE /pushrules/global/{kind}/{ruleId}`: one of the user's own rules. */
  async deleteRule(userId: string, kindText: string, ruleId: string): Promise<void> {
    const kind = assertKind(kindText);
    await this.update(userId, (changes) => {
      const list = changes.own[kind] ?? [];
      if (!list.some((r) => r.rule_id === ruleId)) {
        if (defaultRule(userId, kind, ruleId)) throw new MatrixError('M_INVALID_PARAM', 'Server default rules cannot be deleted; turn them off instead', { status: 400 });
        throw new MatrixError('M_NOT_FOUND', 'Unknown rule');
      }
      changes.own[kind] = list.filter((r) => r.rule_id !== ruleId);
    });
  }

  /** `PUT .../enabled` and `PUT .../actions`, of the user's own rules and of the defaults. */
  async setAttribute(userId: string, kindText: string, ruleId: string, attribute: 'enabled' | 'actions', value: unknown): Promise<void> {
    const kind = assertKind(kindText);
    if (attribute === 'enabled' && typeof value !== 'boolean') throw new MatrixError('M_INVALID_PARAM', 'enabled must be true or false', { status: 400 });
    const actions = attribute === 'actions' ? checkedActions(value) : undefined;
    await this.update(userId, (changes) => {
      const own = (changes.own[kind] ?? []).find((r) => r.rule_id === ruleId);
      if (own) {
        if (attribute === 'enabled') own.enabled = value as boolean;
        else own.actions = actions!;
        return;
      }
      if (!defaultRule(userId, kind, ruleId)) throw new MatrixError('M_NOT_FOUND', 'Unknown rule');
      const key = `${kind}/${ruleId}`;
      changes.defaults[key] = { ...changes.defaults[key], ...(attribute === 'enabled' ? { enabled: value as boolean } : { actions: actions! }) };
    });
  }

  // ---- pushers ----

  async pushers(userId: string): Promise<JsonObject[]> {
    return (await this.storage.userData.pushersOf(userId)).map((text) => parseStoredJson<JsonObject>(text, {}));
  }

  /** `POST /pushers/set`: `kind: null` removes the pusher; otherwise it is added or replaced. */
  /** Set once the pusher sender exists: a user's pushers were set or removed. */
  pushersChanged: (userId: string) => void = () => undefined;

  async setPusher(userId: string, pusher: JsonObject, deviceId: string | null = null): Promise<void> {
    const appId = pusher.app_id;
    const pushkey = pusher.pushkey;
    if (typeof appId !== 'string' || typeof pushkey !== 'string') throw new MatrixError('M_MISSING_PARAM', 'app_id and pushkey are required', { status: 400 });
    if (pusher.kind === null) {
      await this.storage.userData.deletePusher(userId, appId, pushkey);
      this.pushersChanged(userId);
      return;
    }
    if (pusher.kind !== 'http' && pusher.kind !== 'email') throw new MatrixError('M_INVALID_PARAM', 'kind must be http, email or null', { status: 400 });
    for (const field of ['app_display_name', 'device_display_name', 'lang'] as const) {
      if (typeof pusher[field] !== 'string') throw new MatrixError('M_MISSING_PARAM', `Missing parameter: ${field}`, { status: 400 });
    }
    const data = pusher.data;
    if (typeof data !== 'object' || data === null || Array.isArray(data)) throw new MatrixError('M_MISSING_PARAM', 'Missing parameter: data', { status: 400 });
    if (pusher.kind === 'http') checkGatewayUrl((data as JsonObject).url);
    if ((await this.storage.userData.countPushers(userId)) >= MAX_PUSHERS) throw new MatrixError('M_LIMIT_EXCEEDED', `At most ${MAX_PUSHERS} pushers`, { status: 400 });
    const stored: JsonObject = {
      pushkey,
      kind: pusher.kind,
      app_id: appId,
      app_display_name: pusher.app_display_name,
      device_display_name: pusher.device_display_name,
      lang: pusher.lang,
      data,
      ...(typeof pusher.profile_tag === 'string' ? { profile_tag: pusher.profile_tag } : {}),
    };
    // Without append, the pair (app_id, pushkey) is this user's alone (the spec's default).
    // A new pusher pushes what happens from now on (as Synapse's starts at the newest position).
    const position = await this.storage.rooms.maxStreamOrdering();
    await this.storage.userData.setPusher(userId, appId, pushkey, JSON.stringify(stored), this.clock.now(), pusher.append !== true, deviceId, position);
    this.pushersChanged(userId);
  }

  /** Devices were logged out or deleted: the pushers they set go (as Synapse removes an access token's pushers). */
  async devicesRemoved(userId: string): Promise<void> {
    if ((await this.storage.userData.deletePushersOfRemovedDevices(userId)) > 0) this.pushersChanged(userId);
  }

  private async changes(userId: string): Promise<RuleChanges> {
    const stored = await this.storage.userData.getPushRuleChanges(userId);
    const parsed = stored === undefined ? {} : parseStoredJson<Partial<RuleChanges>>(stored, {});
    return { own: parsed.own ?? {}, defaults: parsed.defaults ?? {} };
  }

  /** Every user's rules are compiled again (another process's changes were not all heard of). */
  forgetAll(): void {
    this.compiled.invalidate();
  }

  /** Another process changed the user's rules: they are compiled again when next needed. */
  forget(userId: string): void {
    this.compiled.delete(userId);
  }

  private async update(userId: string, change: (changes: RuleChanges) => void): Promise<void> {
    await this.queue.run(userId, async () => {
      const changes = await this.changes(userId);
      change(changes);
      await this.storage.userData.setPushRuleChanges(userId, JSON.stringify(changes));
      this.compiled.delete(userId);
      await this.writeAccountData(userId, 'm.push_rules', effectiveRules(userId, changes) as unknown as JsonObject);
    });
  }
}

/**
 * The rules in evaluation order: `.m.rule.master` first, then the user's override rules, the other
 * default override rules; the user's content, room and sender rules; the user's underride rules,
 * then the default ones (as Synapse orders them). Changes to defaults applied.
 */
function effectiveRules(userId: string, changes: RuleChanges): { global: Record<PushRuleKind, PushRule[]> } {
  const defaults = defaultPushRules(userId).global;
  const changed = (kind: PushRuleKind, rule: PushRule): PushRule => {
    const change = changes.defaults[`${kind}/${rule.rule_id}`];
    return change ? { ...rule, ...(change.enabled !== undefined ? { enabled: change.enabled } : {}), ...(change.actions !== undefined ? { actions: change.actions } : {}) } : rule;
  };
  const own = (kind: PushRuleKind): PushRule[] =>
    (changes.own[kind] ?? []).map((rule) => {
      if (kind === 'room') return { ...rule, conditions: [{ kind: 'event_match', key: 'room_id', pattern: rule.rule_id }] };
      if (kind === 'sender') return { ...rule, conditions: [{ kind: 'event_match', key: 'user_id', pattern: rule.rule_id }] };
      return rule;
    });
  const overrides = defaults.override.map((rule) => changed('override', rule));
  return {
    global: {
      override: [...overrides.filter((r) => r.rule_id === '.m.rule.master'), ...own('override'), ...overrides.filter((r) => r.rule_id !== '.m.rule.master')],
      content: [...own('content'), ...defaults.content.map((rule) => changed('content', rule))],
      room: own('room'),
      sender: own('sender'),
      underride: [...own('underride'), ...defaults.underride.map((rule) => changed('underride', rule))],
    },
  };
}

/** An HTTP pusher's URL: http or https, with the path of the Push Gateway API (Synapse checks the same). */
function checkGatewayUrl(url: unknown): void {
  if (typeof url !== 'string') throw new MatrixError('M_MISSING_PARAM', "'url' required in data for HTTP pushers", { status: 400 });
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new MatrixError('M_INVALID_PARAM', "'url' must be a URL", { status: 400 });
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw new MatrixError('M_INVALID_PARAM', "'url' must be http or https", { status: 400 });
  if (parsed.pathname !== '/_matrix/push/v1/notify') throw new MatrixError('M_INVALID_PARAM', "'url' must have a path of '/_matrix/push/v1/notify'", { status: 400 });
}

function defaultRule(userId: string, kind: PushRuleKind, ruleId: string): PushRule | undefined {
  return defaultPushRules(userId).global[kind].find((rule) => rule.rule_id === ruleId);
}

function countOwn(changes: RuleChanges): number {
  return PUSH_RULE_KINDS.reduce((sum, kind) => sum + (changes.own[kind]?.length ?? 0), 0);
}

function assertKind(kind: string): PushRuleKind {
  if (!(PUSH_RULE_KINDS as readonly string[]).includes(kind)) throw new MatrixError('M_INVALID_PARAM', `Unknown push rule kind ${kind}`, { status: 400 });
  return kind as PushRuleKind;
}

function checkedActions(actions: unknown): PushAction[] {
  if (!Array.isArray(actions)) throw new MatrixError('M_MISSING_PARAM', 'Missing actions', { status: 400 });
  if (actions.length > 20) throw new MatrixError('M_INVALID_PARAM', 'Too many actions', { status: 400 });
  return actions.map((action) => {
    if (typeof action === 'string' && SIMPLE_ACTIONS.has(action)) return action;
    if (typeof action === 'object' && action !== null && typeof (action as JsonObject).set_tweak === 'string') {
      const { set_tweak: tweak, value } = action as JsonObject;
      return value === undefined ? { set_tweak: tweak as string } : { set_tweak: tweak as string, value: value as string | boolean };
    }
    throw new MatrixError('M_INVALID_PARAM', `Unrecognised action ${JSON.stringify(action)}`, { status: 400 });
  });
}

function checkedConditions(conditions: unknown): PushCondition[] {
  if (!Array.isArray(conditions) || conditions.length > MAX_CONDITIONS) throw new MatrixError('M_INVALID_PARAM', `conditions must be a list of at most ${MAX_CONDITIONS}`, { status: 400 });
  return conditions.map((condition) => {
    if (typeof condition !== 'object' || condition === null || typeof (condition as JsonObject).kind !== 'string') {
      throw new MatrixError('M_INVALID_PARAM', 'Each condition needs a kind', { status: 400 });
    }
    return condition as PushCondition;
  });
}
