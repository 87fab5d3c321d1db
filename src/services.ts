/**
 * Wires the domain services together. Passed explicitly (no global singletons), so a test, the
 * CLI and the HTTP app each build exactly what they use.
 */
import { ErasedUsers } from './users/erased-users.js';
import { readFileSync } from 'node:fs';
import { AccountDataService } from './account-data/account-data-service.js';
import type { Clock } from './core/clock.js';
import type { Config } from './config/index.js';
import type { JsonObject } from './rooms/events.js';
import { Limiters } from './ratelimit/limiters.js';
import { blobStoreFor, MediaService } from './media/media-service.js';
import type { Signer } from './core/signed-json.js';
import { Federation, type FederationTestHooks } from './federation/federation.js';
import { loadOrCreateSigningKey, signingKeyPathFor } from './federation/signing-key.js';
import { EventWriter, OutlierPositions } from './rooms/event-writer.js';
import { StateGroupIds, StateGroups } from './rooms/state-groups.js';
import { EventGraph } from './rooms/event-graph.js';
import { RemoteEvents } from './rooms/remote-events.js';
import { FederationSender } from './federation/sender.js';
import { FederatedMembership } from './federation/membership.js';
import { FederatedMediaSource } from './federation/media.js';
import { RoomFederation } from './federation/room-federation.js';
import { Backfiller } from './federation/backfill.js';
import { SearchIndexer } from './rooms/search-indexer.js';
import { RateLimiter } from './ratelimit/rate-limiter.js';
import { ProfileService } from './rooms/profile-service.js';
import { ReceiptService } from './rooms/receipts-service.js';
import { RoomCache } from './rooms/room-cache.js';
import { RoomHistory, RoomReader } from './rooms/room-reader.js';
import { RoomService } from './rooms/room-service.js';
import { UserDirectory } from './rooms/user-directory.js';
import { guestsToRemove } from './rooms/guest-access.js';
import { LegacySync } from './sync/legacy-sync.js';
import { GLOBAL_ACCOUNT_DATA, postgresSchemaOf, STATE_GROUP_ID_BLOCK, type Storage } from './storage/index.js';
import { Notifier } from './sync/notifier.js';
import { StreamCounter } from './sync/stream.js';
import { SyncService } from './sync/sync-service.js';
import { ToDeviceService } from './sync/to-device.js';
import { PresenceService } from './sync/presence.js';
import { PushRulesService } from './push/push-rules-service.js';
import { TypingTracker } from './sync/typing.js';
import { UnreadCounts } from './sync/unread.js';
import { AccountService } from './users/account-service.js';
import { PasswordHasher } from './users/passwords.js';
import { RegistrationService } from './users/registration-service.js';
import { serviceLocalparts } from './users/service-users.js';
import { SessionService } from './users/session-service.js';
import { AppServiceRegistry } from './appservices/registry.js';
import { AppServiceClient } from './appservices/appservice-client.js';
import { AppServiceSender } from './appservices/appservice-sender.js';
import { AppServices } from './appservices/appservices.js';
import { DEVICE_LIST_RESYNCS_PER_ORIGIN, KeysService } from './e2e/keys-service.js';
import { PushGatewayClient } from './push/gateway-client.js';
import { PusherSender } from './push/pusher-sender.js';
import { cidrRefusal } from './net/address-guard.js';
import { KeyBackupService } from './e2e/key-backup.js';
import { Cluster, SHARED_LIMITERS } from './cluster/cluster.js';

/** How long a request to an application service may take. */
const APPSERVICE_TIMEOUT_MS = 30_000;
import { DeviceService } from './users/device-service.js';
import { BotOwnership } from './portal/bot-ownership.js';
import type { BotPortal } from './portal/portal.js';
import { PasswordAuth } from './users/password-auth.js';

export interface Services {
  config: Config;
  clock: Clock;
  storage: Storage;
  limiters: Limiters;
  /** Signs this server's events and requests. */
  signer: Signer;
  writer: EventWriter;
  federation: Federation;
  accounts: AccountService;
  sessions: SessionService;
  registration: RegistrationService;
  devices: DeviceService;
  /** User-interactive auth by password, for deleting devices, changing the password, deactivating. */
  passwordAuth: PasswordAuth;
  stream: StreamCounter;
  notifier: Notifier;
  roomCache: RoomCache;
  rooms: RoomService;
  roomReader: RoomReader;
  history: RoomHistory;
  legacySync: LegacySync;
  typing: TypingTracker;
  receipts: ReceiptService;
  accountData: AccountDataService;
  profiles: ProfileService;
  sync: SyncService;
  toDevice: ToDeviceService;
  presence: PresenceService;
  pushRules: PushRulesService;
  /** Delivers notifications to push gateways (a leased job where several processes run). */
  pusherSender: PusherSender;
  pushGateways: PushGatewayClient;
  userDirectory: UserDirectory;
  media: MediaService;
  /** The room side of federation as served to other servers. */
  roomFederation: RoomFederation;
  backfiller: Backfiller;
  searchIndexer: SearchIndexer;
  /** Outbound federation: a queue per destination. */
  federationSender: FederationSender;
  /** Application services registered by `app_service_config_files`. */
  appservices: AppServices;
  /** End-to-end encryption keys and device lists. */
  keys: KeysService;
  /** Server-side key backup (`/room_keys`). */
  keyBackup: KeyBackupService;
  /** The other processes on the same PostgreSQL database (started by the app); undefined on SQLite. */
  cluster: Cluster | undefined;
  /** Bots' owners, grants of the right to create bots, the audit log (CLI, admin API, portal). */
  bots: BotOwnership;
  /** The bot portal, when `portal:` is configured. */
  portal: BotPortal | undefined;
}

export interface ServiceOptions {
  /** Tests: federation between instances without DNS. */
  federation?: FederationTestHooks | undefined;
}

export async function createServices(config: Config, storage: Storage, clock: Clock, options: ServiceOptions = {}): Promise<Services> {
  const hasher = new PasswordHasher(config.password_hashing);
  const appserviceRegistry = new AppServiceRegistry(config.app_services, config.server_name);
  const limiters = new Limiters(config, clock, storage, (userId) => appserviceRegistry.isExemptFromLimits(userId));
  const sessions = new SessionService(storage, config, clock, hasher, limiters, appserviceRegistry);
  const accounts = new AccountService(storage, config.server_name, clock, hasher, serviceLocalparts(config), (userId) => appserviceRegistry.exclusiveOwnerOfUser(userId) !== undefined);
  const registration = new RegistrationService(config, clock, accounts, sessions, limiters);

  // The stream continues from the newest position on disk, so tokens from before a restart stay valid.
  const stream = new StreamCounter(
    Math.max(await storage.rooms.maxStreamOrdering(), await storage.userData.maxStreamOrdering(), await storage.deviceInbox.lastPosition(), await storage.e2e.maxStreamOrdering()),
  );
  const notifier = new Notifier();
  const roomCache = new RoomCache(storage, { roomStateEvents: config.caches.room_state_events, userRoomLists: config.caches.user_room_lists });
  const signer = loadOrCreateSigningKey(signingKeyPathFor(config), config.server_name);
  // Processes sharing a PostgreSQL database take state group ids in blocks and read the lowest
  // outlier position again before taking more; one process counts in memory.
  const schema = postgresSchemaOf(storage.db);
  const stateGroupIds = schema === undefined
    ? new StateGroupIds(await storage.rooms.maxStateGroup())
    : new StateGroupIds(0, { size: STATE_GROUP_ID_BLOCK, reserve: () => storage.cluster.reserveStateGroupIds() });
  const outlierPositions = new OutlierPositions(await storage.rooms.minStreamOrdering(), schema === undefined ? undefined : () => storage.rooms.minStreamOrdering());
  const writer = new EventWriter(storage, roomCache, stream, notifier, clock, signer, stateGroupIds, outlierPositions);
  const federation = new Federation(config, signer, storage, clock, options.federation);
  const stateGroups = new StateGroups(storage, stateGroupIds);
  const graph = new EventGraph(storage, stateGroups);
  const remoteEvents = new RemoteEvents(graph, stateGroups, roomCache, writer);
  const federationSender = new FederationSender(storage, federation.client, graph, roomCache, clock, {
    serverName: config.server_name,
    minRetryMs: config.federation.min_retry_interval,
    maxRetryMs: config.federation.max_retry_interval,
  });
  // The outbox is written in the same transaction as the events it sends.
  writer.onWrite(federationSender.enqueueHook, federationSender.enqueueProbe);
  writer.onCommit(federationSender.commitListener);
  // A redacted event is served to other servers redacted from then on.
  writer.onCommit((events) => {
    for (const event of events) if (event.redacts !== undefined) graph.forget(event.redacts);
  });
  const appserviceClient = new AppServiceClient({ timeoutMs: APPSERVICE_TIMEOUT_MS });
  const appserviceSender = new AppServiceSender(appserviceRegistry, storage, appserviceClient, roomCache, clock, {
    minRetryMs: config.federation.min_retry_interval,
    maxRetryMs: config.federation.max_retry_interval,
  });
  // Also queued in the events' own transaction: a restart loses nothing an appservice is owed.
  writer.onWrite(appserviceSender.enqueueHook, appserviceSender.enqueueProbe);
  writer.onCommit(appserviceSender.commitListener);
  sessions.onAppserviceSeen = (serviceId) => appserviceSender.heardFrom(serviceId);
  const appservices = new AppServices(appserviceRegistry, appserviceSender, appserviceClient, accounts, sessions, config.server_name);
  const membership = new FederatedMembership({ signer, client: federation.client, keyRing: federation.keyRing, remote: remoteEvents, storage, cache: roomCache, stream, notifier, clock });
  const erasedUsers = new ErasedUsers(storage);
  accounts.erasedUsers = erasedUsers;
  const roomReader = new RoomReader(storage, roomCache, stream, clock, () => erasedUsers.all());
  // SQLite: search rows follow the commit, a batch at a time.
  const searchIndexer = new SearchIndexer(storage, stream);
  if (searchIndexer.active) {
    writer.onCommit(() => searchIndexer.committed());
    roomReader.useSearchIndexer(searchIndexer);
  }
  // Set below, once account data exists (history hides the messages of ignored users).
  let ignoredUsersOf = async (_userId: string): Promise<ReadonlySet<string>> => new Set();
  const history = new RoomHistory(roomReader, stream, (userId) => ignoredUsersOf(userId));
  const rooms = new RoomService(storage, config, clock, roomCache, writer, roomReader, limiters, membership, appservices);
  // Guest access ended (by us or another server): our guests in the room leave, as in Synapse.
  writer.onCommit((events, room) => {
    const guests = guestsToRemove(events, room, config.server_name);
    if (guests.length > 0) setImmediate(() => void leaveAsGuests(guests, room.roomId));
  });
  const leaveAsGuests = async (userIds: readonly string[], roomId: string): Promise<void> => {
    for (const userId of userIds) {
      // An upgraded guest's membership still says `kind: guest`; only accounts that are guests leave.
      if ((await accounts.getUser(userId).catch(() => undefined))?.is_guest !== 1) continue;
      await rooms.leave({ userId, deviceId: '', accessTokenId: 0, isGuest: true }, roomId, 'Guest access has been disabled').catch(() => undefined);
    }
  };
  const typing = new TypingTracker(roomCache, notifier);
  const accountData = new AccountDataService(storage, stream, notifier, roomCache);
  ignoredUsersOf = (userId) => accountData.ignoredUsers(userId);
  const pushRules = new PushRulesService(storage, clock, (userId, type, content) => accountData.write(userId, GLOBAL_ACCOUNT_DATA, type, content));
  const unread = new UnreadCounts(storage, (userId) => pushRules.compiledRules(userId));
  const receipts = new ReceiptService(storage, stream, notifier, roomReader, accountData, clock, unread);
  const profiles = new ProfileService(storage, rooms, limiters, config.server_name, membership, appservices);
  const toDevice = new ToDeviceService(storage, stream, notifier, clock, config.server_name, {
    send: (server, content) => federationSender.queueEdu([server], { edu_type: 'm.direct_to_device', content }),
  }, { perSender: config.to_device.max_per_sender, perDevice: config.to_device.max_per_device });
  const presence = new PresenceService(storage, stream, notifier, roomCache, clock, config.server_name, config.presence.enabled, {
    send: (servers, edu) => federationSender.sendEphemeral(servers, edu),
  });
  // New roommates on other servers learn each other's presence (they would hear only of changes).
  writer.onCommit((events, room) => presence.membersJoined(events, room));
  // Device-list resyncs another server's updates can make us start: a burst, then one every 10 s.
  const resyncsPerOrigin = new RateLimiter(DEVICE_LIST_RESYNCS_PER_ORIGIN, clock);
  const keys = new KeysService(storage, stream, notifier, roomCache, config.server_name, {
    query: async (server, deviceKeys, timeoutMs) => federation.client.request<JsonObject>(server, { method: 'POST', path: '/_matrix/federation/v1/user/keys/query', body: { device_keys: deviceKeys }, timeoutMs }),
    claim: async (server, oneTimeKeys, timeoutMs) => federation.client.request<JsonObject>(server, { method: 'POST', path: '/_matrix/federation/v1/user/keys/claim', body: { one_time_keys: oneTimeKeys }, timeoutMs }),
    // Kept in the outbox: a device-list update lost would leave other servers with stale keys.
    sendEdus: (servers, edus) => {
      for (const edu of edus) void federationSender.queueEdu(servers, { ...edu }).catch(() => undefined);
    },
    devices: async (server, userId, timeoutMs) => federation.client.request<JsonObject>(server, { method: 'GET', path: `/_matrix/federation/v1/user/devices/${encodeURIComponent(userId)}`, timeoutMs }),
    mayResync: (server) => resyncsPerOrigin.check(server).allowed,
  });
  // What other servers can make us fetch, per server over time: inbound requests and backfills alike.
  const fetchesPerOrigin = new RateLimiter(config.federation.inbound_fetch.per_origin, clock);
  const fetchLimits = {
    maxRequests: config.federation.inbound_fetch.max_requests,
    maxEvents: config.federation.inbound_fetch.max_events,
    maxBytes: config.federation.inbound_fetch.max_bytes,
    deadlineMs: config.federation.inbound_fetch.deadline,
  };
  // Gaps in rooms' timelines (events from a long silence) are filled from the rooms' servers.
  const backfiller = new Backfiller({
    storage, cache: roomCache, remote: remoteEvents, client: federation.client, keyRing: federation.keyRing, clock, serverName: config.server_name,
    backgroundEvents: config.federation.backfill.background_events, fetchLimits, perOrigin: fetchesPerOrigin,
    requestTimeoutMs: config.federation.request_timeout, maxResponseBytes: config.federation.max_response_bytes,
  });
  remoteEvents.onGap((roomId) => backfiller.fillInBackground(roomId));
  history.useGapFiller(backfiller, config.federation.backfill.messages_wait);
  // Several processes on one PostgreSQL database share the stream, caches and jobs through it.
  const cluster = schema === undefined ? undefined : new Cluster(storage, schema, stream);
  const roomFederation = new RoomFederation({
    erased: () => erasedUsers.all(),
    signer, storage, cache: roomCache, graph, remote: remoteEvents, keyRing: federation.keyRing, client: federation.client, sender: federationSender,
    typing, receipts, clock, toDevice, presence, keys,
    membership, claims: cluster,
    fetching: {
      limits: fetchLimits,
      perOrigin: fetchesPerOrigin,
      requestTimeoutMs: config.federation.request_timeout,
      maxResponseBytes: config.federation.max_response_bytes,
    },
    userExists: async (userId) => {
      const user = await storage.users.get(userId);
      return user !== undefined && user.deactivated !== 1;
    },
  });
  sendEphemeralOfLocalUsers(config.server_name, roomCache, typing, receipts, federationSender);
  sendEphemeralToAppservices(typing, receipts, appserviceSender);
  const devicesRemoved = async (userId: string, deviceIds?: readonly string[]): Promise<void> => {
    await keys.devicesRemoved(userId, deviceIds);
    await pushRules.devicesRemoved(userId);
  };
  sessions.devicesRemoved = devicesRemoved;
  sessions.deviceAdded = (userId, deviceId) => keys.deviceChanged(userId, deviceId);
  accounts.devicesRemoved = devicesRemoved;
  // Notifications to push gateways, after each commit (never in it).
  const pushGateways = new PushGatewayClient({
    timeoutMs: config.push.request_timeout,
    addressRefusal: cidrRefusal(config.ip_range_blacklist, config.ip_range_whitelist),
    extraCas: config.push.custom_ca_list.map((path) => readFileSync(path, 'utf8')),
  });
  const pusherSender = new PusherSender(
    { storage, cache: roomCache, stream, clock, client: pushGateways, unread, rulesOf: (userId) => pushRules.compiledRules(userId), ignoredOf: (userId) => accountData.ignoredUsers(userId) },
    {
      minRetryMs: config.push.min_retry_interval,
      maxRetryMs: config.push.max_retry_interval,
      giveUpAfterMs: config.push.give_up_after,
      maxConcurrent: config.push.max_concurrent,
      groupUnreadCountByRoom: config.push.group_unread_count_by_room,
    },
  );
  writer.onCommit(pusherSender.commitListener);
  receipts.onReadReceipt((_roomId, userId) => pusherSender.receiptMoved(userId));
  pushRules.pushersChanged = (userId) => pusherSender.pushersChanged(userId);
  rooms.joinedUpgradedRoom = async (userId, oldRoomId, newRoomId) => {
    await pushRules.copyRoomRules(userId, oldRoomId, newRoomId);
    await accountData.copyToUpgradedRoom(userId, oldRoomId, newRoomId);
  };
  const sync = new SyncService(storage, roomCache, roomReader, stream, notifier, typing, unread, accountData, toDevice, presence, async (userId) => (await pushRules.ruleset(userId)) as unknown as JsonObject, keys);
  const legacySync = new LegacySync(sync, history, presence, (roomId) => rooms.directoryVisibility(roomId).catch(() => 'private' as const));
  const media = new MediaService(storage, blobStoreFor(config), config, clock, new FederatedMediaSource(federation.client));
  if (cluster) shareAcrossProcesses(cluster, { graph, roomCache, notifier, typing, accountData, pushRules, toDevice, unread, keys, presence, limiters, federationSender, appserviceSender, pusherSender });
  const bots = new BotOwnership(storage, accounts, clock, (userId) => rooms.leaveAllRooms(userId));
  // Loaded only when configured: the OpenID client and its crypto are no part of every start.
  const portal = config.portal
    ? new (await import('./portal/portal.js')).BotPortal(config.portal, storage, clock, accounts, bots, config.ratelimiting_enabled)
    : undefined;
  return {
    cluster, bots, portal,
    config, clock, storage, limiters, accounts, sessions, registration, signer,
    devices: new DeviceService(storage, devicesRemoved, (userId, deviceId) => keys.deviceChanged(userId, deviceId)),
    keys, keyBackup: new KeyBackupService(storage), passwordAuth: new PasswordAuth(storage, hasher, clock, limiters, config.server_name),
    stream, notifier, roomCache, writer, federation, rooms, roomReader, history, legacySync, typing, receipts, accountData, profiles, sync, toDevice, presence, media,
    userDirectory: new UserDirectory(roomCache, () => storage.rooms.publicRoomIds('', 1_000), async (userId) => (await accounts.getUser(userId))?.is_guest === 1),
    pushRules, pusherSender, pushGateways,
    roomFederation, federationSender, appservices, backfiller, searchIndexer,
  };
}

interface SharedParts {
  graph: EventGraph;
  roomCache: RoomCache;
  notifier: Notifier;
  typing: TypingTracker;
  accountData: AccountDataService;
  pushRules: PushRulesService;
  toDevice: ToDeviceService;
  unread: UnreadCounts;
  keys: KeysService;
  presence: PresenceService;
  limiters: Limiters;
  federationSender: FederationSender;
  appserviceSender: AppServiceSender;
  pusherSender: PusherSender;
}

/** How long the senders let other processes' commits gather before looking at their queues again. */
const OUTBOX_LOOK_DELAY_MS = 20;

/**
 * Several processes on one database (`cluster/`): what another process changed is dropped from
 * this one's caches and the syncs it concerns are woken; typing notices, EDUs and outbox nudges
 * reach the process that holds the senders.
 */
function shareAcrossProcesses(cluster: Cluster, parts: SharedParts): void {
  const { graph, roomCache, notifier, typing, accountData, pushRules, toDevice, unread, keys, presence, limiters, federationSender, appserviceSender, pusherSender } = parts;
  let outboxLook: NodeJS.Timeout | undefined;
  const lookAtOutboxes = (): void => {
    if (outboxLook || (!federationSender.running && !appserviceSender.running)) return;
    outboxLook = setTimeout(() => {
      outboxLook = undefined;
      void federationSender.lookAgain().catch(() => undefined);
      if (appserviceSender.running) appserviceSender.lookAgain();
    }, OUTBOX_LOOK_DELAY_MS);
    outboxLook.unref();
  };
  cluster.onRemoteCommit((commit) => {
    if (commit.everything) {
      graph.forgetAll();
      roomCache.forgetAll();
      accountData.forgetAll();
      unread.forgetAll();
      keys.forgetAll();
      pushRules.forgetAll();
      limiters.forgetOverrides();
      toDevice.forgetEmptyInboxes();
      presence.forgetLatest();
      // After the position is readable (the cluster moves it once the listeners are done).
      setImmediate(() => {
        notifier.notifyEveryone();
        if (pusherSender.running) pusherSender.lookAgain();
      });
      lookAtOutboxes();
      return;
    }
    const wake = new Set<string>();
    // A room not held here: the parked syncs of its members are woken, found by their room lists
    // (or, lists not held either, woken to look; loading the room would cost more).
    const wakeParkedIn = (roomId: string): void => {
      for (const userId of notifier.parkedUsers()) {
        const rooms = roomCache.peekRoomsOf(userId);
        if (!rooms || rooms.has(roomId)) wake.add(userId);
      }
    };
    // Those peeking into a changed room from here are woken whether or not it is held.
    for (const roomId of [...commit.rooms, ...commit.movedRooms.map((moved) => moved.roomId), ...commit.receipts.map(([roomId]) => roomId)]) {
      for (const userId of notifier.peekersOf(roomId)) wake.add(userId);
    }
    for (const eventId of commit.redacted) graph.forget(eventId);
    for (const { roomId, head, latest } of commit.movedRooms) {
      const room = roomCache.peek(roomId);
      // A load under way may have read the room before these events: it starts over.
      roomCache.roomChanged(roomId);
      if (!room) {
        wakeParkedIn(roomId);
        continue;
      }
      room.movedElsewhere(head, latest);
      roomCache.reweigh(roomId);
      for (const userId of room.interestedUsers()) wake.add(userId);
    }
    for (const roomId of commit.rooms) {
      const room = roomCache.peek(roomId);
      roomCache.forgetRoom(roomId);
      if (room) for (const userId of room.interestedUsers()) wake.add(userId);
      else wakeParkedIn(roomId);
    }
    for (const userId of commit.users) {
      roomCache.forgetUser(userId);
      accountData.forget(userId);
      pushRules.forget(userId);
      keys.forgetRemoteKeys(userId);
      wake.add(userId);
    }
    if (commit.inboxes.length > 0) toDevice.forgetEmptyInboxes();
    for (const userId of commit.inboxes) wake.add(userId);
    for (const [roomId, userId] of commit.receipts) {
      // As the receipt service marks a snapshot for a receipt it writes: its state is unchanged.
      const room = roomCache.peek(roomId);
      if (room) {
        room.latestStream = Math.max(room.latestStream, commit.position);
        room.latestReceiptStream = Math.max(room.latestReceiptStream, commit.position);
        for (const member of room.interestedUsers()) wake.add(member);
      } else {
        wakeParkedIn(roomId);
      }
      roomCache.roomChanged(roomId);
      unread.receiptMoved(roomId, userId);
    }
    if (commit.roommatesOf.length > 0) presence.forgetLatest();
    // A change told to one user only (a signature of another's master key) names no roommates:
    // any commit for a user may hold a device-list change.
    if (commit.roommatesOf.length > 0 || commit.users.length > 0) keys.deviceListsChangedElsewhere();
    for (const userId of commit.roommatesOf) presence.forgetSetBy(userId);
    setImmediate(() => {
      notifier.notify(wake);
      // Pushers read the database from their positions: after the position is readable.
      if (pusherSender.running) {
        if (commit.rooms.length > 0 || commit.movedRooms.length > 0) pusherSender.lookAgain();
        for (const [, userId] of commit.receipts) pusherSender.receiptMoved(userId);
      }
      for (const userId of commit.roommatesOf) void roomCache.roommates(userId).then((roommates) => notifier.notify(roommates), () => undefined);
    });
    // Events (messages too) may have queued outbox rows for the senders, if they run here.
    if (commit.rooms.length > 0 || commit.movedRooms.length > 0) lookAtOutboxes();
  });
  cluster.onMessage((message) => {
    switch (message.kind) {
      case 'typing':
        typing.applyShared(message.roomId, message.userId, message.typing, message.timeoutMs);
        break;
      case 'appservice-ephemeral':
        if (appserviceSender.running) appserviceSender.queueEphemeral(message.roomId, message.event);
        break;
      case 'edu':
        if (federationSender.running) federationSender.sendEphemeral(message.destinations, message.edu);
        break;
      case 'outbox':
        lookAtOutboxes();
        break;
      case 'ratelimit':
        if (SHARED_LIMITERS.includes(message.limiter)) limiters[message.limiter].applyShared(message);
        break;
      case 'pushers':
        if (pusherSender.running) pusherSender.pushersChanged(message.userId);
        break;
      case 'users':
        keys.forgetCounts();
        if (message.users.length === 0) limiters.forgetOverrides();
        for (const userId of message.users) limiters.forgetOverride(userId);
        break;
    }
  });
  typing.onTyping((roomId, userId, isTyping, timeoutMs) => cluster.publish({ kind: 'typing', roomId, userId, typing: isTyping, timeoutMs }));
  federationSender.elsewhere = {
    queued: () => cluster.publish({ kind: 'outbox', queue: 'federation' }),
    ephemeral: (destinations, edu) => cluster.publish({ kind: 'edu', destinations, edu }),
  };
  appserviceSender.elsewhere = (roomId, event) => cluster.publish({ kind: 'appservice-ephemeral', roomId, event });
  keys.onCountsChanged = (userId) => cluster.publish({ kind: 'users', users: [userId] });
  // Pushers set or removed here reach the process that delivers (it also reads them all again every few seconds).
  const pushersChangedHere = pushRules.pushersChanged;
  pushRules.pushersChanged = (userId) => {
    pushersChangedHere(userId);
    if (!pusherSender.running) cluster.publish({ kind: 'pushers', userId });
  };
  limiters.onOverrideChanged = (userId) => cluster.publish({ kind: 'users', users: [userId] });
  for (const limiter of SHARED_LIMITERS) limiters[limiter].onChange = ({ key, count }) => cluster.publish({ kind: 'ratelimit', limiter, key, count });
}

/** Typing notices and receipts go to the appservices that asked for ephemeral events (`receive_ephemeral`). */
function sendEphemeralToAppservices(typing: TypingTracker, receipts: ReceiptService, sender: AppServiceSender): void {
  if (!sender.wantsEphemeral) return;
  typing.onTyping((roomId) => {
    // Listeners run before the tracker applies the change: read who is typing once it has.
    queueMicrotask(() => sender.queueEphemeral(roomId, { type: 'm.typing', content: { user_ids: typing.typingIn(roomId) } }));
  });
  receipts.onPublicReceipt((roomId, userId, eventId, threadId, ts) => {
    const data = { ts, ...(threadId !== undefined ? { thread_id: threadId } : {}) };
    sender.queueEphemeral(roomId, { type: 'm.receipt', content: { [eventId]: { 'm.read': { [userId]: data } } } });
  });
}

/** Local users' typing notices and public receipts go to the other servers in the room, as EDUs. */
function sendEphemeralOfLocalUsers(serverName: string, cache: RoomCache, typing: TypingTracker, receipts: ReceiptService, sender: FederationSender): void {
  const otherServers = (roomId: string): string[] => {
    const room = cache.peek(roomId);
    return room && !room.legacy ? [...room.joinedServers()].filter((server) => server !== serverName) : [];
  };
  const isLocal = (userId: string) => userId.endsWith(`:${serverName}`);
  typing.onTyping((roomId, userId, isTyping, timeoutMs) => {
    if (!isLocal(userId)) return;
    const servers = otherServers(roomId);
    if (servers.length > 0) sender.sendEphemeral(servers, { edu_type: 'm.typing', content: { room_id: roomId, user_id: userId, typing: isTyping, ...(isTyping ? { timeout: timeoutMs } : {}) } });
  });
  receipts.onPublicReceipt((roomId, userId, eventId, threadId, ts) => {
    if (!isLocal(userId)) return;
    const servers = otherServers(roomId);
    if (servers.length === 0) return;
    const data = { ts, ...(threadId !== undefined ? { thread_id: threadId } : {}) };
    void sender.queueEdu(servers, { edu_type: 'm.receipt', content: { [roomId]: { 'm.read': { [userId]: { event_ids: [eventId], data } } } } }).catch(() => undefined);
  });
}
