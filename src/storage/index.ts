/**
 * The storage layer: the only code that writes SQL. Services get a `Storage` and run multi-step
 * writes through `storage.transaction(...)`, which hands them the same stores bound to one transaction.
 */
import type { Kysely } from 'kysely';
import type { Database } from './schema.js';
import { dataVersionReader, type Db } from './database.js';
import { AccessTokenCache } from './token-cache.js';
import { UserStore } from './users-store.js';
import { SessionStore } from './sessions-store.js';
import { RatelimitStore } from './ratelimit-store.js';
import { RoomStore } from './rooms-store.js';
import { UserDataStore } from './user-data-store.js';
import { BridgeStore } from './bridge-store.js';
import { MediaStore } from './media-store.js';
import { FederationStore } from './federation-store.js';
import { DeviceInboxStore } from './device-inbox-store.js';
import { AppserviceStore } from './appservice-store.js';
import { E2eStore } from './e2e-store.js';
import { ClusterStore } from './cluster-store.js';
import { PortalStore } from './portal-store.js';

export interface StorageOptions {
  /** Index events for full-text search as they are stored (default true; `enable_search`). */
  searchIndex?: boolean | undefined;
}

export interface Stores {
  users: UserStore;
  sessions: SessionStore;
  ratelimits: RatelimitStore;
  rooms: RoomStore;
  userData: UserDataStore;
  bridge: BridgeStore;
  media: MediaStore;
  federation: FederationStore;
  deviceInbox: DeviceInboxStore;
  appservices: AppserviceStore;
  e2e: E2eStore;
  /** PostgreSQL only: what several processes share (the stream head, notifications, id blocks). */
  cluster: ClusterStore;
  /** The bot portal: owners of bots, grants, the audit log, portal sessions. */
  portal: PortalStore;
}

function createStores(db: Kysely<Database>, tokenCache: AccessTokenCache, inTransaction: boolean, options: StorageOptions): Stores {
  return {
    users: new UserStore(db),
    sessions: new SessionStore(db, tokenCache, !inTransaction),
    ratelimits: new RatelimitStore(db),
    rooms: new RoomStore(db, options.searchIndex !== false),
    userData: new UserDataStore(db),
    bridge: new BridgeStore(db),
    media: new MediaStore(db),
    federation: new FederationStore(db),
    deviceInbox: new DeviceInboxStore(db),
    appservices: new AppserviceStore(db),
    e2e: new E2eStore(db),
    cluster: new ClusterStore(db),
    portal: new PortalStore(db),
  };
}

export class Storage implements Stores {
  readonly users: UserStore;
  readonly sessions: SessionStore;
  readonly ratelimits: RatelimitStore;
  readonly rooms: RoomStore;
  readonly userData: UserDataStore;
  readonly bridge: BridgeStore;
  readonly media: MediaStore;
  readonly federation: FederationStore;
  readonly deviceInbox: DeviceInboxStore;
  readonly appservices: AppserviceStore;
  readonly e2e: E2eStore;
  readonly cluster: ClusterStore;
  readonly portal: PortalStore;

  private readonly tokenCache: AccessTokenCache;

  constructor(
    readonly db: Db,
    private readonly options: StorageOptions = {},
  ) {
    this.tokenCache = new AccessTokenCache(dataVersionReader(db));
    ({
      users: this.users,
      sessions: this.sessions,
      ratelimits: this.ratelimits,
      rooms: this.rooms,
      userData: this.userData,
      bridge: this.bridge,
      media: this.media,
      federation: this.federation,
      deviceInbox: this.deviceInbox,
      appservices: this.appservices,
      e2e: this.e2e,
      cluster: this.cluster,
      portal: this.portal,
    } = createStores(db, this.tokenCache, false, options));
  }

  /** Runs `work` in one transaction; keep it short and never await network or hashing inside. */
  transaction<T>(work: (stores: Stores) => Promise<T>): Promise<T> {
    return this.db.transaction().execute((trx) => work(createStores(trx, this.tokenCache, true, this.options)));
  }

  /** Another process changed the token tables: every cached token is read again. */
  forgetCachedTokens(): void {
    this.tokenCache.invalidate();
  }

  close(): Promise<void> {
    return this.db.destroy();
  }
}

export { ClusterStore, CoordinatorConnection, notificationChannel, STATE_GROUP_ID_BLOCK, type HeadMove } from './cluster-store.js';
export { copySqliteToPostgres, CopyRefused, type CopiedTable } from './copy-database.js';
export { openDatabase, checkpointInBackground, postgresSchemaOf, migrateToLatest, bindServerName, recordedServerName, holdExclusiveUse, DatabaseInUseError, observeQueries, databaseHealth, backupDatabase, MigrationError, ServerNameMismatchError, type Db, type DatabaseOptions } from './database.js';
export type { UserRow, UserPatch, UserListQuery } from './users-store.js';
export type { DeviceRow, AccessTokenRow, RefreshTokenRow } from './sessions-store.js';
export type { RatelimitOverrideRow } from './ratelimit-store.js';
export type { BackwardExtremity, EventRow, RoomRow, NewRoomRow, MembershipRow, TopologicalPosition } from './rooms-store.js';
export type { AccountDataRow, ReceiptRow, PresenceRow } from './user-data-store.js';
export type { WebhookRow, FeedRow, RoomFeedRow, FeedPatch } from './bridge-store.js';
export type { MediaRow, RemoteMediaKey, RemoteMediaRow } from './media-store.js';
export type { ServerKeyRow, OutboxRow, DestinationRow, RemoteMembershipRow } from './federation-store.js';
export type { BackupVersionRow, RoomKeyRow } from './e2e-store.js';
export { GLOBAL_ACCOUNT_DATA } from './user-data-store.js';
export type { BotOwnerRow, CreatorGrantRow, AuditRow, PortalSessionRow, PortalIdentityRow, OwnedBotRow } from './portal-store.js';
export type { DeviceInboxRow, NewToDeviceMessage } from './device-inbox-store.js';
