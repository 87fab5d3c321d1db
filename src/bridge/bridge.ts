/**
 * The bridge user: turns `!bridge` commands into webhooks and feed subscriptions, and posts what
 * they bring. It follows its rooms and acts in them through a `BridgeHomeserver`: this server in
 * process (the default), or another homeserver that runs it as an application service. Commands
 * are recorded with the position that brought them, so after a restart none is lost or run twice.
 */
import type { FastifyBaseLogger } from 'fastify';
import type { Config } from '../config/index.js';
import type { Clock } from '../core/clock.js';
import { MatrixError } from '../core/errors.js';
import { RateLimiter } from '../ratelimit/rate-limiter.js';
import type { JsonObject } from '../rooms/events.js';
import type { BridgeStorage } from '../storage/bridge-store.js';
import { holdsSecret, parseCommand, type BridgeCommand, type SecretRequest } from './commands.js';
import { BRIDGE_DEVICE_NAME, CryptoDevice, type CryptoDeviceOptions, type DecryptionFailure } from './crypto/crypto-device.js';
import { DirectMessages } from './direct-messages.js';
import { feedFailureReason, FeedService, SubscriptionRefused, type FeedFetcher } from './feeds/service.js';
import { clip } from './matrix-html.js';
import { FeedError } from './feeds/error.js';
import { fetchFeed } from './feeds/fetch.js';
import { FeedParserThread } from './feeds/parser-thread.js';
import { HELP_LINES, joinGreeting } from './help.js';
import type { BridgeHomeserver, Checkpoint, RoomActivity, RoomMessage } from './homeserver.js';
import type { BridgePoster } from './poster.js';
import { generateSecret } from './webhooks/secrets.js';
import { WebhookService } from './webhooks/service.js';

/** Power the bridge needs in a room to act there (Moderator). */
export const BRIDGE_REQUIRED_POWER = 50;
/** How long an encrypted message waits for its key before the bridge says it cannot read it. */
const UNDECRYPTABLE_WAIT_MS = 60_000;
/**
 * At most one "I cannot read that" per person and room in this long: in a room whose people's
 * clients never share keys with the bridge (they send only to verified devices), every message is
 * unreadable, and the bridge must not answer each.
 */
const UNDECRYPTABLE_REPLY_INTERVAL_MS = 24 * 60 * 60_000;
const MAX_UNDECRYPTABLE_REPLIES_REMEMBERED = 10_000;
/** Encrypted messages waiting for their keys, at most (the oldest are given up). */
const MAX_WAITING_FOR_KEYS = 1_000;

/** An encrypted message whose key has not come (yet). */
interface WaitingForKey {
  message: RoomMessage;
  timer: NodeJS.Timeout;
}

/** A `!bridge` command as a sync or a transaction brought it. */
interface ReceivedCommand {
  roomId: string;
  sender: string;
  eventId: string;
  command: BridgeCommand;
  secretHeld: boolean;
}

export interface BridgeOptions {
  /** Replaces the network fetch of feeds (tests). */
  fetchFeed?: FeedFetcher | undefined;
  random?: (() => number) | undefined;
  /** How long an undecryptable message waits for its key before the bridge says so (tests). */
  undecryptableWaitMs?: number | undefined;
}

/** Where the bridge lives and what it is allowed. */
export interface BridgeSetup {
  homeserver: BridgeHomeserver;
  /** The bridge's own tables (webhooks, feeds, commands), alone or in a transaction. */
  storage: BridgeStorage;
  config: Config['bridge'];
  clock: Clock;
  /** `ratelimiting_enabled`: the webhooks' rate limit applies only when on. */
  rateLimits: boolean;
  /** Where webhook URLs point (ends with a slash); asked each time, as the listening port may be known only once the server listens. */
  webhookBaseUrl: () => string;
  log: FastifyBaseLogger;
  /** The key file that seals the crypto store's key (`bridge.encryption.key_path` resolved); null: in memory. */
  cryptoKeyPath?: string | null | undefined;
}

export class Bridge implements BridgePoster {
  readonly userId: string;
  readonly webhooks: WebhookService;
  readonly feeds: FeedService;
  /** Where feeds are parsed: a worker thread, off the path of requests. */
  readonly feedParser: FeedParserThread;
  private readonly homeserver: BridgeHomeserver;
  private readonly storage: BridgeStorage;
  private readonly clock: Clock;
  private readonly log: FastifyBaseLogger;
  private readonly webhookBaseUrl: () => string;
  private readonly directMessages: DirectMessages;
  private abort = new AbortController();
  private loop: Promise<void> | undefined;
  /** Each room's commands run one after another; rooms do not wait for each other. */
  private readonly roomQueues = new Map<string, Promise<void>>();
  /** The bridge's crypto device (`bridge.encryption.enabled`): open while the bridge runs, usable once `cryptoReady`. */
  private crypto: CryptoDevice | undefined;
  private readonly cryptoOptions: CryptoDeviceOptions | undefined;
  private cryptoReady = false;
  private readonly waitingForKeys = new Map<string, WaitingForKey>();
  private readonly undecryptableReplied = new Map<string, number>();
  /** Encrypted rooms this process has posted into unencrypted (logged once each). */
  private readonly warnedUnencrypted = new Set<string>();
  private readonly undecryptableWaitMs: number;

  constructor(setup: BridgeSetup, options: BridgeOptions = {}) {
    ({ homeserver: this.homeserver, storage: this.storage, clock: this.clock, log: this.log, webhookBaseUrl: this.webhookBaseUrl } = setup);
    this.userId = setup.homeserver.userId;
    const limiter = new RateLimiter(setup.config.webhooks.rate_limit, setup.clock, setup.rateLimits);
    this.webhooks = new WebhookService(setup.storage, setup.clock, limiter, this);
    this.feedParser = new FeedParserThread({ deadlineMs: setup.config.feeds.parse_timeout_seconds * 1000 });
    this.feeds = new FeedService(setup.storage, setup.config.feeds, setup.clock, this, options.fetchFeed ?? fetchFeed, this.feedParser.parse, setup.log, options.random);
    this.directMessages = new DirectMessages(setup.homeserver);
    this.undecryptableWaitMs = options.undecryptableWaitMs ?? UNDECRYPTABLE_WAIT_MS;
    if (setup.config.encryption.enabled) {
      this.cryptoOptions = { userId: this.userId, storage: setup.storage, transport: setup.homeserver, keyPath: setup.cryptoKeyPath ?? null, log: setup.log };
    }
  }

  /** The bridge's crypto device id, once it has one. */
  get deviceId(): string | undefined {
    return this.cryptoReady ? this.crypto?.deviceId : undefined;
  }

  /**
   * Starts following its rooms and polling feeds. With several server processes only one runs
   * this at a time (a lease); the webhooks work in every process.
   */
  async start(): Promise<void> {
    if (this.abort.signal.aborted) this.abort = new AbortController();
    await this.homeserver.prepare();
    await this.startCrypto();
    // Commands seen before a restart and not finished run first, in their rooms' queues.
    await this.resumeCommands();
    this.loop = this.homeserver.follow((activity, checkpoint) => this.take(activity, checkpoint), this.abort.signal);
    this.feeds.start();
  }

  /** Stops following and polling (start may be called again). */
  async stop(): Promise<void> {
    this.abort.abort();
    await this.loop;
    this.loop = undefined;
    await Promise.allSettled([...this.roomQueues.values()]);
    await this.feeds.stop();
    for (const waiting of this.waitingForKeys.values()) clearTimeout(waiting.timer);
    this.waitingForKeys.clear();
    // Closed, and opened again from the database at the next start: with several processes,
    // another one may hold the bridge (and move the store on) meanwhile.
    this.cryptoReady = false;
    await this.crypto?.close();
    this.crypto = undefined;
  }

  /** Stops for good: the feed parser's thread ends too. */
  async close(): Promise<void> {
    await this.stop();
    await this.feedParser.close();
  }

  /**
   * Opens the crypto device from the database and makes it the bridge's device on the
   * homeserver. Without it the bridge still works, in rooms that are not encrypted.
   */
  private async startCrypto(): Promise<void> {
    if (!this.cryptoOptions || this.crypto) return;
    const crypto = new CryptoDevice(this.cryptoOptions);
    this.crypto = crypto;
    try {
      await crypto.open();
      await this.homeserver.useDevice(crypto.deviceId, BRIDGE_DEVICE_NAME);
      await crypto.start();
      this.cryptoReady = true;
      // Before the server listens: the first info line of a start is the listening one.
      this.log.debug({ device: crypto.deviceId }, 'bridge crypto device ready: encrypted rooms are supported');
    } catch (err) {
      this.log.error({ err }, 'the bridge’s crypto device could not start: it cannot read or post in encrypted rooms');
      await crypto.close().catch(() => undefined);
      this.crypto = undefined;
    }
  }

  // ---- BridgePoster ----

  async isActiveIn(roomId: string): Promise<boolean> {
    return (await this.homeserver.membership(roomId, this.userId)) === 'join';
  }

  async post(roomId: string, content: JsonObject, txnId?: string): Promise<string> {
    // What the bridge posts carries text from elsewhere (payloads, feeds, names). An explicit empty
    // m.mentions (intentional mentions) keeps an "@room" in it from notifying the whole room, which
    // the bridge, as Moderator, otherwise could.
    const withMentions = 'm.mentions' in content ? content : { ...content, 'm.mentions': {} };
    // In an encrypted room, encrypted for its members' devices (people's clients warn of anything else).
    const encryption = this.cryptoOptions ? await this.homeserver.encryption(roomId) : undefined;
    if (encryption && this.crypto && this.cryptoReady) {
      const members = await this.homeserver.members(roomId);
      const encrypted = await this.crypto.encrypt(roomId, 'm.room.message', withMentions, members, encryption);
      return this.homeserver.send(roomId, 'm.room.encrypted', encrypted, txnId);
    }
    if (encryption) {
      // Never in clear into an encrypted room: what people were promised is encrypted would reach
      // every server of the room readable. Another process holds the bridge (several processes),
      // or its device failed to start: the sender is told to try again (webhook senders retry a 503).
      if (!this.warnedUnencrypted.has(roomId)) {
        if (this.warnedUnencrypted.size >= MAX_UNDECRYPTABLE_REPLIES_REMEMBERED) this.warnedUnencrypted.clear();
        this.warnedUnencrypted.add(roomId);
        this.log.warn({ room: roomId }, 'a post into an encrypted room was refused: the bridge’s crypto device is not open in this process');
      }
      throw new MatrixError('M_UNKNOWN', 'The room is encrypted and the bridge cannot encrypt from this server process right now; try again shortly.', {
        status: 503,
        headers: { 'Retry-After': '5' },
      });
    }
    return this.homeserver.send(roomId, 'm.room.message', withMentions, txnId);
  }

  // ---- following rooms ----

  /**
   * A batch of what happened in the bridge's rooms. Its commands are recorded with the batch's
   * checkpoint, before acting: after a crash the homeserver goes on from here and the recorded
   * commands run (resumeCommands), none lost.
   */
  private async take(activity: RoomActivity, checkpoint: Checkpoint): Promise<void> {
    // Room keys first (and written to the database before the checkpoint below commits), so the
    // batch's own encrypted messages can be read.
    if (activity.device && this.crypto && this.cryptoReady) await this.crypto.receive(activity.device);
    // The first batch ever is history: commands in it were meant for nobody here yet.
    const messages = activity.initial ? [] : await this.readable(activity.messages.filter((message) => message.sender !== this.userId));
    if (activity.device && activity.device.toDevice.length > 0) messages.push(...(await this.retryWaiting()));
    const commands = messages.flatMap((message) => this.commandOf(message.roomId, message.sender, message.eventId, message.content) ?? []);
    const now = this.clock.now();
    await this.storage.transaction(async (stores) => {
      if (commands.length > 0) await stores.bridge.insertCommands(commands.map((command) => ({ event_id: command.eventId, room_id: command.roomId, received_ts: now })));
      await checkpoint(stores);
    });
    for (const roomId of activity.invites) this.inRoom(roomId, () => this.acceptInvite(roomId));
    for (const roomId of activity.leaves) this.inRoom(roomId, () => this.leftRoom(roomId));
    for (const command of commands) this.inRoom(command.roomId, () => this.runRecorded(command));
  }

  // ---- encrypted messages ----

  /** The messages as the bridge can read them: encrypted ones decrypted; those without a key yet wait for it. */
  private async readable(messages: readonly RoomMessage[]): Promise<RoomMessage[]> {
    const readable: RoomMessage[] = [];
    for (const message of messages) {
      if (message.type !== 'm.room.encrypted') {
        readable.push(message);
        continue;
      }
      if (!this.crypto || !this.cryptoReady) continue;
      const result = await this.crypto.decrypt(message.roomId, message.event);
      if ('content' in result) {
        if (result.type === 'm.room.message') readable.push({ ...message, type: result.type, content: result.content });
      } else {
        this.cannotDecrypt(message, result);
      }
    }
    return readable;
  }

  /** Messages that waited for their keys and can now be read (keys came with this batch). */
  private async retryWaiting(): Promise<RoomMessage[]> {
    if (!this.crypto || this.waitingForKeys.size === 0) return [];
    const readable: RoomMessage[] = [];
    for (const [eventId, waiting] of [...this.waitingForKeys]) {
      const result = await this.crypto.decrypt(waiting.message.roomId, waiting.message.event);
      if (!('content' in result)) {
        if (result.reason === 'withheld') this.cannotDecrypt(waiting.message, result);
        continue;
      }
      clearTimeout(waiting.timer);
      this.waitingForKeys.delete(eventId);
      if (result.type === 'm.room.message') readable.push({ ...waiting.message, type: result.type, content: result.content });
    }
    return readable;
  }

  /**
   * A message the bridge cannot read. A key that may still come is waited for (a sender's client
   * shares it just after sending, sometimes later); one that was withheld, or has not come after
   * a minute, gets one short reply, as the message may have been a command.
   */
  private cannotDecrypt(message: RoomMessage, failure: DecryptionFailure): void {
    const existing = this.waitingForKeys.get(message.eventId);
    if (failure.reason === 'missing-key') {
      if (existing) return;
      if (this.waitingForKeys.size >= MAX_WAITING_FOR_KEYS) {
        const [oldest] = this.waitingForKeys.keys();
        clearTimeout(this.waitingForKeys.get(oldest!)!.timer);
        this.waitingForKeys.delete(oldest!);
      }
      const timer = setTimeout(() => {
        if (this.waitingForKeys.delete(message.eventId)) this.inRoom(message.roomId, () => this.sayUndecryptable(message, 'its key never reached my device'));
      }, this.undecryptableWaitMs);
      timer.unref();
      this.waitingForKeys.set(message.eventId, { message, timer });
      return;
    }
    if (existing) {
      clearTimeout(existing.timer);
      this.waitingForKeys.delete(message.eventId);
    }
    this.log.warn({ room: message.roomId, event: message.eventId, reason: failure.message }, 'bridge could not decrypt a message');
    const why = failure.reason === 'withheld' ? `the sender’s client withheld its key (${failure.message})` : 'it did not decrypt';
    this.inRoom(message.roomId, () => this.sayUndecryptable(message, why));
  }

  private async sayUndecryptable(message: RoomMessage, why: string): Promise<void> {
    const now = Date.now();
    const key = `${message.roomId} ${message.sender}`;
    const last = this.undecryptableReplied.get(key);
    if (last !== undefined && now - last < UNDECRYPTABLE_REPLY_INTERVAL_MS) return;
    if (this.undecryptableReplied.size >= MAX_UNDECRYPTABLE_REPLIES_REMEMBERED) this.undecryptableReplied.clear();
    this.undecryptableReplied.set(key, now);
    this.log.info({ room: message.roomId, event: message.eventId }, 'bridge could not read an encrypted message; said so');
    await this.notice(
      message.roomId,
      `I could not read this encrypted message: ${why}. If it was a !bridge command, please send it again (your client shares its keys with my device, ${this.crypto?.deviceId ?? 'unknown'}, when it sends).`,
      message.eventId,
    );
  }

  private commandOf(roomId: string, sender: string, eventId: string, content: JsonObject): ReceivedCommand | undefined {
    // Notices are what bots say; answering them is how bots end up talking to each other forever.
    if (content.msgtype !== 'm.text' || typeof content.body !== 'string') return undefined;
    const command = parseCommand(content.body);
    return command ? { roomId, sender, eventId, command, secretHeld: holdsSecret(content.body) } : undefined;
  }

  /** Runs a recorded command; once done (or failed), it is no longer pending. */
  private async runRecorded(received: ReceivedCommand): Promise<void> {
    try {
      await this.run(received.roomId, received.sender, received.eventId, received.command, received.secretHeld);
    } finally {
      await this.storage.bridge.deleteCommand(received.eventId);
    }
  }

  /**
   * Commands recorded and not finished when the bridge stopped. One the bridge has already
   * answered (it stopped between answering and the record's deletion) is not run again; one
   * whose message is gone (a secret the bridge redacted before stopping) is asked for again.
   */
  private async resumeCommands(): Promise<void> {
    for (const row of await this.storage.bridge.pendingCommands()) {
      this.inRoom(row.room_id, async () => {
        const done = () => this.storage.bridge.deleteCommand(row.event_id);
        const event = await this.readEvent(row.room_id, row.event_id);
        if (!event || (await this.homeserver.hasAnswered(row.room_id, row.event_id))) return done();
        const received = this.commandOf(row.room_id, event.sender, row.event_id, event.content);
        if (received) return this.runRecorded(received);
        if (event.redacted) await this.notice(row.room_id, 'I was restarted before I could finish that command; please say it again.', row.event_id);
        return done();
      });
    }
  }

  /**
   * An event as the bridge reads it: decrypted when it is encrypted (its content empty when the
   * bridge has no key for it), or undefined when the bridge cannot see it.
   */
  async readEvent(roomId: string, eventId: string): Promise<{ sender: string; type: string; content: JsonObject; redacted: boolean } | undefined> {
    const event = await this.homeserver.event(roomId, eventId);
    if (!event || event.type !== 'm.room.encrypted' || event.redacted) return event;
    if (!this.crypto || !this.cryptoReady) return { ...event, content: {} };
    const decrypted = await this.crypto.decrypt(roomId, event.event);
    return 'content' in decrypted ? { ...event, type: decrypted.type, content: decrypted.content } : { ...event, content: {} };
  }

  private inRoom(roomId: string, work: () => Promise<void>): void {
    const previous = this.roomQueues.get(roomId) ?? Promise.resolve();
    const next = previous.then(work).catch((err: unknown) => this.log.error({ err, room: roomId }, 'bridge action failed'));
    this.roomQueues.set(roomId, next);
    void next.finally(() => {
      if (this.roomQueues.get(roomId) === next) this.roomQueues.delete(roomId);
    });
  }

  private async acceptInvite(roomId: string): Promise<void> {
    // Invited means not joined: whatever the room had from an earlier stay has ended, even if the
    // kick and the new invite came so close together that this sync shows only the invite.
    await this.leftRoom(roomId);
    try {
      await this.homeserver.join(roomId);
    } catch (err) {
      this.log.warn({ err, room: roomId }, 'bridge could not join a room it was invited to');
      return;
    }
    if (await this.directMessages.isDirectRoom(roomId)) return;
    const { bridge } = await this.powers(roomId, this.userId);
    await this.notice(roomId, joinGreeting(bridge, BRIDGE_REQUIRED_POWER));
  }

  /** Left, kicked or banned: the room's webhooks and feeds end (a new invite starts afresh). */
  private async leftRoom(roomId: string): Promise<void> {
    if (await this.isActiveIn(roomId)) return;
    const webhooks = await this.webhooks.removeAllOf(roomId);
    const feeds = await this.feeds.removeAllOf(roomId);
    if (webhooks + feeds > 0) this.log.info({ room: roomId, webhooks, feeds }, 'bridge left a room; its webhooks and feeds are removed');
  }

  // ---- commands ----

  private async run(roomId: string, sender: string, eventId: string, command: BridgeCommand, secretHeld: boolean): Promise<void> {
    // A secret must not stay readable in the room's history, whether or not the command is done.
    let note = '';
    if (secretHeld) {
      note = (await this.redactQuietly(roomId, eventId))
        ? ' I removed your message, as it held a secret.'
        : ' I could not remove your message, which holds a secret: please redact it.';
    }
    const reply = (body: string) => this.notice(roomId, body + note, eventId);
    switch (command.kind) {
      case 'usage':
        return reply(command.message);
      case 'help':
        return reply(HELP_LINES.join('\n'));
      case 'webhook-list': {
        const webhooks = await this.webhooks.list(roomId);
        const names = webhooks.map((webhook) => (webhook.signed ? `${webhook.name} (signed)` : webhook.name));
        return reply(names.length === 0 ? 'This room has no webhooks.' : `Webhooks in this room: ${names.join(', ')}`);
      }
      case 'feed-list':
        return reply(await this.describeFeeds(roomId));
      default:
        break;
    }
    const refusal = await this.managementRefusal(roomId, sender);
    if (refusal) return reply(refusal);
    switch (command.kind) {
      case 'webhook-create':
        return this.createWebhook(roomId, sender, command.name, reply);
      case 'webhook-secret':
        return this.setWebhookSecret(roomId, sender, command.name, command.secret, reply);
      case 'webhook-remove': {
        const removed = await this.webhooks.remove(roomId, command.name);
        if (removed) this.log.info({ room: roomId, user: sender, webhook: command.name }, 'webhook removed');
        return reply(removed ? `Removed the webhook "${command.name}"; its URL no longer works.` : `This room has no webhook named "${command.name}".`);
      }
      case 'feed-add':
        return this.addFeed(roomId, sender, command.url, command.label, reply);
      case 'feed-remove': {
        const removed = await this.feeds.unsubscribe(roomId, command.url);
        if (removed) this.log.info({ room: roomId, user: sender, feed: command.url }, 'feed removed');
        return reply(removed ? `This room no longer follows ${command.url}.` : `This room does not follow ${command.url}.`);
      }
    }
  }

  /** Why the sender may not manage this room's webhooks and feeds (or the bridge may not act). */
  private async managementRefusal(roomId: string, sender: string): Promise<string | undefined> {
    const { bridge, sender: senderPower, stateDefault } = await this.powers(roomId, sender);
    if (bridge < BRIDGE_REQUIRED_POWER) {
      return `Sorry, I need power level ${BRIDGE_REQUIRED_POWER} (Moderator) in this room to do that, and I have ${bridge}. A room admin can give it to me.`;
    }
    if (senderPower < stateDefault) {
      return `Sorry, managing webhooks and feeds here takes power level ${stateDefault}, and you have ${senderPower}.`;
    }
    return undefined;
  }

  private async powers(roomId: string, sender: string): Promise<{ bridge: number; sender: number; stateDefault: number }> {
    const powers = await this.homeserver.powers(roomId);
    if (!powers) return { bridge: 0, sender: 0, stateDefault: 0 };
    return { bridge: powers.of(this.userId), sender: powers.of(sender), stateDefault: powers.stateDefault };
  }

  private async createWebhook(roomId: string, sender: string, name: string, reply: (body: string) => Promise<void>, secret?: string): Promise<void> {
    const created = await this.webhooks.create(roomId, name, sender, secret);
    if ('refused' in created) return reply(created.refused);
    const sent = await this.sendCredentials(roomId, sender, name, created.id, secret, 'created');
    if (!sent) {
      await this.webhooks.remove(roomId, name);
      return reply(`I could not send you a direct message, so I did not create the webhook "${name}". Please try again.`);
    }
    const what = secret === undefined ? 'its URL' : 'its URL and secret';
    this.log.info({ room: roomId, user: sender, webhook: name, signed: secret !== undefined }, 'webhook created');
    return reply(`Created the webhook "${name}". I have sent ${what} to ${sender} in a direct message.`);
  }

  /**
   * `webhook <name> secret …`. A secret is sealed with the webhook's id, which is stored only hashed,
   * so setting one also issues a new URL (a webhook that does not exist yet is created with it).
   */
  private async setWebhookSecret(roomId: string, sender: string, name: string, request: SecretRequest, reply: (body: string) => Promise<void>): Promise<void> {
    if (request.action === 'clear') {
      const cleared = await this.webhooks.clearSecret(roomId, name);
      if (cleared) this.log.info({ room: roomId, user: sender, webhook: name }, 'webhook secret cleared');
      return reply(cleared ? `The webhook "${name}" no longer checks signatures; its URL is unchanged.` : `This room has no webhook named "${name}".`);
    }
    const secret = request.action === 'set' ? request.value : generateSecret();
    const rekeyed = await this.webhooks.rekey(roomId, name, secret);
    // No webhook of that name yet: create it, with the secret.
    if (!rekeyed) return this.createWebhook(roomId, sender, name, reply, secret);
    this.log.info({ room: roomId, user: sender, webhook: name }, 'webhook secret set (new URL)');
    const sent = await this.sendCredentials(roomId, sender, name, rekeyed.id, secret, 'rekeyed');
    if (!sent) return reply(`The webhook "${name}" now has a new URL and secret, but I could not send them to you by direct message: say the command again.`);
    return reply(`The webhook "${name}" now requires signed requests. Its old URL has stopped working; I have sent the new URL and the secret to ${sender} in a direct message.`);
  }

  /** Sends a webhook's URL (and secret) by direct message; false when that failed. */
  private async sendCredentials(roomId: string, sender: string, name: string, id: string, secret: string | undefined, why: 'created' | 'rekeyed'): Promise<boolean> {
    const url = `${this.webhookBaseUrl()}webhook/${id}`;
    const roomName = await this.roomName(roomId);
    const opening = why === 'created' ? `Your webhook "${name}" for ${roomName} is ready.` : `Your webhook "${name}" for ${roomName} has a new URL; the old one no longer works.`;
    const lines = [`${opening} Keep this URL secret: anyone who has it can post to the room.`, url];
    if (secret === undefined) {
      lines.push(`Post JSON such as {"text": "Hello"} to it with PUT or POST; GitHub, GitLab, Gitea, Forgejo, Alertmanager, Grafana, Sentry and Slack-style senders are understood too.`);
    } else {
      lines.push(
        'Requests must now prove they know this secret:',
        secret,
        'Paste it as the "Secret" (GitHub, Gitea, Forgejo) or "Secret token" (GitLab), or send it as "Authorization: Bearer <secret>" (Alertmanager, Grafana, curl). Sentry signs with its own client secret: set that one with "!bridge webhook <name> secret <client secret>".',
      );
    }
    lines.push(`To revoke it, say "!bridge webhook remove ${name}" in the room.`);
    try {
      // A new DM is encrypted when the command came from an encrypted room; an existing one is used as it is.
      const encrypted = this.cryptoReady && (await this.homeserver.encryption(roomId)) !== undefined;
      const dm = await this.directMessages.roomWith(sender, encrypted);
      await this.post(dm, { msgtype: 'm.notice', body: lines.join('\n') });
      return true;
    } catch (err) {
      this.log.warn({ err, room: roomId }, 'sending a webhook URL by direct message failed');
      return false;
    }
  }

  private async redactQuietly(roomId: string, eventId: string): Promise<boolean> {
    try {
      await this.homeserver.redact(roomId, eventId, 'held a webhook secret');
      return true;
    } catch (err) {
      if (!(err instanceof MatrixError)) throw err;
      this.log.warn({ err, room: roomId }, 'could not redact a message that held a webhook secret');
      return false;
    }
  }

  private async addFeed(roomId: string, sender: string, url: string, label: string | undefined, reply: (body: string) => Promise<void>): Promise<void> {
    try {
      const result = await this.feeds.subscribe(roomId, url, label, sender);
      const name = clip(label ?? result.title ?? url, 200);
      const existing =
        result.existingItems === 0
          ? 'It has no items yet; new ones will be posted.'
          : result.existingItems === 1
            ? 'Its current item is not posted; new ones will be.'
            : `Its current ${result.existingItems} items are not posted; new ones will be.`;
      this.log.info({ room: roomId, user: sender, feed: url }, 'feed added');
      return reply(`This room now follows ${name} (${url}). ${existing}`);
    } catch (err) {
      if (err instanceof SubscriptionRefused) return reply(err.message);
      if (err instanceof FeedError && err.privateAddress) {
        this.log.warn({ room: roomId, user: sender, feed: url, reason: err.message }, 'feed refused: not on a public address (bridge.feeds.allow_private_addresses)');
      }
      if (err instanceof FeedError) return reply(`I could not add ${url}: ${feedFailureReason(err)}.`);
      throw err;
    }
  }

  private async describeFeeds(roomId: string): Promise<string> {
    const feeds = await this.feeds.list(roomId);
    if (feeds.length === 0) return 'This room follows no feeds.';
    const now = this.clock.now();
    const lines = feeds.map((feed) => {
      const name = clip(feed.label ?? feed.title ?? feed.url, 200);
      const success = feed.lastSuccessTs === null ? 'never fetched successfully' : `last fetched ${ago(now - feed.lastSuccessTs)}`;
      const error = feed.failures > 0 && feed.lastError ? `; failing (${feed.failures}×): ${feed.lastError}` : '';
      return `• ${name}: ${feed.url} (${success}${error})`;
    });
    return [`Feeds this room follows:`, ...lines].join('\n');
  }

  private async roomName(roomId: string): Promise<string> {
    const { name, alias } = await this.homeserver.roomNames(roomId);
    if (name !== undefined && name.trim() !== '') return `the room "${name}"`;
    return alias ?? roomId;
  }

  private async notice(roomId: string, body: string, inReplyTo?: string): Promise<void> {
    const content: JsonObject = { msgtype: 'm.notice', body };
    if (inReplyTo) content['m.relates_to'] = { 'm.in_reply_to': { event_id: inReplyTo } };
    try {
      await this.post(roomId, content);
    } catch (err) {
      if (err instanceof MatrixError) this.log.warn({ err, room: roomId }, 'bridge could not post');
      else throw err;
    }
  }
}

function ago(ms: number): string {
  const seconds = Math.max(0, Math.round(ms / 1000));
  if (seconds < 90) return `${seconds} s ago`;
  const minutes = Math.round(seconds / 60);
  if (minutes < 90) return `${minutes} min ago`;
  const hours = Math.round(minutes / 60);
  if (hours < 36) return `${hours} h ago`;
  return `${Math.round(hours / 24)} days ago`;
}
