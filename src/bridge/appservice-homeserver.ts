/**
 * The bridge as an application service of another homeserver (the organisation's main one): the
 * bridge user `@<localpart>:<its server>` is in the registration's exclusive user namespace, and the
 * registration's sender is another user (Synapse refuses /sync to the sender, and the bridge's
 * crypto device syncs as the bridge user). At start the bridge registers its user there; then
 * every request with the `as_token` acts as it (`?user_id=`, identity assertion). The main
 * homeserver pushes the events of the bridge's rooms as transactions (`receiveTransaction`, called
 * by the bridge's own HTTP listener); the bridge acts through the main homeserver's Client-Server
 * API.
 */
import { randomUUID } from 'node:crypto';
import type { FastifyBaseLogger } from 'fastify';
import { systemClock, type Clock } from '../core/clock.js';
import { ERRCODE_STATUS, MatrixError, type Errcode } from '../core/errors.js';
import type { JsonObject } from '../rooms/events.js';
import type { BridgeStorage } from '../storage/bridge-store.js';
import { deviceDeliveryOf, isQuietDelivery, type CryptoRequest, type DeviceDelivery } from './crypto/crypto-device.js';
import { isJoinOf, type ActivityHandler, type BridgeHomeserver, type RoomActivity, type RoomMessage, type RoomPowers } from './homeserver.js';
import { RoomStateCache } from './room-state-cache.js';

/** The last transaction taken: the homeserver sends them one at a time, so a repeat is this one. */
const LAST_TXN_KEY = 'appservice_last_txn';
/** Where the crypto device's own sync (its to-device messages, device lists) has got to. */
const DEVICE_SYNC_TOKEN_KEY = 'appservice_device_sync_token';
const DEVICE_SYNC_TIMEOUT_MS = 30_000;
/** After a failed device sync: waits from the first to the last, doubling, back to the first after a success. */
const DEVICE_RETRY_FIRST_MS = 2_000;
const DEVICE_RETRY_MAX_MS = 60_000;
/** The device's sync carries no room at all: only what comes for the device. */
const DEVICE_SYNC_FILTER = JSON.stringify({ presence: { not_types: ['*'] }, account_data: { not_types: ['*'] }, room: { rooms: [] } });
const CLIENT = '/_matrix/client/v3';

export interface AppserviceHomeserverOptions {
  /** The main homeserver's client API, e.g. https://matrix.example.org */
  homeserverUrl: string;
  /** The main homeserver's server name (the bridge user's domain). */
  serverName: string;
  /** The bridge user's localpart (in the registration's exclusive namespace, or its sender). */
  localpart: string;
  asToken: string;
  /** A display name for the bridge user, set at start. */
  displayName: string | undefined;
  storage: BridgeStorage;
  log: FastifyBaseLogger;
  /** Milliseconds a request to the homeserver may take. */
  timeoutMs: number;
  /** How old a cached answer about a room's state may get (tests move it). */
  clock?: Clock | undefined;
  /** Rooms whose encryption and members are cached, at most (tests make it small). */
  cachedRooms?: number | undefined;
}

/** The main homeserver cannot be reached or does not take the bridge's token: the operator's to fix. */
export class BridgeHomeserverError extends Error {
  override name = 'BridgeHomeserverError';
}

/** A transaction the bridge cannot take yet (it is starting): the homeserver will retry it. */
export class NotReady extends Error {
  override name = 'NotReady';
}

export class AppserviceHomeserver implements BridgeHomeserver {
  readonly userId: string;
  /** Rooms the bridge is joined to: read at start, then kept from transactions and its own joins. */
  private readonly joined = new Set<string>();
  /**
   * The encryption and members of the bridge's rooms, kept by the transactions: a post asks the
   * homeserver nothing before its send (docs/bridge.md).
   */
  private readonly roomState: RoomStateCache;
  private handler: ActivityHandler | undefined;
  private readonly baseUrl: string;
  /**
   * The access token of the bridge's crypto device, from an appservice login (in memory only,
   * never logged; a new one at each start): key requests and the device's own sync use it.
   */
  private deviceToken: string | undefined;
  /**
   * Whether as_token requests name the bridge user (`?user_id=`): yes unless the bridge user is
   * the registration's sender (a registration made by an earlier version: it works where /sync to
   * the sender does, not on Synapse).
   */
  private assertIdentity = true;

  constructor(private readonly options: AppserviceHomeserverOptions) {
    this.userId = `@${options.localpart}:${options.serverName}`;
    this.baseUrl = options.homeserverUrl.replace(/\/+$/, '');
    this.roomState = new RoomStateCache(options.clock ?? systemClock, undefined, options.cachedRooms);
  }

  async prepare(): Promise<void> {
    // The registration's sender (the as_token alone): a registration made by an earlier version
    // has the bridge user as sender.
    const sender = await this.request('GET', `${CLIENT}/account/whoami`, undefined, { assert: false }).catch((err: unknown) => {
      if (err instanceof MatrixError && err.status === 401) {
        throw new BridgeHomeserverError(
          `${this.baseUrl} does not accept the bridge's as_token: install the output of "bot-homeserver bridge registration" in its app_service_config_files and restart it`,
        );
      }
      throw err;
    });
    if (sender.user_id === this.userId) {
      this.assertIdentity = false;
      this.options.log.warn(
        { user: this.userId },
        'the bridge user is the appservice registration’s sender_localpart: Synapse refuses /sync to the sender, so in encrypted rooms the bridge gets no room keys there; regenerate the registration ("bot-homeserver bridge registration"), install it on the main homeserver and restart both',
      );
    } else {
      // Before anything else as the bridge user: it exists on the main homeserver, registered by
      // the appservice (a profile set or a login before would leave Synapse with a user it cannot use).
      await this.request('POST', `${CLIENT}/register`, { type: 'm.login.application_service', username: this.options.localpart, inhibit_login: true }, { assert: false }).catch((err: unknown) => {
        // Already registered: a restart.
        if (err instanceof MatrixError && err.errcode === 'M_USER_IN_USE') return;
        if (err instanceof MatrixError && err.errcode === 'M_EXCLUSIVE') {
          throw new BridgeHomeserverError(`${this.baseUrl} does not let the appservice register ${this.userId} (${err.message}): install the output of "bot-homeserver bridge registration" and check server_name and bridge.localpart`);
        }
        throw err;
      });
    }
    // The as_token must be accepted, and must stand for the bridge user.
    const whoami = await this.request('GET', `${CLIENT}/account/whoami`);
    if (whoami.user_id !== this.userId) {
      throw new BridgeHomeserverError(`the homeserver says the as_token is ${String(whoami.user_id)}, not ${this.userId}: check server_name and bridge.localpart`);
    }
    const rooms = await this.request('GET', `${CLIENT}/joined_rooms`);
    for (const roomId of Array.isArray(rooms.joined_rooms) ? rooms.joined_rooms : []) if (typeof roomId === 'string') this.joined.add(roomId);
    if (this.options.displayName !== undefined) {
      await this.request('PUT', `${CLIENT}/profile/${encodeURIComponent(this.userId)}/displayname`, { displayname: this.options.displayName }).catch((err: unknown) => {
        this.options.log.warn({ err }, 'could not set the bridge user’s display name');
      });
    }
  }

  follow(handler: ActivityHandler, signal: AbortSignal): Promise<void> {
    this.handler = handler;
    const device = this.deviceToken === undefined ? Promise.resolve() : this.followDevice(handler, signal);
    const transactions = new Promise<void>((resolve) => {
      if (signal.aborted) resolve();
      signal.addEventListener('abort', () => {
        this.handler = undefined;
        resolve();
      });
    });
    return Promise.all([transactions, device]).then(() => undefined);
  }

  /**
   * The crypto device's sync: a logged-in device of the bridge user, syncing for its to-device
   * messages, device-list changes and one-time key counts (what any homeserver offers; Synapse's
   * MSC2409/MSC3202 appservice delivery is experimental). No rooms: those come as transactions.
   */
  private async followDevice(handler: ActivityHandler, signal: AbortSignal): Promise<void> {
    let since = await this.options.storage.bridge.getValue(DEVICE_SYNC_TOKEN_KEY);
    let retryMs = DEVICE_RETRY_FIRST_MS;
    // Each kind of failure is logged once (until a sync succeeds), not at every retry.
    const logged = new Set<string>();
    let lastDevice: DeviceDelivery | undefined;
    while (!signal.aborted) {
      try {
        const query = new URLSearchParams({ filter: DEVICE_SYNC_FILTER, timeout: String(since === undefined ? 0 : DEVICE_SYNC_TIMEOUT_MS) });
        if (since !== undefined) query.set('since', since);
        const body = await this.request('GET', `${CLIENT}/sync?${query.toString()}`, undefined, { token: this.deviceToken, timeoutMs: DEVICE_SYNC_TIMEOUT_MS + this.options.timeoutMs, signal });
        if (signal.aborted) break;
        const next = String(body.next_batch);
        const device = deviceDeliveryOf(body);
        if (next !== since || !isQuietDelivery(device, lastDevice)) {
          await handler({ messages: [], invites: [], leaves: [], initial: false, device }, (stores) => stores.bridge.setValue(DEVICE_SYNC_TOKEN_KEY, next));
          lastDevice = device;
        }
        since = next;
        if (logged.size > 0) this.options.log.info('the bridge’s crypto device syncs again');
        logged.clear();
        retryMs = DEVICE_RETRY_FIRST_MS;
      } catch (err) {
        if (signal.aborted) break;
        this.logSyncFailure(err, logged);
        await new Promise((resolve) => {
          const timer = setTimeout(resolve, retryMs);
          timer.unref();
          signal.addEventListener('abort', () => {
            clearTimeout(timer);
            resolve(undefined);
          }, { once: true });
        });
        retryMs = Math.min(retryMs * 2, DEVICE_RETRY_MAX_MS);
      }
    }
  }

  private logSyncFailure(err: unknown, logged: Set<string>): void {
    const status = err instanceof MatrixError ? err.status : undefined;
    const errcode = err instanceof MatrixError ? err.errcode : undefined;
    const kind = err instanceof MatrixError ? `${err.status} ${err.errcode}` : err instanceof BridgeHomeserverError ? 'unreachable' : String((err as Error)?.name);
    if (logged.has(kind)) return;
    logged.add(kind);
    const error = err instanceof Error ? err.message : String(err);
    const hint =
      !this.assertIdentity && status === 500
        ? ': the bridge user is the registration’s sender, and Synapse refuses /sync to it; regenerate the registration ("bot-homeserver bridge registration") and restart both'
        : '; retrying, with longer waits';
    this.options.log.warn({ status, errcode, error }, `the bridge’s crypto device could not sync${hint}`);
  }

  /**
   * `PUT /_matrix/app/v1/transactions/{txnId}`: resolves once the batch is recorded (then the
   * homeserver may forget it); rejects with NotReady before the bridge follows its rooms.
   */
  async receiveTransaction(txnId: string, events: readonly JsonObject[]): Promise<void> {
    const handler = this.handler;
    if (!handler) throw new NotReady('the bridge is starting');
    if ((await this.options.storage.bridge.getValue(LAST_TXN_KEY)) === txnId) return;
    await handler(this.activityOf(events), (stores) => stores.bridge.setValue(LAST_TXN_KEY, txnId));
  }

  async join(roomId: string): Promise<void> {
    await this.request('POST', `${CLIENT}/join/${encodeURIComponent(roomId)}`, {});
    this.joined.add(roomId);
    this.roomState.observe({ type: 'm.room.member', room_id: roomId, state_key: this.userId, content: { membership: 'join' } });
  }

  async send(roomId: string, type: string, content: JsonObject, txnId: string = randomUUID()): Promise<string> {
    const answer = await this.request('PUT', `${CLIENT}/rooms/${encodeURIComponent(roomId)}/send/${encodeURIComponent(type)}/${encodeURIComponent(txnId)}`, content);
    return String(answer.event_id);
  }

  async redact(roomId: string, eventId: string, reason: string): Promise<void> {
    await this.request('PUT', `${CLIENT}/rooms/${encodeURIComponent(roomId)}/redact/${encodeURIComponent(eventId)}/${randomUUID()}`, { reason });
  }

  async createDirectRoom(userId: string, encrypted = false): Promise<string> {
    const initialState = encrypted ? [{ type: 'm.room.encryption', state_key: '', content: { algorithm: 'm.megolm.v1.aes-sha2' } }] : [];
    const answer = await this.request('POST', `${CLIENT}/createRoom`, { preset: 'trusted_private_chat', is_direct: true, invite: [userId], initial_state: initialState });
    const roomId = String(answer.room_id);
    this.joined.add(roomId);
    this.roomState.rememberNewRoom(roomId, encrypted ? initialState[0]!.content : undefined, new Map([[this.userId, 'join'], [userId, 'invite']]));
    return roomId;
  }

  async membership(roomId: string, userId: string): Promise<string | undefined> {
    // The bridge's own, on the path of every webhook post: from what the transactions said.
    if (userId === this.userId) return this.joined.has(roomId) ? 'join' : undefined;
    return (await this.memberships(roomId))?.get(userId);
  }

  async powers(roomId: string): Promise<RoomPowers | undefined> {
    const levels = await this.state(roomId, 'm.room.power_levels', '');
    if (!levels) {
      // No power levels yet: the creator has 100, everyone else 0 (the event's schema).
      const create = await this.state(roomId, 'm.room.create', '');
      if (!create) return undefined;
      const creator = create.creator;
      return { of: (userId) => (userId === creator ? 100 : 0), stateDefault: 50 };
    }
    const users = typeof levels.users === 'object' && levels.users !== null ? (levels.users as Record<string, unknown>) : {};
    const usersDefault = typeof levels.users_default === 'number' ? levels.users_default : 0;
    return {
      of: (userId) => (typeof users[userId] === 'number' ? (users[userId] as number) : usersDefault),
      stateDefault: typeof levels.state_default === 'number' ? levels.state_default : 50,
    };
  }

  async roomNames(roomId: string): Promise<{ name?: string | undefined; alias?: string | undefined }> {
    const name = (await this.state(roomId, 'm.room.name', ''))?.name;
    const alias = (await this.state(roomId, 'm.room.canonical_alias', ''))?.alias;
    return { name: typeof name === 'string' ? name : undefined, alias: typeof alias === 'string' ? alias : undefined };
  }

  async event(roomId: string, eventId: string): Promise<{ sender: string; type: string; content: JsonObject; redacted: boolean; event: JsonObject } | undefined> {
    const event = await this.request('GET', `${CLIENT}/rooms/${encodeURIComponent(roomId)}/event/${encodeURIComponent(eventId)}`).catch(notFoundAsUndefined);
    if (!event) return undefined;
    const unsigned = (event.unsigned ?? {}) as JsonObject;
    return { sender: String(event.sender), type: String(event.type), content: (event.content ?? {}) as JsonObject, redacted: unsigned.redacted_because !== undefined, event: { ...event, room_id: roomId } };
  }

  /** Logs the crypto device in (an appservice login, spec v1.2: no password) with its own id. */
  async useDevice(deviceId: string, displayName: string): Promise<void> {
    const answer = await this.request('POST', `${CLIENT}/login`, {
      type: 'm.login.application_service',
      identifier: { type: 'm.id.user', user: this.userId },
      device_id: deviceId,
      initial_device_display_name: displayName,
    });
    if (typeof answer.access_token !== 'string' || answer.device_id !== deviceId) {
      throw new BridgeHomeserverError(`${this.baseUrl} did not log the bridge's crypto device in (appservice login)`);
    }
    this.deviceToken = answer.access_token;
  }

  async cryptoRequest(request: CryptoRequest): Promise<JsonObject> {
    const token = this.deviceToken;
    if (token === undefined) throw new BridgeHomeserverError('the bridge’s crypto device is not logged in');
    const paths: Record<Exclude<CryptoRequest['kind'], 'to_device'>, string> = {
      keys_upload: '/keys/upload',
      keys_query: '/keys/query',
      keys_claim: '/keys/claim',
      signatures_upload: '/keys/signatures/upload',
      signing_keys_upload: '/keys/device_signing/upload',
    };
    if (request.kind === 'to_device') {
      return this.request('PUT', `${CLIENT}/sendToDevice/${encodeURIComponent(request.eventType)}/${encodeURIComponent(request.txnId)}`, request.body, { token });
    }
    return this.request('POST', `${CLIENT}${paths[request.kind]}`, request.body, { token });
  }

  async encryption(roomId: string): Promise<JsonObject | undefined> {
    const known = this.roomState.encryption(roomId);
    if (known) return known.content;
    const version = this.roomState.version;
    const path = `${CLIENT}/rooms/${encodeURIComponent(roomId)}/state/m.room.encryption/`;
    let content: JsonObject | undefined;
    try {
      content = await this.request('GET', path);
    } catch (err) {
      // 404: the room has no m.room.encryption, an answer. 403 (the bridge cannot see the room)
      // and every other error are not kept.
      if (err instanceof MatrixError && err.status === 404) {
        this.roomState.rememberEncryption(roomId, undefined, version);
        return undefined;
      }
      return notFoundAsUndefined(err);
    }
    this.roomState.rememberEncryption(roomId, content, version);
    return content;
  }

  async members(roomId: string): Promise<string[]> {
    const memberships = await this.memberships(roomId);
    return [...(memberships ?? [])].filter(([, membership]) => membership === 'join' || membership === 'invite').map(([userId]) => userId);
  }

  /** Everyone's membership in the room but `leave`s, cached; undefined when the bridge cannot see the room. */
  private async memberships(roomId: string): Promise<ReadonlyMap<string, string> | undefined> {
    const known = this.roomState.members(roomId);
    if (known) return known;
    const version = this.roomState.version;
    const answer = await this.request('GET', `${CLIENT}/rooms/${encodeURIComponent(roomId)}/members?not_membership=leave`).catch(notFoundAsUndefined);
    if (!answer) return undefined;
    const memberships = new Map<string, string>();
    for (const event of Array.isArray(answer.chunk) ? (answer.chunk as JsonObject[]) : []) {
      const membership = (event.content as JsonObject | undefined)?.membership;
      if (typeof event.state_key === 'string' && typeof membership === 'string' && membership !== 'leave') memberships.set(event.state_key, membership);
    }
    this.roomState.rememberMembers(roomId, memberships, version);
    return memberships;
  }

  async hasAnswered(roomId: string, eventId: string): Promise<boolean> {
    // The bridge's latest messages in the room: an answer to a recent command is among them.
    const filter = JSON.stringify({ senders: [this.userId], types: ['m.room.message'] });
    const page = await this.request('GET', `${CLIENT}/rooms/${encodeURIComponent(roomId)}/messages?dir=b&limit=50&filter=${encodeURIComponent(filter)}`).catch(notFoundAsUndefined);
    const chunk = Array.isArray(page?.chunk) ? (page.chunk as JsonObject[]) : [];
    return chunk.some((event) => {
      const relatesTo = (event.content as JsonObject | undefined)?.['m.relates_to'] as JsonObject | undefined;
      return (relatesTo?.['m.in_reply_to'] as JsonObject | undefined)?.event_id === eventId;
    });
  }

  async accountData(type: string): Promise<JsonObject | undefined> {
    return this.request('GET', `${CLIENT}/user/${encodeURIComponent(this.userId)}/account_data/${encodeURIComponent(type)}`).catch(notFoundAsUndefined);
  }

  async setAccountData(type: string, content: JsonObject): Promise<void> {
    await this.request('PUT', `${CLIENT}/user/${encodeURIComponent(this.userId)}/account_data/${encodeURIComponent(type)}`, content);
  }

  /** The events of a transaction as the bridge sees them; its own memberships kept up to date. */
  private activityOf(events: readonly JsonObject[]): RoomActivity {
    const messages: RoomMessage[] = [];
    const invites: string[] = [];
    const leaves: string[] = [];
    for (const event of events) {
      const roomId = String(event.room_id);
      const content = (event.content ?? {}) as JsonObject;
      this.roomState.observe(event);
      if (event.type === 'm.room.member' && event.state_key === this.userId) {
        const membership = content.membership;
        if (membership === 'invite') invites.push(roomId);
        else if (membership === 'join') {
          this.joined.add(roomId);
          // Messages before the bridge's join were not meant for it. Not so before a change of its
          // profile (a join after a join, which its display name set at each start writes).
          if (isJoinOf(event, this.userId)) for (let i = messages.length - 1; i >= 0; i--) if (messages[i]!.roomId === roomId) messages.splice(i, 1);
        } else if (membership === 'leave' || membership === 'ban') {
          this.joined.delete(roomId);
          this.roomState.forget(roomId);
          leaves.push(roomId);
        }
      } else if ((event.type === 'm.room.message' || event.type === 'm.room.encrypted') && this.joined.has(roomId)) {
        messages.push({ roomId, sender: String(event.sender), eventId: String(event.event_id), type: String(event.type), content, event });
      }
    }
    return { messages, invites, leaves, initial: false };
  }

  private async state(roomId: string, type: string, stateKey: string): Promise<JsonObject | undefined> {
    return this.request('GET', `${CLIENT}/rooms/${encodeURIComponent(roomId)}/state/${encodeURIComponent(type)}/${encodeURIComponent(stateKey)}`).catch(notFoundAsUndefined);
  }

  /**
   * A client request as the bridge user (its as_token with `?user_id=`, or the crypto device's
   * token); a Matrix error answer becomes a MatrixError.
   */
  private async request(
    method: string,
    path: string,
    body?: unknown,
    options: { token?: string | undefined; timeoutMs?: number; signal?: AbortSignal; assert?: boolean } = {},
  ): Promise<JsonObject> {
    let response: Response;
    const deadline = AbortSignal.timeout(options.timeoutMs ?? this.options.timeoutMs);
    // With the as_token, as the bridge user (identity assertion); a device token is the user's own.
    const asUser = options.token === undefined && options.assert !== false && this.assertIdentity;
    const url = asUser ? `${this.baseUrl}${path}${path.includes('?') ? '&' : '?'}user_id=${encodeURIComponent(this.userId)}` : `${this.baseUrl}${path}`;
    try {
      response = await fetch(url, {
        method,
        headers: { authorization: `Bearer ${options.token ?? this.options.asToken}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: options.signal ? AbortSignal.any([deadline, options.signal]) : deadline,
      });
    } catch (err) {
      const cause = (err as { cause?: { message?: string } }).cause?.message ?? (err as Error).message;
      throw new BridgeHomeserverError(`cannot reach the homeserver at ${this.baseUrl} (${method} ${path.split('?')[0]}): ${cause}`);
    }
    const text = await response.text();
    let parsed: JsonObject = {};
    try {
      parsed = text === '' ? {} : (JSON.parse(text) as JsonObject);
    } catch {
      // Not JSON: a proxy's error page; the status says enough.
    }
    if (!response.ok) {
      const errcode = typeof parsed.errcode === 'string' && parsed.errcode in ERRCODE_STATUS ? (parsed.errcode as Errcode) : 'M_UNKNOWN';
      // A user-interactive auth answer has no error: its flows say what it wanted.
      const said = typeof parsed.error === 'string' ? parsed.error : Array.isArray(parsed.flows) ? `user-interactive auth required, flows ${JSON.stringify(parsed.flows).slice(0, 200)}` : String(parsed.errcode ?? '');
      throw new MatrixError(errcode, `${method} ${path.split('?')[0]}: ${response.status} ${said}`, { status: response.status });
    }
    return parsed;
  }
}

function notFoundAsUndefined(err: unknown): undefined {
  if (err instanceof MatrixError && (err.status === 404 || err.status === 403)) return undefined;
  throw err;
}
