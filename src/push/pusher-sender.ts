/**
 * Delivery to push gateways (HTTP pushers), as Synapse's HTTP pusher does it. Each pusher keeps
 * the stream position it has pushed up to, in the database: after a commit it reads the user's
 * newer events (rooms the user is joined to, invites of the user), evaluates the user's push rules
 * on each, and POSTs those whose actions say `notify` to the pusher's `data.url`, one at a time
 * and in order, moving its position past each. Nothing of this runs in a send's transaction or on
 * its latency path, and a restart resumes from the stored position (nothing lost, nothing pushed
 * twice unless the process died between a gateway's answer and the write after it).
 *
 * A failed push is retried after `minRetryMs`, doubling up to `maxRetryMs`; a pusher that has been
 * failing for `giveUpAfterMs` skips the notification it is stuck on (so that a gateway fixed days
 * later is not flooded with stale ones). A gateway answering `rejected: [pushkey]` removes the
 * pusher. A read receipt sends a counts-only notification when the badge changed.
 *
 * Memory is bounded: no queue of events per pusher (they are read from the database, a batch at a
 * time); at most `maxConcurrent` requests to gateways at once.
 */
import type { FastifyBaseLogger } from 'fastify';
import type { Clock } from '../core/clock.js';
import { parseStoredJson } from '../core/json.js';
import type { JsonObject } from '../rooms/events.js';
import type { RoomCache } from '../rooms/room-cache.js';
import type { RoomSnapshot } from '../rooms/room-snapshot.js';
import type { Storage } from '../storage/index.js';
import type { EventRow } from '../storage/rooms-store.js';
import type { PusherRow } from '../storage/user-data-store.js';
import type { StreamCounter } from '../sync/stream.js';
import { RoomEvaluator, type UnreadCounts } from '../sync/unread.js';
import { evaluatePush, type CompiledRuleset, type PushOutcome } from './evaluator.js';
import { PushGatewayError, type PushGatewayClient } from './gateway-client.js';

/** Events read per pass of a pusher. */
const BATCH = 20;
/** The badge counts at most this many rooms (a bot in thousands of rooms would count each). */
const MAX_BADGE_ROOMS = 500;
/** How often the pushers are read again (another process may have set or removed some). */
const RELOAD_MS = 15_000;
const DEFAULT_NOTIFICATION_LEVELS = { room: 50 };

export interface PusherSenderOptions {
  minRetryMs: number;
  maxRetryMs: number;
  giveUpAfterMs: number;
  maxConcurrent: number;
  groupUnreadCountByRoom: boolean;
}

export interface PusherSenderDeps {
  storage: Storage;
  cache: RoomCache;
  stream: StreamCounter;
  clock: Clock;
  client: PushGatewayClient;
  unread: UnreadCounts;
  rulesOf: (userId: string) => Promise<CompiledRuleset>;
  ignoredOf: (userId: string) => Promise<ReadonlySet<string>>;
}

interface PusherState {
  key: string;
  row: PusherRow;
  url: string;
  eventIdOnly: boolean;
  /** `data` without `url`, as devices see it. */
  data: JsonObject;
  position: number;
  failingSince: number | null;
  backoffMs: number;
  running: boolean;
  /** Kicked while running: one more pass when this one ends. */
  again: boolean;
  timer: NodeJS.Timeout | undefined;
  /** A receipt moved: send the badge when idle. */
  badgeDue: boolean;
  lastBadge: number | undefined;
  removed: boolean;
}

export class PusherSender {
  private readonly pushers = new Map<string, PusherState>();
  private readonly byUser = new Map<string, Set<string>>();
  private stopped = true;
  private reloadTimer: NodeJS.Timeout | undefined;
  private active = 0;
  private readonly waiting: Array<() => void> = [];
  log: FastifyBaseLogger | undefined;

  constructor(
    private readonly deps: PusherSenderDeps,
    private readonly options: PusherSenderOptions,
  ) {}

  get running(): boolean {
    return !this.stopped;
  }

  async start(): Promise<void> {
    this.stopped = false;
    await this.reload();
    this.reloadTimer = setInterval(() => void this.reload().catch((err: unknown) => this.log?.error({ err }, 'push: reading the pushers failed')), RELOAD_MS);
    this.reloadTimer.unref();
  }

  stop(): void {
    this.stopped = true;
    clearInterval(this.reloadTimer);
    // A pass under way ends at its next step (its state is no longer the one a new start reads).
    for (const state of this.pushers.values()) {
      state.removed = true;
      clearTimeout(state.timer);
    }
    this.pushers.clear();
    this.byUser.clear();
  }

  /** After a local commit: the pushers of the room's members and of an invited user look for new events. */
  readonly commitListener = (events: ReadonlyArray<{ type: string; stateKey?: string | undefined }>, room: RoomSnapshot): void => {
    if (this.stopped || this.byUser.size === 0) return;
    const members = room.joinedUsers();
    const smaller = members.size < this.byUser.size;
    for (const userId of smaller ? members : this.byUser.keys()) if (smaller ? this.byUser.has(userId) : members.has(userId)) this.kickUser(userId);
    for (const event of events) if (event.type === 'm.room.member' && event.stateKey !== undefined) this.kickUser(event.stateKey);
  };

  /** Another process committed events: every pusher looks (one indexed query each). */
  lookAgain(): void {
    for (const state of this.pushers.values()) this.kick(state);
  }

  /** A user's read receipt moved: their pushers send the badge when it changed. */
  receiptMoved(userId: string): void {
    for (const key of this.byUser.get(userId) ?? []) {
      const state = this.pushers.get(key);
      if (!state) continue;
      state.badgeDue = true;
      this.kick(state);
    }
  }

  /** The user's pushers changed here (set, removed): read again. */
  pushersChanged(userId: string): void {
    if (this.stopped) return;
    void this.reload(userId).catch((err: unknown) => this.log?.error({ err }, 'push: reading the pushers failed'));
  }

  private kickUser(userId: string): void {
    for (const key of this.byUser.get(userId) ?? []) {
      const state = this.pushers.get(key);
      if (state) this.kick(state);
    }
  }

  /** Reads the HTTP pushers (one user's, or everyone's) and starts a pass of each. */
  private async reload(userId?: string): Promise<void> {
    const rows = (await this.deps.storage.userData.pushersOfKind('http')).filter((row) => userId === undefined || row.userId === userId);
    if (this.stopped) return;
    const seen = new Set<string>();
    for (const row of rows) {
      const key = `${row.userId}\u0000${row.appId}\u0000${row.pushkey}`;
      seen.add(key);
      const content = parseStoredJson<JsonObject>(row.content, {});
      const data = (typeof content.data === 'object' && content.data !== null && !Array.isArray(content.data) ? content.data : {}) as JsonObject;
      const { url, ...dataMinusUrl } = data;
      const existing = this.pushers.get(key);
      if (existing) {
        existing.row = row;
        existing.url = typeof url === 'string' ? url : '';
        existing.data = dataMinusUrl;
        existing.eventIdOnly = data.format === 'event_id_only';
        this.kick(existing);
        continue;
      }
      const state: PusherState = {
        key, row, url: typeof url === 'string' ? url : '', data: dataMinusUrl, eventIdOnly: data.format === 'event_id_only',
        position: row.lastStreamOrdering, failingSince: row.failingSince, backoffMs: this.options.minRetryMs,
        running: false, again: false, timer: undefined, badgeDue: false, lastBadge: undefined, removed: false,
      };
      this.pushers.set(key, state);
      let keys = this.byUser.get(row.userId);
      if (!keys) this.byUser.set(row.userId, (keys = new Set()));
      keys.add(key);
      this.kick(state);
    }
    for (const [key, state] of this.pushers) {
      if (seen.has(key) || (userId !== undefined && state.row.userId !== userId)) continue;
      this.forget(state);
    }
  }

  private forget(state: PusherState): void {
    state.removed = true;
    clearTimeout(state.timer);
    this.pushers.delete(state.key);
    const keys = this.byUser.get(state.row.userId);
    keys?.delete(state.key);
    if (keys?.size === 0) this.byUser.delete(state.row.userId);
  }

  private kick(state: PusherState): void {
    if (this.stopped || state.removed) return;
    // Waiting out a failure: the retry timer runs the next pass.
    if (state.timer !== undefined) return;
    if (state.running) {
      state.again = true;
      return;
    }
    state.running = true;
    void this.run(state)
      .catch((err: unknown) => this.log?.error({ err, user: state.row.userId, app_id: state.row.appId }, 'push: a pusher pass failed'))
      .finally(() => {
        state.running = false;
        if (state.again && state.timer === undefined) {
          state.again = false;
          this.kick(state);
        }
      });
  }

  /** Pushes what is new, a batch at a time, until caught up or a push fails. */
  private async run(state: PusherState): Promise<void> {
    const { storage, stream } = this.deps;
    const userId = state.row.userId;
    for (;;) {
      state.again = false;
      if (this.stopped || state.removed) return;
      const upTo = stream.current;
      const rows = await storage.rooms.pushCandidates(userId, state.position, upTo, BATCH);
      if (rows.length === 0) {
        // Caught up: the position moves to now, so a room joined later starts at its join.
        if (upTo > state.position) {
          state.position = upTo;
          if (!(await storage.userData.setPusherProgress(userId, state.row.appId, state.row.pushkey, state.position, state.failingSince))) {
            this.forget(state);
            return;
          }
        }
        break;
      }
      const rules = await this.deps.rulesOf(userId);
      const ignored = await this.deps.ignoredOf(userId);
      for (const row of rows) {
        if (this.stopped || state.removed) return;
        const room = await this.deps.cache.room(row.room_id);
        const outcome = this.evaluate(row, room, userId, rules, ignored);
        if (outcome.notify) {
          const delivered = await this.pushEvent(state, row, room, outcome);
          if (!delivered) return;
        }
        state.position = Number(row.stream_ordering);
      }
      if (!(await storage.userData.setPusherProgress(userId, state.row.appId, state.row.pushkey, state.position, state.failingSince))) {
        this.forget(state);
        return;
      }
      if (rows.length < BATCH) break;
    }
    if (state.badgeDue) {
      state.badgeDue = false;
      await this.sendBadge(state);
    }
  }

  private evaluate(row: EventRow, room: RoomSnapshot | undefined, userId: string, rules: CompiledRuleset, ignored: ReadonlySet<string>): PushOutcome {
    if (row.redacted_by !== null) return { notify: false, highlight: false };
    const event = { type: row.type, sender: row.sender, room_id: row.room_id, state_key: row.state_key ?? undefined, content: parseStoredJson<Record<string, unknown>>(row.content, {}) };
    if (room) return new RoomEvaluator(room, userId, rules, ignored).evaluate(event);
    // A room this server does not hold (an invite over federation): what the conditions ask of it is unknown.
    if (ignored.has(row.sender)) return { notify: false, highlight: false };
    return evaluatePush(rules, event, { memberCount: 0, displayName: undefined, senderPowerLevel: 0, notificationLevels: DEFAULT_NOTIFICATION_LEVELS });
  }

  /** One notification; true when it is done with (delivered, rejected or given up on). */
  private async pushEvent(state: PusherState, row: EventRow, room: RoomSnapshot | undefined, outcome: PushOutcome): Promise<boolean> {
    const tweaks = outcome.tweaks ?? {};
    const badge = await this.badge(state.row.userId);
    const content = parseStoredJson<JsonObject>(row.content, {});
    // Synapse's priority: high for encrypted events (they may be anything) and for those that highlight or sound.
    const prio = row.type === 'm.room.encrypted' || tweaks.highlight === true || tweaks.sound !== undefined ? 'high' : 'low';
    const device = { app_id: state.row.appId, pushkey: state.row.pushkey, pushkey_ts: Math.floor(state.row.createdTs / 1000), data: state.data, tweaks };
    let notification: JsonObject;
    if (state.eventIdOnly) {
      notification = { event_id: row.event_id, room_id: row.room_id, counts: { unread: badge }, prio, devices: [device] };
    } else {
      notification = {
        id: row.event_id, event_id: row.event_id, room_id: row.room_id, type: row.type, sender: row.sender, prio,
        counts: { unread: badge }, devices: [device], content,
        ...this.context(row, room, state.row.userId),
      };
    }
    try {
      const rejected = await this.limited(() => this.deps.client.notify(state.url, { notification }));
      if (rejected.includes(state.row.pushkey)) {
        await this.remove(state, 'the gateway rejected its pushkey');
        return false;
      }
      state.lastBadge = badge;
      if (state.failingSince !== null) {
        state.failingSince = null;
        state.backoffMs = this.options.minRetryMs;
      }
      // Moved past at once: a restart must not push it again.
      state.position = Number(row.stream_ordering);
      if (!(await this.deps.storage.userData.setPusherProgress(state.row.userId, state.row.appId, state.row.pushkey, state.position, null))) {
        this.forget(state);
        return false;
      }
      return true;
    } catch (err) {
      if (!(err instanceof PushGatewayError)) throw err;
      return this.failed(state, row, err);
    }
  }

  private async failed(state: PusherState, row: EventRow, err: Error): Promise<boolean> {
    const now = this.deps.clock.now();
    if (state.failingSince === null) state.failingSince = now;
    if (now - state.failingSince >= this.options.giveUpAfterMs) {
      this.log?.warn({ user: state.row.userId, app_id: state.row.appId, event_id: row.event_id, err: err.message }, 'push: giving up on a notification');
      state.failingSince = null;
      state.backoffMs = this.options.minRetryMs;
      return true;
    }
    await this.deps.storage.userData.setPusherProgress(state.row.userId, state.row.appId, state.row.pushkey, state.position, state.failingSince);
    this.log?.info({ user: state.row.userId, app_id: state.row.appId, retry_in_ms: state.backoffMs, err: err.message }, 'push: a push failed; retrying later');
    state.timer = setTimeout(() => {
      state.timer = undefined;
      this.kick(state);
    }, state.backoffMs);
    state.timer.unref();
    state.backoffMs = Math.min(state.backoffMs * 2, this.options.maxRetryMs);
    return false;
  }

  private async remove(state: PusherState, why: string): Promise<void> {
    this.log?.info({ user: state.row.userId, app_id: state.row.appId }, `push: pusher removed: ${why}`);
    await this.deps.storage.userData.deletePusher(state.row.userId, state.row.appId, state.row.pushkey);
    this.forget(state);
  }

  /** Counts-only notification after a receipt, when the badge changed; not retried (the next one carries it). */
  private async sendBadge(state: PusherState): Promise<void> {
    const badge = await this.badge(state.row.userId);
    if (badge === state.lastBadge) return;
    const device = { app_id: state.row.appId, pushkey: state.row.pushkey, pushkey_ts: Math.floor(state.row.createdTs / 1000), data: state.data };
    try {
      const rejected = await this.limited(() => this.deps.client.notify(state.url, { notification: { id: '', type: null, sender: '', counts: { unread: badge }, devices: [device] } }));
      if (rejected.includes(state.row.pushkey)) await this.remove(state, 'the gateway rejected its pushkey');
      else state.lastBadge = badge;
    } catch (err) {
      if (!(err instanceof PushGatewayError)) throw err;
      this.log?.info({ user: state.row.userId, app_id: state.row.appId, err: err.message }, 'push: sending the badge failed');
    }
  }

  /** The badge: rooms with unread notifications (or the notifications, per configuration). */
  private async badge(userId: string): Promise<number> {
    const { cache, unread, stream } = this.deps;
    const ignored = await this.deps.ignoredOf(userId);
    const upTo = stream.current;
    let badge = 0;
    let looked = 0;
    for (const [roomId, entry] of await cache.roomsOf(userId)) {
      if (entry.membership !== 'join') continue;
      if (++looked > MAX_BADGE_ROOMS) break;
      const room = await cache.room(roomId);
      if (!room) continue;
      const counts = await unread.countsAt(room, userId, upTo, ignored);
      if (counts.notification_count > 0) badge += this.options.groupUnreadCountByRoom ? 1 : counts.notification_count;
    }
    return badge;
  }

  /** Room name, alias and sender's display name (Synapse's `get_context_for_event`), membership for member events. */
  private context(row: EventRow, room: RoomSnapshot | undefined, userId: string): JsonObject {
    const context: JsonObject = {};
    // The room's name, else its canonical alias (as Synapse names a room in a push; it does not
    // fall back to members' names there either).
    const name = room?.get('m.room.name')?.content.name;
    const alias = room?.get('m.room.canonical_alias')?.content.alias;
    if (typeof name === 'string' && name !== '') context.room_name = name;
    else if (typeof alias === 'string') context.room_name = alias;
    if (typeof alias === 'string') context.room_alias = alias;
    const displayName = room?.get('m.room.member', row.sender)?.content.displayname;
    if (typeof displayName === 'string') context.sender_display_name = displayName;
    if (row.type === 'm.room.member' && row.state_key !== null) {
      const membership = parseStoredJson<JsonObject>(row.content, {}).membership;
      if (typeof membership === 'string') context.membership = membership;
      context.user_is_target = row.state_key === userId;
    }
    return context;
  }

  /** At most `maxConcurrent` gateway requests at once, the rest wait their turn. */
  private async limited<T>(work: () => Promise<T>): Promise<T> {
    if (this.active >= this.options.maxConcurrent) await new Promise<void>((resolve) => this.waiting.push(resolve));
    this.active++;
    try {
      return await work();
    } finally {
      this.active--;
      this.waiting.shift()?.();
    }
  }
}
