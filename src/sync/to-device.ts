/**
 * To-device messages: `PUT /sendToDevice/{type}/{txnId}` puts them in the devices' inboxes (local
 * users) or sends them as `m.direct_to_device` EDUs (users of other servers); `/sync` delivers them
 * in `to_device` and deletes them once the client syncs again with the token of that answer. This
 * is what end-to-end encryption's key sharing travels on.
 */
import { randomBytes } from 'node:crypto';
import type { Clock } from '../core/clock.js';
import { MatrixError, rateLimitedError } from '../core/errors.js';
import type { JsonObject } from '../rooms/events.js';
import { isUserId, serverOf } from '../rooms/ids.js';
import type { NewToDeviceMessage, Storage, Stores } from '../storage/index.js';
import { parseStoredJson } from '../core/json.js';
import { BoundedCache } from '../core/bounded-cache.js';
import { InboxAdmission, type InboxLimits } from './inbox-admission.js';
import type { Notifier } from './notifier.js';
import { writeAtNextPosition, type StreamCounter } from './stream.js';

/** Messages one sync answer carries at most; the rest come in the next (which does not wait). */
export const TO_DEVICE_PER_SYNC = 100;
/**
 * The hint given with a send refused because the recipient's inbox is full: it empties only as
 * that device syncs, which nothing here can predict; a minute keeps retries cheap.
 */
const INBOX_FULL_RETRY_MS = 60_000;
/** Transaction ids are kept this long for retries. */
const TXN_LIFETIME_MS = 24 * 3_600_000;

/** `{userId: {deviceId or "*": content}}`, as the client sends it. */
export type ToDeviceMessages = Record<string, Record<string, JsonObject>>;

/** Where messages for users of other servers go. */
export interface RemoteToDevice {
  send(server: string, edu: JsonObject): Promise<void>;
}

export class ToDeviceService {
  /**
   * Devices known to have nothing waiting (nothing undelivered, nothing delivered and not yet
   * acknowledged): their syncs skip both queries. A device not listed is asked once.
   */
  private readonly empty = new BoundedCache<string, true>(MAX_KNOWN_EMPTY);

  constructor(
    private readonly storage: Storage,
    private readonly stream: StreamCounter,
    private readonly notifier: Notifier,
    private readonly clock: Clock,
    private readonly serverName: string,
    private readonly remote: RemoteToDevice | undefined,
    /** `to_device` in the config: a device nobody syncs must not fill the disk, nor one sender it for the others. */
    private readonly limits: InboxLimits,
  ) {}

  /** `PUT /sendToDevice/{type}/{txnId}`: once per transaction id of the sending device. */
  async send(sender: { userId: string; deviceId: string }, type: string, txnId: string, messages: ToDeviceMessages): Promise<void> {
    const now = this.clock.now();
    const local: NewToDeviceMessage[] = [];
    const remote = new Map<string, ToDeviceMessages>();
    for (const [userId, devices] of Object.entries(messages)) {
      if (!isUserId(userId)) throw new MatrixError('M_INVALID_PARAM', `${userId} is not a user id`, { status: 400 });
      const server = serverOf(userId);
      if (server !== this.serverName) {
        const forServer = remote.get(server) ?? {};
        forServer[userId] = devices;
        remote.set(server, forServer);
        continue;
      }
      const known = (await this.storage.sessions.listDevices(userId)).map((device) => device.device_id);
      for (const [deviceId, content] of Object.entries(devices)) {
        // Unknown devices are skipped, as Synapse does: the sender may hold an old device list.
        const targets = deviceId === '*' ? known : known.includes(deviceId) ? [deviceId] : [];
        for (const target of targets) local.push({ user_id: userId, device_id: target, sender: sender.userId, type, content: JSON.stringify(content) });
      }
    }
    let fresh = false;
    await writeAtNextPosition(this.storage, this.stream, async (stores, position, effects) => {
      fresh = await stores.deviceInbox.claimTxn(sender.userId, sender.deviceId, txnId, now);
      if (!fresh) return;
      // All or nothing: a message that cannot be stored fails the request (and its transaction
      // id stays unclaimed, so the client's retry is a new attempt), never a 200 that drops it.
      const { accepted, refused } = await this.admit(stores, sender.userId, local, true);
      if (refused !== undefined) {
        const error = rateLimitedError(INBOX_FULL_RETRY_MS);
        throw new MatrixError('M_LIMIT_EXCEEDED', `The inbox of ${refused.user_id}'s device ${refused.device_id} is full for messages from you until that device syncs`, {
          extra: error.extra,
          headers: error.headers,
        });
      }
      for (const message of accepted) effects.inboxes.add(message.user_id);
      await stores.deviceInbox.insert(accepted, position, now);
    });
    if (!fresh) return;
    this.forgetEmpty(local);
    this.notifier.notify(new Set(local.map((message) => message.user_id)));
    for (const [server, forServer] of remote) {
      await this.remote?.send(server, { sender: sender.userId, type, message_id: randomBytes(12).toString('base64url'), messages: forServer });
    }
  }

  /** An `m.direct_to_device` EDU from `origin`: its sender must be one of that server's users. */
  async receiveRemote(origin: string, content: JsonObject): Promise<void> {
    const { sender, type, messages } = content;
    if (typeof sender !== 'string' || serverOf(sender) !== origin || typeof type !== 'string' || typeof messages !== 'object' || messages === null) return;
    const local: NewToDeviceMessage[] = [];
    for (const [userId, devices] of Object.entries(messages as Record<string, unknown>)) {
      if (serverOf(userId) !== this.serverName || typeof devices !== 'object' || devices === null) continue;
      const known = (await this.storage.sessions.listDevices(userId)).map((device) => device.device_id);
      for (const [deviceId, body] of Object.entries(devices as Record<string, unknown>)) {
        if (typeof body !== 'object' || body === null) continue;
        const targets = deviceId === '*' ? known : known.includes(deviceId) ? [deviceId] : [];
        for (const target of targets) local.push({ user_id: userId, device_id: target, sender, type, content: JSON.stringify(body) });
      }
    }
    if (local.length === 0) return;
    const now = this.clock.now();
    await writeAtNextPosition(this.storage, this.stream, async (stores, position, effects) => {
      // An EDU cannot be refused message by message: what does not fit is dropped.
      const { accepted } = await this.admit(stores, sender, local, false);
      for (const message of accepted) effects.inboxes.add(message.user_id);
      await stores.deviceInbox.insert(accepted, position, now);
    });
    this.forgetEmpty(local);
    this.notifier.notify(new Set(local.map((message) => message.user_id)));
  }

  /**
   * Decides which of one sender's messages fit their devices' inboxes, counting the whole batch
   * (a device named twice, by "*" and by its id, counts twice), and drops what must make room.
   * `allOrNothing`: if any message does not fit, none is stored (and nothing is dropped).
   */
  private async admit(
    stores: Stores,
    sender: string,
    messages: readonly NewToDeviceMessage[],
    allOrNothing: boolean,
  ): Promise<{ accepted: NewToDeviceMessage[]; refused: NewToDeviceMessage | undefined }> {
    const inboxes = new Map<string, { userId: string; deviceId: string; admission: InboxAdmission }>();
    const accepted: NewToDeviceMessage[] = [];
    let refused: NewToDeviceMessage | undefined;
    for (const message of messages) {
      const key = deviceKey(message.user_id, message.device_id);
      let inbox = inboxes.get(key);
      if (inbox === undefined) {
        const held = await stores.deviceInbox.countsBySender(message.user_id, message.device_id);
        inbox = { userId: message.user_id, deviceId: message.device_id, admission: new InboxAdmission(held, sender, this.holderOf, this.limits) };
        inboxes.set(key, inbox);
      }
      if (inbox.admission.admit() === undefined) accepted.push(message);
      else refused ??= message;
    }
    if (refused !== undefined && allOrNothing) return { accepted: [], refused };
    for (const { userId, deviceId, admission } of inboxes.values()) {
      for (const [victim, count] of admission.evictions) await stores.deviceInbox.dropOldest(userId, deviceId, victim, count);
    }
    return { accepted, refused };
  }

  /** Users of another server are one holder per device: that server can make up any number of them. */
  private readonly holderOf = (sender: string): string => {
    const server = serverOf(sender);
    return server === this.serverName ? sender : server;
  };

  /** Another process put messages in inboxes: no device is known to be empty any more. */
  forgetEmptyInboxes(): void {
    this.empty.invalidate();
  }

  /** Devices that were sent something are no longer known to be empty (before their syncs are woken). */
  private forgetEmpty(messages: readonly NewToDeviceMessage[]): void {
    if (messages.length > 0) this.empty.invalidate();
  }

  /**
   * What a sync answer at `upTo` carries for this device: first what the client acknowledged by
   * syncing from `since` is deleted, then up to 100 waiting messages are marked as delivered at
   * `upTo`. `more` says that others wait (the next sync must not park).
   */
  async forSync(userId: string, deviceId: string, since: number | undefined, upTo: number): Promise<{ events: JsonObject[]; more: boolean }> {
    const key = deviceKey(userId, deviceId);
    if (this.empty.get(key)) return { events: [], more: false };
    const generation = this.empty.generation;
    if (since !== undefined) await this.storage.deviceInbox.acknowledge(userId, deviceId, since);
    const rows = await this.storage.deviceInbox.pending(userId, deviceId, since, TO_DEVICE_PER_SYNC + 1);
    const delivered = rows.slice(0, TO_DEVICE_PER_SYNC);
    if (delivered.length > 0) await this.storage.deviceInbox.markDelivered(delivered.map((row) => row.id), upTo);
    // Nothing left at all (an older since would find nothing either): later syncs need not ask.
    else if (since === undefined || !(await this.storage.deviceInbox.hasPending(userId, deviceId, -1))) this.empty.setIfUnchanged(key, true, generation);
    return {
      events: delivered.map((row) => ({ sender: row.sender, type: row.type, content: parseStoredJson<JsonObject>(row.content, {}) })),
      more: rows.length > TO_DEVICE_PER_SYNC,
    };
  }

  /** Transaction ids older than a day are forgotten (a retry comes within minutes). */
  async pruneTransactions(): Promise<void> {
    await this.storage.deviceInbox.pruneTxns(this.clock.now() - TXN_LIFETIME_MS);
  }
}

const MAX_KNOWN_EMPTY = 100_000;

function deviceKey(userId: string, deviceId: string): string {
  return `${userId}\u0000${deviceId}`;
}
