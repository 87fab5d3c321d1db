/**
 * Wires the domain services together. Passed explicitly (no global singletons), so a test, the
 * CLI and the HTTP app each build exactly what they use.
 */
import { AccountDataService } from './account-data/account-data-service.js';
import type { Clock } from './core/clock.js';
import type { Config } from './config/index.js';
import { Limiters } from './ratelimit/limiters.js';
import { blobStoreFor, MediaService } from './media/media-service.js';
import type { Signer } from './core/signed-json.js';
import { Federation, type FederationTestHooks } from './federation/federation.js';
import { loadOrCreateSigningKey, signingKeyPathFor } from './federation/signing-key.js';
import { EventWriter } from './rooms/event-writer.js';
import { StateGroupIds } from './rooms/state-groups.js';
import { ProfileService } from './rooms/profile-service.js';
import { ReceiptService } from './rooms/receipts-service.js';
import { RoomCache } from './rooms/room-cache.js';
import { RoomHistory, RoomReader } from './rooms/room-reader.js';
import { RoomService } from './rooms/room-service.js';
import type { Storage } from './storage/index.js';
import { Notifier } from './sync/notifier.js';
import { StreamCounter } from './sync/stream.js';
import { SyncService } from './sync/sync-service.js';
import { TypingTracker } from './sync/typing.js';
import { UnreadCounts } from './sync/unread.js';
import { AccountService } from './users/account-service.js';
import { PasswordHasher } from './users/passwords.js';
import { RegistrationService } from './users/registration-service.js';
import { serviceLocalparts } from './users/service-users.js';
import { SessionService } from './users/session-service.js';

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
  stream: StreamCounter;
  notifier: Notifier;
  roomCache: RoomCache;
  rooms: RoomService;
  roomReader: RoomReader;
  history: RoomHistory;
  typing: TypingTracker;
  receipts: ReceiptService;
  accountData: AccountDataService;
  profiles: ProfileService;
  sync: SyncService;
  media: MediaService;
}

export interface ServiceOptions {
  /** Tests: federation between instances without DNS. */
  federation?: FederationTestHooks | undefined;
}

export async function createServices(config: Config, storage: Storage, clock: Clock, options: ServiceOptions = {}): Promise<Services> {
  const hasher = new PasswordHasher(config.password_hashing);
  const limiters = new Limiters(config, clock, storage);
  const sessions = new SessionService(storage, config, clock, hasher, limiters);
  const accounts = new AccountService(storage, config.server_name, clock, hasher, serviceLocalparts(config));
  const registration = new RegistrationService(config, clock, accounts, sessions, limiters);

  // The stream continues from the newest position on disk, so tokens from before a restart stay valid.
  const stream = new StreamCounter(Math.max(await storage.rooms.maxStreamOrdering(), await storage.userData.maxStreamOrdering()));
  const notifier = new Notifier();
  const roomCache = new RoomCache(storage, { roomStateEvents: config.caches.room_state_events, userRoomLists: config.caches.user_room_lists });
  const signer = loadOrCreateSigningKey(signingKeyPathFor(config), config.server_name);
  const writer = new EventWriter(storage, roomCache, stream, notifier, clock, signer, new StateGroupIds(await storage.rooms.maxStateGroup()));
  const federation = new Federation(config, signer, storage, clock, options.federation);
  const roomReader = new RoomReader(storage, roomCache, stream, clock);
  const history = new RoomHistory(roomReader, stream);
  const rooms = new RoomService(storage, config, clock, roomCache, writer, roomReader, limiters);
  const typing = new TypingTracker(roomCache, notifier);
  const accountData = new AccountDataService(storage, stream, notifier, roomCache);
  const unread = new UnreadCounts(storage);
  const receipts = new ReceiptService(storage, stream, notifier, roomReader, accountData, clock, unread);
  const profiles = new ProfileService(storage, rooms, limiters);
  const sync = new SyncService(storage, roomCache, roomReader, stream, notifier, typing, unread, accountData);
  const media = new MediaService(storage, blobStoreFor(config), config, clock);
  return {
    config, clock, storage, limiters, accounts, sessions, registration, signer,
    stream, notifier, roomCache, writer, federation, rooms, roomReader, history, typing, receipts, accountData, profiles, sync, media,
  };
}
