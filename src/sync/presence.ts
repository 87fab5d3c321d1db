/**
 * Presence (`/presence/{userId}/status`, `m.presence` in sync, `m.presence` EDUs): whether a user
 * is online, unavailable or offline, and their status message. Local users are online while their
 * clients sync (`set_presence`, default online) and go offline a minute after the last sync ends;
 * a status set with PUT stays until changed. Each change takes a stream position, so a sync sees
 * the changes after its token of the users it shares a room with. `presence.enabled: false` (as in
 * Synapse) turns all of it off: everyone is offline and nothing is sent.
 */
import type { Clock } from '../core/clock.js';
import { MatrixError } from '../core/errors.js';
import type { JsonObject, StoredEvent } from '../rooms/events.js';
import { serverOf } from '../rooms/ids.js';
import type { RoomCache } from '../rooms/room-cache.js';
import type { RoomSnapshot } from '../rooms/room-snapshot.js';
import type { PresenceRow, Storage } from '../storage/index.js';
import type { Notifier } from './notifier.js';
import { writeAtNextPosition, type StreamCounter } from './stream.js';

export type PresenceState = 'online' | 'unavailable' | 'offline';
const STATES = new Set<string>(['online', 'unavailable', 'offline']);
/** A user whose last sync ended this long ago is offline (Synapse: 30 s after the sync timeout). */
export const IDLE_AFTER_MS = 60_000;
/** At most this many presence changes in one sync answer. */
const MAX_PER_SYNC = 500;
const MAX_STATUS_MSG = 1024;

/** Where local users' changes go to other servers. */
export interface RemotePresence {
  send(servers: Iterable<string>, edu: JsonObject): void;
}

export class PresenceService {
  /** Local users whose client syncs now or did recently: when it last did, how many syncs are open, their presence. */
  private readonly active = new Map<string, { lastSeen: number; open: number; presence?: string }>();
  /** The stream position of the newest presence change (read once, then kept). */
  private latest: number | undefined;

  constructor(
    private readonly storage: Storage,
    private readonly stream: StreamCounter,
    private readonly notifier: Notifier,
    private readonly cache: RoomCache,
    private readonly clock: Clock,
    private readonly serverName: string,
    readonly enabled: boolean,
    private readonly remote: RemotePresence | undefined,
  ) {}

  /** `GET /presence/{userId}/status`: for the user themself and those who share a room with them. */
  async get(requester: string, userId: string): Promise<JsonObject> {
    if (serverOf(userId) === this.serverName && !(await this.storage.users.get(userId))) throw new MatrixError('M_NOT_FOUND', 'Unknown user');
    if (requester !== userId && this.enabled && !(await this.shareRoom(requester, userId))) {
      throw new MatrixError('M_FORBIDDEN', 'You are not allowed to see their presence.');
    }
    const row = this.enabled ? await this.storage.userData.getPresence(userId) : undefined;
    return row ? this.contentOf(row) : { presence: 'offline' };
  }

  /** `PUT /presence/{userId}/status`. */
  async set(userId: string, presence: string, statusMsg: string | undefined): Promise<void> {
    if (!STATES.has(presence)) throw new MatrixError('M_INVALID_PARAM', `presence must be online, unavailable or offline, not ${presence}`, { status: 400 });
    if (statusMsg !== undefined && statusMsg.length > MAX_STATUS_MSG) throw new MatrixError('M_INVALID_PARAM', `status_msg is longer than ${MAX_STATUS_MSG} characters`, { status: 400 });
    if (!this.enabled) return;
    const previous = await this.storage.userData.getPresence(userId);
    await this.change(userId, presence as PresenceState, statusMsg ?? previous?.status_msg ?? null, this.clock.now());
  }

  /**
   * A sync of `userId` starts with `set_presence` (default online): online or unavailable is
   * taken on when different; offline changes nothing (the client asked not to be marked online).
   * Returns what to call when the sync ends.
   */
  async syncStarted(userId: string, setPresence: PresenceState | undefined): Promise<() => void> {
    if (!this.enabled) return () => {};
    const now = this.clock.now();
    const entry = this.active.get(userId) ?? { lastSeen: now, open: 0 };
    entry.open += 1;
    entry.lastSeen = now;
    this.active.set(userId, entry);
    const wanted = setPresence ?? 'online';
    // Known in memory after the first sync: a sync costs no read for this. The change is written
    // with the others queued meanwhile in one commit (thousands of bots starting at once must not
    // cost a commit each), before this sync looks: it answers with the user's own new presence,
    // and the next sync, from its token, does not bring it again (as on Synapse).
    if (wanted !== 'offline' && entry.presence !== wanted) {
      entry.presence = wanted;
      const row = await this.storage.userData.getPresence(userId);
      if (!row || row.presence !== wanted) await this.queueChange(userId, wanted, row?.status_msg ?? null, now);
    }
    return () => {
      entry.open = Math.max(0, entry.open - 1);
      entry.lastSeen = this.clock.now();
    };
  }

  /** Local users whose clients stopped syncing a while ago go offline. Run every few seconds. */
  async sweepIdle(): Promise<void> {
    const now = this.clock.now();
    for (const [userId, entry] of this.active) {
      if (entry.open > 0 || now - entry.lastSeen < IDLE_AFTER_MS) continue;
      this.active.delete(userId);
      const row = await this.storage.userData.getPresence(userId);
      if (row && row.presence !== 'offline') await this.change(userId, 'offline', row.status_msg, row.last_active_ts);
    }
  }

  /** An `m.presence` EDU from `origin`: updates of that server's users only. */
  async receiveRemote(origin: string, content: JsonObject): Promise<void> {
    if (!this.enabled || !Array.isArray(content.push)) return;
    for (const update of content.push.slice(0, 1000) as unknown[]) {
      if (typeof update !== 'object' || update === null) continue;
      const { user_id: userId, presence, status_msg: statusMsg, last_active_ago: ago } = update as JsonObject;
      if (typeof userId !== 'string' || serverOf(userId) !== origin || typeof presence !== 'string' || !STATES.has(presence)) continue;
      const lastActive = this.clock.now() - (typeof ago === 'number' && ago >= 0 ? ago : 0);
      const message = typeof statusMsg === 'string' ? statusMsg.slice(0, MAX_STATUS_MSG) : null;
      await this.change(userId, presence as PresenceState, message, lastActive, false);
    }
  }

  /**
   * The `m.presence` events a sync answer carries: with a token, the changes after it of the
   * viewer and the users sharing a room with them, and the presence of `newlyShared` (users the
   * viewer came to share a room with since the token, whose last change may be older: as
   * Synapse, a newly joined room or member comes with their presence); without one, the presence
   * of everyone sharing a room, the viewer included. A user with no presence yet is offline.
   * `peekedMembers`: the members of a room the viewer peeks into, whose changes count too.
   */
  async forSync(viewer: string, after: number | undefined, upTo: number, newlyShared: ReadonlySet<string> = new Set(), peekedMembers: ReadonlySet<string> = new Set()): Promise<JsonObject[]> {
    if (!this.enabled) return [];
    // Most syncs come after no presence change at all: known without a query.
    this.latest ??= await this.storage.userData.latestPresenceChange();
    if (after !== undefined && this.latest <= after && newlyShared.size === 0) return [];
    const rows = new Map<string, PresenceRow>();
    if (after === undefined) {
      for (const row of await this.storage.userData.presenceOf([...(await this.cache.roommates(viewer))].slice(0, MAX_PER_SYNC))) rows.set(row.user_id, row);
    } else {
      // One's own changes come too (Synapse's do): the next sync after going online says so once.
      // A user's own change never wakes their syncs (see announce), so this cannot loop.
      if (this.latest > after) {
        for (const row of await this.storage.userData.presenceChanged(after, upTo, MAX_PER_SYNC)) {
          if (row.user_id === viewer || peekedMembers.has(row.user_id) || (await this.shareRoom(viewer, row.user_id))) rows.set(row.user_id, row);
        }
      }
      const missing = [...newlyShared].filter((user) => user !== viewer && !rows.has(user)).slice(0, Math.max(0, MAX_PER_SYNC - rows.size));
      const found = new Map((await this.storage.userData.presenceOf(missing)).map((row) => [row.user_id, row]));
      for (const user of missing) {
        const row = found.get(user);
        // Only what had happened by this sync's position (a later change comes with the next).
        rows.set(user, row && Number(row.stream_ordering) <= upTo ? row : { user_id: user, presence: 'offline', status_msg: null, last_active_ts: 0, stream_ordering: 0 });
      }
    }
    return [...rows.values()].slice(0, MAX_PER_SYNC).map((row) => ({ type: 'm.presence', sender: row.user_id, content: this.contentOf(row) }));
  }

  /**
   * The legacy APIs' presence events (`/initialSync`, `/rooms/{roomId}/initialSync`): one per
   * user, with `user_id` and `status_msg` in the content as those APIs had them. A change queued by
   * a sync that has not been written yet counts already (a user sees themself online at once).
   */
  async legacyEvents(userIds: readonly string[]): Promise<JsonObject[]> {
    if (!this.enabled || userIds.length === 0) return [];
    const rows = new Map((await this.storage.userData.presenceOf([...userIds])).map((row) => [row.user_id, row]));
    return userIds.slice(0, MAX_PER_SYNC).map((userId) => {
      const queued = this.queued.get(userId);
      const stored = rows.get(userId);
      const row: PresenceRow | undefined = queued
        ? { ...(stored ?? ({} as PresenceRow)), user_id: userId, presence: queued.presence, status_msg: queued.statusMsg, last_active_ts: queued.lastActive }
        : stored;
      const content = row ? this.contentOf(row) : { presence: 'offline' };
      return { type: 'm.presence', sender: userId, content: { status_msg: null, last_active_ago: null, ...content, user_id: userId } };
    });
  }

  private readonly queued = new Map<string, { presence: PresenceState; statusMsg: string | null; lastActive: number }>();
  /** Those waiting for the queued changes to be written. */
  private queuedWaiters: (() => void)[] = [];
  private flushing: Promise<void> | undefined;

  /**
   * A change made by syncing, written with the others queued meanwhile in one transaction;
   * resolves once written (or failed: presence is best effort).
   */
  private queueChange(userId: string, presence: PresenceState, statusMsg: string | null, lastActive: number): Promise<void> {
    this.queued.set(userId, { presence, statusMsg, lastActive });
    const written = new Promise<void>((resolve) => this.queuedWaiters.push(resolve));
    this.flushing ??= new Promise<void>((resolve) => setImmediate(resolve)).then(() => this.flushQueued());
    return written;
  }

  private async flushQueued(): Promise<void> {
    const batch = [...this.queued];
    this.queued.clear();
    const waiters = this.queuedWaiters;
    this.queuedWaiters = [];
    try {
      let last = 0;
      await this.stream.write(this.storage, async (stores, effects) => {
        for (const [userId, change] of batch) {
          last = this.stream.next();
          effects.roommatesOf.add(userId);
          await stores.userData.setPresence({ user_id: userId, presence: change.presence, status_msg: change.statusMsg, last_active_ts: change.lastActive, stream_ordering: last });
        }
      });
      this.latest = Math.max(this.latest ?? 0, last);
      this.stream.commit(last);
      for (const [userId, change] of batch) await this.announce(userId, change.presence, change.statusMsg, change.lastActive, true);
    } catch {
      // Presence is best effort: a sync that failed to mark its user online is followed by others.
      for (const [userId] of batch) {
        const entry = this.active.get(userId);
        if (entry) delete entry.presence;
      }
    } finally {
      for (const resolve of waiters) resolve();
      this.flushing = undefined;
      if (this.queued.size > 0) this.flushing = this.flushQueued();
    }
  }

  private async change(userId: string, presence: PresenceState, statusMsg: string | null, lastActive: number, local = true): Promise<void> {
    const entry = this.active.get(userId);
    if (entry) entry.presence = presence;
    await writeAtNextPosition(
      this.storage,
      this.stream,
      (stores, position, effects) => {
        effects.roommatesOf.add(userId);
        return stores.userData.setPresence({ user_id: userId, presence, status_msg: statusMsg, last_active_ts: lastActive, stream_ordering: position });
      },
      (position) => (this.latest = Math.max(this.latest ?? 0, position)),
    );
    await this.announce(userId, presence, statusMsg, lastActive, local);
  }

  /** Another process changed someone's presence: the newest position is read again when next needed. */
  forgetLatest(): void {
    this.latest = undefined;
  }

  /**
   * Another process changed the user's presence (it saw them go idle there): a sync here sets it
   * again rather than trusting what this process last set.
   */
  forgetSetBy(userId: string): void {
    const entry = this.active.get(userId);
    if (entry) delete entry.presence;
  }

  /**
   * Members who just joined a room (its committed events, the room as it is after them): other
   * servers only hear of a change, so a new roommate on another server would not know anyone's
   * presence until it changes. As Synapse: a local user who joins has their presence sent to the
   * room's other servers; a remote user who joins has their server sent the presence of our users
   * in the room. Only presence we have (a user never seen is offline anyway); best effort.
   */
  membersJoined(events: readonly StoredEvent[], room: RoomSnapshot): void {
    if (!this.enabled || !this.remote) return;
    const joined = events.filter(
      (event) =>
        event.type === 'm.room.member' && event.stateKey !== undefined && !event.outlier && event.rejected === undefined && !event.softFailed && event.backfilledAt === undefined &&
        event.content.membership === 'join' && event.prevContent?.membership !== 'join' && room.isJoined(event.stateKey),
    );
    if (joined.length === 0) return;
    void this.sendOnJoin(joined.map((event) => event.stateKey!), room).catch(() => undefined);
  }

  private async sendOnJoin(joinedUsers: readonly string[], room: RoomSnapshot): Promise<void> {
    const otherServers = [...room.joinedServers()].filter((server) => server !== this.serverName);
    if (otherServers.length === 0) return;
    const localJoiners = joinedUsers.filter((userId) => serverOf(userId) === this.serverName);
    if (localJoiners.length > 0) this.sendRows(otherServers, await this.storage.userData.presenceOf(localJoiners));
    const remoteServers = new Set(joinedUsers.map(serverOf).filter((server) => server !== this.serverName));
    if (remoteServers.size === 0) return;
    const locals = [...room.joinedUsers()].filter((userId) => serverOf(userId) === this.serverName).slice(0, MAX_PER_SYNC);
    this.sendRows(remoteServers, await this.storage.userData.presenceOf(locals));
  }

  private sendRows(servers: Iterable<string>, rows: readonly PresenceRow[]): void {
    if (rows.length === 0) return;
    const push = rows.map((row) => this.eduContent(row.user_id, row.presence as PresenceState, row.status_msg, Number(row.last_active_ts)));
    this.remote?.send(servers, { edu_type: 'm.presence', content: { push } });
  }

  private eduContent(userId: string, presence: PresenceState, statusMsg: string | null, lastActive: number): JsonObject {
    const content: JsonObject = { user_id: userId, presence, last_active_ago: Math.max(0, this.clock.now() - lastActive), currently_active: presence === 'online' };
    if (statusMsg !== null) content.status_msg = statusMsg;
    return content;
  }

  /** Wakes the roommates' syncs and, for a local user, tells the servers in shared rooms. */
  private async announce(userId: string, presence: PresenceState, statusMsg: string | null, lastActive: number, local: boolean): Promise<void> {
    const roommates = await this.cache.roommates(userId);
    const wake = [...roommates].filter((user) => user !== userId && serverOf(user) === this.serverName);
    // Those peeking into the user's rooms see their presence too.
    for (const [roomId, entry] of await this.cache.roomsOf(userId)) if (entry.membership === 'join') wake.push(...this.notifier.peekersOf(roomId));
    this.notifier.notify(wake);
    if (local && this.remote) {
      const servers = new Set([...roommates].map(serverOf).filter((server) => server !== this.serverName));
      if (servers.size > 0) this.remote.send(servers, { edu_type: 'm.presence', content: { push: [this.eduContent(userId, presence, statusMsg, lastActive)] } });
    }
  }

  private contentOf(row: PresenceRow): JsonObject {
    const local = serverOf(row.user_id) === this.serverName;
    const entry = local ? this.active.get(row.user_id) : undefined;
    const lastActiveAgo = Math.max(0, this.clock.now() - Number(row.last_active_ts));
    const content: JsonObject = {
      presence: row.presence,
      // Never active here (a member with no presence yet): no time to give.
      ...(Number(row.last_active_ts) > 0 ? { last_active_ago: lastActiveAgo } : {}),
      currently_active: row.presence === 'online' && (local ? entry !== undefined && (entry.open > 0 || this.clock.now() - entry.lastSeen < IDLE_AFTER_MS) : true),
    };
    if (row.status_msg !== null) content.status_msg = row.status_msg;
    return content;
  }

  private async shareRoom(a: string, b: string): Promise<boolean> {
    const theirs = await this.cache.roomsOf(b);
    for (const [roomId, entry] of await this.cache.roomsOf(a)) {
      if (entry.membership === 'join' && theirs.get(roomId)?.membership === 'join') return true;
    }
    return false;
  }
}
