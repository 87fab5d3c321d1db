/**
 * The bridge as an application service of another homeserver (the organisation's main one): the
 * bridge user is the registration's sender there, `@<sender_localpart>:<its server>`. The main
 * homeserver pushes the events of the bridge's rooms as transactions (`receiveTransaction`, called
 * by the bridge's own HTTP listener); the bridge acts through the main homeserver's Client-Server
 * API with its `as_token`.
 */
import { randomUUID } from 'node:crypto';
import type { FastifyBaseLogger } from 'fastify';
import { ERRCODE_STATUS, MatrixError, type Errcode } from '../core/errors.js';
import type { JsonObject } from '../rooms/events.js';
import type { BridgeStorage } from '../storage/bridge-store.js';
import type { CryptoRequest } from './crypto/crypto-device.js';
import type { ActivityHandler, BridgeHomeserver, RoomActivity, RoomMessage, RoomPowers } from './homeserver.js';

/** The last transaction taken: the homeserver sends them one at a time, so a repeat is this one. */
const LAST_TXN_KEY = 'appservice_last_txn';
const CLIENT = '/_matrix/client/v3';

export interface AppserviceHomeserverOptions {
  /** The main homeserver's client API, e.g. https://matrix.example.org */
  homeserverUrl: string;
  /** The main homeserver's server name (the bridge user's domain). */
  serverName: string;
  senderLocalpart: string;
  asToken: string;
  /** A display name for the bridge user, set at start. */
  displayName: string | undefined;
  storage: BridgeStorage;
  log: FastifyBaseLogger;
  /** Milliseconds a request to the homeserver may take. */
  timeoutMs: number;
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
  private handler: ActivityHandler | undefined;
  private readonly baseUrl: string;

  constructor(private readonly options: AppserviceHomeserverOptions) {
    this.userId = `@${options.senderLocalpart}:${options.serverName}`;
    this.baseUrl = options.homeserverUrl.replace(/\/+$/, '');
  }

  async prepare(): Promise<void> {
    // The as_token must be accepted, and must stand for the bridge user.
    const whoami = await this.request('GET', `${CLIENT}/account/whoami`).catch((err: unknown) => {
      if (err instanceof MatrixError && err.status === 401) {
        throw new BridgeHomeserverError(
          `${this.baseUrl} does not accept the bridge's as_token: install the output of "bot-homeserver bridge registration" in its app_service_config_files and restart it`,
        );
      }
      throw err;
    });
    if (whoami.user_id !== this.userId) {
      throw new BridgeHomeserverError(`the homeserver says the as_token is ${String(whoami.user_id)}, not ${this.userId}: check server_name and sender_localpart`);
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
    return new Promise((resolve) => {
      if (signal.aborted) resolve();
      signal.addEventListener('abort', () => {
        this.handler = undefined;
        resolve();
      });
    });
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
    return roomId;
  }

  async membership(roomId: string, userId: string): Promise<string | undefined> {
    // The bridge's own, on the path of every webhook post: from what the transactions said.
    if (userId === this.userId) return this.joined.has(roomId) ? 'join' : undefined;
    const member = await this.state(roomId, 'm.room.member', userId);
    const membership = member?.membership;
    return typeof membership === 'string' && membership !== 'leave' ? membership : undefined;
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

  async useDevice(): Promise<void> {
    throw new BridgeHomeserverError('encrypted rooms are not supported yet when the bridge is an application service');
  }

  cryptoRequest(request: CryptoRequest): Promise<JsonObject> {
    return Promise.reject(new BridgeHomeserverError(`no crypto device: ${request.kind}`));
  }

  async encryption(roomId: string): Promise<JsonObject | undefined> {
    return this.state(roomId, 'm.room.encryption', '');
  }

  async members(roomId: string): Promise<string[]> {
    const answer = await this.request('GET', `${CLIENT}/rooms/${encodeURIComponent(roomId)}/members?not_membership=leave`).catch(notFoundAsUndefined);
    const chunk = Array.isArray(answer?.chunk) ? (answer.chunk as JsonObject[]) : [];
    return chunk.filter((event) => {
      const membership = (event.content as JsonObject | undefined)?.membership;
      return membership === 'join' || membership === 'invite';
    }).map((event) => String(event.state_key));
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
      if (event.type === 'm.room.member' && event.state_key === this.userId) {
        const membership = content.membership;
        if (membership === 'invite') invites.push(roomId);
        else if (membership === 'join') {
          this.joined.add(roomId);
          // Messages before the bridge's join were not meant for it.
          for (let i = messages.length - 1; i >= 0; i--) if (messages[i]!.roomId === roomId) messages.splice(i, 1);
        } else if (membership === 'leave' || membership === 'ban') {
          this.joined.delete(roomId);
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

  /** A client request as the bridge user; a Matrix error answer becomes a MatrixError. */
  private async request(method: string, path: string, body?: unknown): Promise<JsonObject> {
    let response: Response;
    try {
      response = await fetch(`${this.baseUrl}${path}`, {
        method,
        headers: { authorization: `Bearer ${this.options.asToken}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(this.options.timeoutMs),
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
      throw new MatrixError(errcode, `${method} ${path.split('?')[0]}: ${response.status} ${typeof parsed.error === 'string' ? parsed.error : String(parsed.errcode ?? '')}`, { status: response.status });
    }
    return parsed;
  }
}

function notFoundAsUndefined(err: unknown): undefined {
  if (err instanceof MatrixError && (err.status === 404 || err.status === 403)) return undefined;
  throw err;
}
