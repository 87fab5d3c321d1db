/** Row types of every table, as Kysely sees them. Keep in step with `migrations/`. */
import type { ColumnType, Generated } from 'kysely';

export interface UsersTable {
  user_id: string;
  localpart: string;
  password_hash: string | null;
  admin: number;
  user_type: string | null;
  displayname: string | null;
  avatar_url: string | null;
  deactivated: number;
  created_ts: number;
  /** Migration 0035: a guest account (`register?kind=guest`), 1 or 0. */
  is_guest: number;
}

/** Migration 0038: users erased on deactivation. */
export interface ErasedUsersTable {
  user_id: string;
}

export interface DevicesTable {
  user_id: string;
  device_id: string;
  display_name: string | null;
  created_ts: number;
  last_seen_ts: number | null;
  last_seen_ip: string | null;
  /** Migration 0032. */
  last_seen_user_agent: string | null;
}

export interface AccessTokensTable {
  id: Generated<number>;
  token_hash: string;
  user_id: string;
  device_id: string;
  created_ts: number;
  expires_ts: number | null;
  refresh_token_id: number | null;
  used: Generated<number>;
}

export interface RefreshTokensTable {
  id: Generated<number>;
  token_hash: string;
  user_id: string;
  device_id: string;
  created_ts: number;
  expires_ts: number | null;
  next_token_id: number | null;
}

export interface RatelimitOverridesTable {
  user_id: string;
  messages_per_second: number;
  burst_count: number;
}

export interface RoomsTable {
  room_id: string;
  room_version: string;
  creator: string;
  is_public: number;
  created_ts: number;
  /** 1 for rooms made before events were PDUs: local only. */
  legacy: Generated<number>;
  /** JSON array of the forward extremities' event ids. */
  extremities: Generated<string>;
  /** Depth of the deepest forward extremity: a new local event has this plus one. */
  depth: Generated<number>;
  /** The state group holding the room's current state; null until its first state event as a PDU. */
  state_group: number | null;
  /** The last position at which state resolution changed the state other than by a new event. */
  state_reset_stream: Generated<number>;
}

export interface EventsTable {
  stream_ordering: number;
  event_id: string;
  room_id: string;
  type: string;
  state_key: string | null;
  sender: string;
  origin_server_ts: number;
  /** JSON text. */
  content: string;
  replaces_state: string | null;
  /** JSON text of the replaced state event's content. */
  prev_content: string | null;
  prev_sender: string | null;
  redacts: string | null;
  redacted_by: string | null;
  history_visibility: string;
  txn_device_id: string | null;
  txn_scope: string | null;
  txn_id: string | null;
  depth: number;
  /** JSON arrays of event ids; null for events from before they were PDUs. */
  prev_events: string | null;
  auth_events: string | null;
  /** JSON object: the PDU's keys that have no column (hashes, signatures, others). */
  pdu_extra: string | null;
  /** The state group after this event. */
  state_group: number | null;
  outlier: number;
  /** Why the event was rejected, or null. */
  rejected: string | null;
  soft_failed: number;
  /** 1: placed on prev_events we did not have (a gap lies before it in the timeline). */
  gap_before: number;
  /** History brought in by /backfill (a position below zero; shown in history, not in sync): the position its visibility is judged at. */
  backfilled_at: number | null;
}

export interface BackwardExtremitiesTable {
  room_id: string;
  event_id: string;
  child_depth: number;
  child_stream: number;
  child_visibility: string;
}

export interface StateGroupsTable {
  id: number;
  room_id: string;
  prev_group: number | null;
  delta_depth: number;
}

export interface StateGroupEntriesTable {
  group_id: number;
  type: string;
  state_key: string;
  event_id: string | null;
}

export interface CurrentStateTable {
  room_id: string;
  type: string;
  state_key: string;
  event_id: string;
}

export interface MembershipsTable {
  room_id: string;
  user_id: string;
  membership: string;
  event_id: string;
  stream_ordering: number;
  forgotten: Generated<number>;
}

export interface RoomAliasesTable {
  alias: string;
  room_id: string;
  creator: string;
}

export interface AccountDataTable {
  user_id: string;
  room_id: string;
  type: string;
  content: string;
  stream_ordering: number;
}

export interface ReceiptsTable {
  room_id: string;
  user_id: string;
  receipt_type: string;
  thread_id: string;
  event_id: string;
  ts: number;
  stream_ordering: number;
}

export interface FiltersTable {
  user_id: string;
  filter_id: number;
  definition: string;
}

export interface BridgeStateTable {
  key: string;
  value: string;
}

/** One record of the bridge's crypto store (migration 0031): serialised key and value, base64. */
export interface BridgeCryptoRecordsTable {
  database: string;
  object_store: string;
  record_key: string;
  value: string;
}

export interface BridgeCommandsTable {
  event_id: string;
  room_id: string;
  received_ts: number;
}

export interface BridgeWebhooksTable {
  id_hash: string;
  room_id: string;
  name: string;
  created_by: string;
  created_ts: number;
  /** The signing secret, sealed with the webhook's id; null when requests need no signature. */
  secret_sealed: string | null;
}

export interface BridgeFeedsTable {
  url: string;
  title: string | null;
  etag: string | null;
  last_modified: string | null;
  last_success_ts: number | null;
  last_error: string | null;
  last_error_ts: number | null;
  failures: number;
  next_poll_ts: number;
}

export interface BridgeRoomFeedsTable {
  room_id: string;
  url: string;
  label: string | null;
  added_by: string;
  created_ts: number;
  failure_notified: number;
}

export interface BridgeFeedSeenTable {
  url: string;
  item_id: string;
  seen_ts: number;
}

export interface MediaTable {
  media_id: string;
  content_type: string;
  upload_name: string | null;
  size_bytes: number;
  sha256: string;
  uploader: string;
  created_ts: number;
}

export interface RemoteMediaTable {
  server_name: string;
  media_id: string;
  blob_id: string;
  content_type: string;
  upload_name: string | null;
  size_bytes: number;
  sha256: string;
  fetched_ts: number;
  /** When it was last downloaded (to within an hour): retention and the size bound go by it. */
  last_access_ts: number;
  /** 1: fetched for an authenticated request, never served on the unauthenticated legacy paths. */
  authenticated: number;
}

export interface ServerKeysTable {
  server_name: string;
  key_id: string;
  verify_key: string;
  valid_until_ts: number;
  expired_ts: number | null;
  fetched_ts: number;
}

export interface ServerKeyResponsesTable {
  server_name: string;
  response: string;
  valid_until_ts: number;
}

/** Every key listing a server gave, by each key id it lists (migration 0032): what the notary serves per key. */
export interface ServerKeyListingsTable {
  server_name: string;
  key_id: string;
  response: string;
  valid_until_ts: number;
}

export interface FederationInboundTxnsTable {
  origin: string;
  txn_id: string;
  response: string;
  received_ts: number;
}

export interface FederationOutboxTable {
  id: Generated<number>;
  destination: string;
  kind: string;
  payload: string;
  created_ts: number;
  /** The transaction it was last sent in, until the destination answers (migration 0024). */
  txn_id: ColumnType<string | null, string | null | undefined, string | null>;
}

export interface FederationDestinationsTable {
  destination: string;
  failures: Generated<number>;
  retry_after_ts: Generated<number>;
  last_success_ts: number | null;
  last_error: string | null;
}

export interface RemoteMembershipsTable {
  room_id: string;
  user_id: string;
  membership: string;
  event_id: string;
  room_version: string;
  stripped_state: string;
  pdu: string;
  updated_ts: number;
}

export interface FederationKeptEdusTable {
  id: Generated<number>;
  origin: string;
  edu_type: string;
  content: string;
  received_ts: number;
}

/** Facts the database keeps about the server it belongs to (`server_name`). */
export interface ServerMetaTable {
  key: string;
  value: string;
}

export interface DeviceInboxTable {
  id: Generated<number>;
  user_id: string;
  device_id: string;
  sender: string;
  type: string;
  content: string;
  stream_ordering: number;
  delivered_stream: number | null;
  created_ts: number;
}

export interface AppserviceOutboxTable {
  id: Generated<number>;
  as_id: string;
  event_id: string;
  /** Set before a transaction is first sent: the transaction that carries the row until answered. */
  txn_id: number | null;
  created_ts: number;
}

export interface E2eDeviceKeysTable {
  user_id: string;
  device_id: string;
  key_json: string;
}

export interface E2eOneTimeKeysTable {
  user_id: string;
  device_id: string;
  algorithm: string;
  key_id: string;
  key_json: string;
}

export interface E2eFallbackKeysTable {
  user_id: string;
  device_id: string;
  algorithm: string;
  key_id: string;
  key_json: string;
  used: number;
}

export interface E2eCrossSigningKeysTable {
  user_id: string;
  key_type: string;
  key_json: string;
}

export interface E2eCrossSigningSignaturesTable {
  signer_user_id: string;
  target_user_id: string;
  target_key_id: string;
  key_id: string;
  signature: string;
}

export interface RoomKeyVersionsTable {
  user_id: string;
  version: number;
  algorithm: string;
  auth_data: string;
  etag: number;
  deleted: number;
}

export interface RoomKeysTable {
  user_id: string;
  version: number;
  room_id: string;
  session_id: string;
  first_message_index: number;
  forwarded_count: number;
  is_verified: number;
  session_data: string;
}

export interface DeviceListChangesTable {
  stream_ordering: number;
  user_id: string;
  /** The one user told of the change; `NULL`: the user and everyone sharing a room (migration 0040). */
  told_user_id: string | null;
}

/** The last `m.device_list_update` stream_id sent (our users) or applied (theirs): migration 0037. */
export interface DeviceListStreamIdsTable {
  user_id: string;
  stream_id: number;
}

export interface ToDeviceTxnsTable {
  user_id: string;
  device_id: string;
  txn_id: string;
  created_ts: number;
}

export interface EventRelationsTable {
  event_id: string;
  relates_to_id: string;
  rel_type: string;
  room_id: string;
  stream_ordering: number;
}

export interface PresenceTable {
  user_id: string;
  presence: string;
  status_msg: string | null;
  last_active_ts: number;
  stream_ordering: number;
}

export interface PushRuleChangesTable {
  user_id: string;
  content: string;
}

export interface PushersTable {
  user_id: string;
  app_id: string;
  pushkey: string;
  content: string;
  created_ts: number;
  /** The device (session) that set it: logging that device out removes it (migration 0036). */
  device_id: string | null;
  /** The stream position its notifications were delivered up to (migration 0036). */
  last_stream_ordering: number | null;
  /** When its delivery began failing, or null (migration 0036). */
  failing_since: number | null;
}

/** One row: the newest stream position committed by any process (migration 0024). */
export interface StreamHeadTable {
  id: number;
  position: number;
}

/** Who owns a bot made in (or given an owner through) the bot portal (migration 0029). */
export interface BotOwnersTable {
  user_id: string;
  owner_id: string;
  description: string;
  created_ts: number;
}

/** People an operator gave the right to create bots. */
export interface BotCreatorGrantsTable {
  user_id: string;
  granted_by: string;
  granted_ts: number;
  note: string | null;
}

/** Every create, rotate, deactivate, move and grant: who, what, when. */
export interface BotAuditLogTable {
  id: Generated<number>;
  ts: number;
  actor: string;
  action: string;
  target: string;
  detail: string | null;
}

/** The bot portal's sign-in sessions, by the hash of the id the cookie carries. */
export interface PortalSessionsTable {
  id_hash: string;
  owner_id: string;
  display_name: string | null;
  idp_id: string;
  sub: string;
  sid: string | null;
  id_token: string | null;
  attributes_grant: number;
  created_ts: number;
  last_seen_ts: number;
  expires_ts: number;
}

/** Which account at which provider is which person: bound at their first sign-in (migration 0030). */
export interface PortalIdentitiesTable {
  idp_id: string;
  subject: string;
  owner_id: string;
  created_ts: number;
}

/** Sign-ins started and not yet finished, by the SHA-256 of their state: each finishes once. */
export interface PortalSignInsTable {
  state_hash: string;
  idp_id: string;
  expires_ts: number;
}

export interface PortalSecretsTable {
  name: string;
  value: string;
}

/** When an account last logged in and was last seen using a token. */
export interface UserActivityTable {
  user_id: string;
  last_login_ts: number | null;
  last_seen_ts: number | null;
}

export interface Database {
  bot_owners: BotOwnersTable;
  bot_creator_grants: BotCreatorGrantsTable;
  bot_audit_log: BotAuditLogTable;
  portal_sessions: PortalSessionsTable;
  portal_secrets: PortalSecretsTable;
  portal_identities: PortalIdentitiesTable;
  portal_sign_ins: PortalSignInsTable;
  user_activity: UserActivityTable;
  stream_head: StreamHeadTable;
  server_meta: ServerMetaTable;
  push_rule_changes: PushRuleChangesTable;
  pushers: PushersTable;
  presence: PresenceTable;
  event_relations: EventRelationsTable;
  device_inbox: DeviceInboxTable;
  appservice_outbox: AppserviceOutboxTable;
  e2e_device_keys: E2eDeviceKeysTable;
  e2e_one_time_keys: E2eOneTimeKeysTable;
  e2e_fallback_keys: E2eFallbackKeysTable;
  device_list_changes: DeviceListChangesTable;
  device_list_stream_ids: DeviceListStreamIdsTable;
  room_key_versions: RoomKeyVersionsTable;
  e2e_cross_signing_keys: E2eCrossSigningKeysTable;
  e2e_cross_signing_signatures: E2eCrossSigningSignaturesTable;
  room_keys: RoomKeysTable;
  to_device_txns: ToDeviceTxnsTable;
  users: UsersTable;
  erased_users: ErasedUsersTable;
  devices: DevicesTable;
  access_tokens: AccessTokensTable;
  refresh_tokens: RefreshTokensTable;
  ratelimit_overrides: RatelimitOverridesTable;
  rooms: RoomsTable;
  events: EventsTable;
  backward_extremities: BackwardExtremitiesTable;
  current_state: CurrentStateTable;
  memberships: MembershipsTable;
  room_aliases: RoomAliasesTable;
  account_data: AccountDataTable;
  receipts: ReceiptsTable;
  filters: FiltersTable;
  bridge_state: BridgeStateTable;
  bridge_crypto_records: BridgeCryptoRecordsTable;
  bridge_commands: BridgeCommandsTable;
  bridge_webhooks: BridgeWebhooksTable;
  bridge_feeds: BridgeFeedsTable;
  bridge_room_feeds: BridgeRoomFeedsTable;
  bridge_feed_seen: BridgeFeedSeenTable;
  media: MediaTable;
  remote_media: RemoteMediaTable;
  state_groups: StateGroupsTable;
  state_group_entries: StateGroupEntriesTable;
  server_keys: ServerKeysTable;
  server_key_responses: ServerKeyResponsesTable;
  server_key_listings: ServerKeyListingsTable;
  federation_inbound_txns: FederationInboundTxnsTable;
  federation_outbox: FederationOutboxTable;
  federation_destinations: FederationDestinationsTable;
  remote_memberships: RemoteMembershipsTable;
  federation_kept_edus: FederationKeptEdusTable;
}
