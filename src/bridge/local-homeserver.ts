/**
 * The bridge on this server, in process: the bridge user is a service account here, it follows its
 * rooms with the ordinary sync (its position kept across restarts, so old commands never run
 * twice), and it acts through the same room service as any client.
 */
import { randomUUID } from 'node:crypto';
import type { FastifyBaseLogger } from 'fastify';
import { MatrixError } from '../core/errors.js';
import { effectivePowerLevels, userPowerLevel } from '../rooms/auth-rules.js';
import type { JsonObject } from '../rooms/events.js';
import type { FilterDefinition } from '../sync/filters.js';
import type { Services } from '../services.js';
import { BOT_USER_TYPE } from '../users/account-service.js';
import type { Requester } from '../users/session-service.js';
import { userIdFor } from '../users/user-ids.js';
import { deviceDeliveryOf, isQuietDelivery, type CryptoRequest, type DeviceDelivery } from './crypto/crypto-device.js';
import { isJoinOf, type ActivityHandler, type BridgeHomeserver, type RoomActivity, type RoomMessage, type RoomPowers } from './homeserver.js';

const SYNC_TOKEN_KEY = 'sync_token';
const SYNC_TIMEOUT_MS = 30_000;
const RETRY_AFTER_ERROR_MS = 1_000;
/** Only what the bridge reacts to: messages (encrypted or not) and membership, nothing ephemeral. */
const SYNC_FILTER: FilterDefinition = {
  presence: { not_types: ['*'] },
  account_data: { not_types: ['*'] },
  room: {
    timeline: { limit: 100, types: ['m.room.message', 'm.room.encrypted', 'm.room.member'] },
    state: { not_types: ['*'] },
    ephemeral: { not_types: ['*'] },
    account_data: { not_types: ['*'] },
  },
};

export class LocalHomeserver implements BridgeHomeserver {
  readonly userId: string;
  private requester: Requester;
  /** Set once the bridge has a crypto device: syncs then carry what comes for it. */
  private cryptoDevice = false;

  constructor(
    private readonly services: Services,
    private readonly log: FastifyBaseLogger,
  ) {
    const { bridge, server_name: serverName } = services.config;
    this.userId = userIdFor(bridge.localpart, serverName);
    this.requester = { userId: this.userId, deviceId: 'BRIDGE', accessTokenId: 0 };
  }

  async prepare(): Promise<void> {
    const { accounts, limiters, config } = this.services;
    const existing = await accounts.getUser(this.userId);
    if (!existing) {
      await accounts.createUser({ localpart: config.bridge.localpart, userType: BOT_USER_TYPE, displayname: config.bridge.displayname, service: true });
    } else if (existing.deactivated) {
      throw new Error(`the bridge user ${this.userId} is deactivated; reactivate it or set bridge.enabled: false`);
    } else if (await accounts.secureServiceAccount(existing)) {
      this.log.warn({ user: this.userId }, 'the bridge user had a password; it is removed, and every session opened with it is ended');
    }
    // Webhooks and feeds have their own limits; the per-user message limit would only drop posts.
    await limiters.setMessageOverride(this.userId, { messages_per_second: 0, burst_count: 0 });
    this.services.notifier.ignoreOwnMessages(this.userId);
  }

  async follow(handler: ActivityHandler, signal: AbortSignal): Promise<void> {
    const { storage, sync } = this.services;
    let since = await storage.bridge.getValue(SYNC_TOKEN_KEY);
    let lastDevice: DeviceDelivery | undefined;
    while (!signal.aborted) {
      try {
        const body = await sync.sync({ requester: this.requester, since, timeoutMs: SYNC_TIMEOUT_MS, fullState: false, filter: undefined, filterDefinition: SYNC_FILTER, signal });
        if (signal.aborted) break;
        const next = String(body.next_batch);
        const activity = this.activityIn(body, since === undefined);
        // Nothing new and the same position: nothing to take.
        const deviceNews = activity.device !== undefined && !isQuietDelivery(activity.device, lastDevice);
        if (next !== since || activity.messages.length > 0 || activity.invites.length > 0 || activity.leaves.length > 0 || deviceNews) {
          await handler(activity, (stores) => stores.bridge.setValue(SYNC_TOKEN_KEY, next));
          lastDevice = activity.device;
        }
        since = next;
      } catch (err) {
        if (signal.aborted) break;
        this.log.error({ err }, 'bridge sync failed');
        await new Promise((resolve) => setTimeout(resolve, RETRY_AFTER_ERROR_MS).unref());
      }
    }
  }

  async join(roomId: string): Promise<void> {
    await this.services.rooms.join(this.requester, roomId);
  }

  send(roomId: string, type: string, content: JsonObject, txnId?: string): Promise<string> {
    if (txnId !== undefined) return this.services.rooms.send(this.requester, roomId, type, txnId, content);
    return this.services.rooms.sendAsServer(this.requester, roomId, type, content);
  }

  async redact(roomId: string, eventId: string, reason: string): Promise<void> {
    await this.services.rooms.redact(this.requester, roomId, eventId, randomUUID(), reason);
  }

  createDirectRoom(userId: string, encrypted = false): Promise<string> {
    const initialState = encrypted ? [{ type: 'm.room.encryption', state_key: '', content: { algorithm: 'm.megolm.v1.aes-sha2' } }] : [];
    return this.services.rooms.createRoom(this.requester, { preset: 'trusted_private_chat', is_direct: true, invite: [userId], initial_state: initialState });
  }

  async useDevice(deviceId: string, displayName: string): Promise<void> {
    await this.services.devices.ensure(this.userId, deviceId, displayName, this.services.clock.now());
    this.requester = { ...this.requester, deviceId };
    this.cryptoDevice = true;
  }

  /** The crypto device's requests, answered by the services the client API's routes call. */
  async cryptoRequest(request: CryptoRequest): Promise<JsonObject> {
    const { keys, toDevice } = this.services;
    const { userId, deviceId } = this.requester;
    switch (request.kind) {
      case 'keys_upload':
        return keys.upload({ userId, deviceId }, request.body);
      case 'keys_query':
        return keys.query(userId, request.body);
      case 'keys_claim':
        return keys.claim(request.body);
      case 'signatures_upload':
        return keys.crossSigning.uploadSignatures(userId, request.body);
      case 'signing_keys_upload':
        // The route asks for the password before replacing keys; the server trusts its own bridge.
        await keys.crossSigning.upload(userId, request.body);
        return {};
      case 'to_device':
        await toDevice.send({ userId, deviceId }, request.eventType, request.txnId, (request.body.messages ?? {}) as Record<string, Record<string, JsonObject>>);
        return {};
    }
  }

  async encryption(roomId: string): Promise<JsonObject | undefined> {
    const room = this.services.roomCache.peek(roomId) ?? (await this.services.roomCache.room(roomId));
    return room?.get('m.room.encryption')?.content;
  }

  async members(roomId: string): Promise<string[]> {
    const room = this.services.roomCache.peek(roomId) ?? (await this.services.roomCache.room(roomId));
    if (!room) return [];
    return [...room.joinedUsers(), ...room.invitedUsers()];
  }

  async membership(roomId: string, userId: string): Promise<string | undefined> {
    // Loads the room if it is not in memory (after a restart, or a failed write dropped it).
    const room = this.services.roomCache.peek(roomId) ?? (await this.services.roomCache.room(roomId));
    const membership = room?.membership(userId);
    return membership === 'leave' ? undefined : membership;
  }

  async powers(roomId: string): Promise<RoomPowers | undefined> {
    const room = await this.services.roomCache.room(roomId);
    if (!room) return undefined;
    const levels = effectivePowerLevels(room.lookup, room.version);
    return { of: (userId) => userPowerLevel(levels, userId), stateDefault: levels.state_default };
  }

  async roomNames(roomId: string): Promise<{ name?: string | undefined; alias?: string | undefined }> {
    const room = await this.services.roomCache.room(roomId);
    const name = room?.get('m.room.name')?.content.name;
    const alias = room?.get('m.room.canonical_alias')?.content.alias;
    return { name: typeof name === 'string' ? name : undefined, alias: typeof alias === 'string' ? alias : undefined };
  }

  async event(roomId: string, eventId: string): Promise<{ sender: string; type: string; content: JsonObject; redacted: boolean; event: JsonObject } | undefined> {
    const event = await this.services.roomReader.getEvent(eventId);
    if (!event || event.roomId !== roomId) return undefined;
    const whole: JsonObject = { type: event.type, sender: event.sender, event_id: eventId, room_id: roomId, origin_server_ts: event.originServerTs, content: event.content };
    return { sender: event.sender, type: event.type, content: event.content, redacted: event.redactedBy !== undefined, event: whole };
  }

  async hasAnswered(roomId: string, eventId: string): Promise<boolean> {
    return (await this.services.roomReader.findReply(roomId, this.userId, eventId)) !== undefined;
  }

  async accountData(type: string): Promise<JsonObject | undefined> {
    try {
      return await this.services.accountData.get(this.userId, undefined, type);
    } catch (err) {
      if (err instanceof MatrixError && err.errcode === 'M_NOT_FOUND') return undefined;
      throw err;
    }
  }

  async setAccountData(type: string, content: JsonObject): Promise<void> {
    await this.services.accountData.set(this.userId, undefined, type, content);
  }

  /** What a sync brings: messages after the bridge's join in each joined room, invites, leaves. */
  private activityIn(body: JsonObject, initial: boolean): RoomActivity {
    const rooms = (body.rooms ?? {}) as { join?: JsonObject; invite?: JsonObject; leave?: JsonObject };
    const messages: RoomMessage[] = [];
    for (const [roomId, room] of Object.entries(rooms.join ?? {})) {
      for (const event of this.eventsSinceJoining(room as JsonObject)) {
        if (event.type !== 'm.room.message' && event.type !== 'm.room.encrypted') continue;
        messages.push({ roomId, sender: String(event.sender), eventId: String(event.event_id), type: String(event.type), content: (event.content ?? {}) as JsonObject, event: { ...event, room_id: roomId } });
      }
    }
    return { messages, invites: Object.keys(rooms.invite ?? {}), leaves: Object.keys(rooms.leave ?? {}), initial, device: this.cryptoDevice ? deviceDeliveryOf(body) : undefined };
  }

  /**
   * The timeline after the bridge's own join, when the join is in it: a room it has just joined
   * shows history from before, and commands there were not meant for it (or were already run
   * during an earlier stay).
   */
  private eventsSinceJoining(room: JsonObject): JsonObject[] {
    const events = (room.timeline as { events?: JsonObject[] } | undefined)?.events ?? [];
    let start = 0;
    events.forEach((event, index) => {
      // A change of the bridge's profile (a join after a join) is not a join.
      if (isJoinOf(event, this.userId)) start = index + 1;
    });
    return events.slice(start);
  }
}

