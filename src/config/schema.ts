/**
 * The configuration schema: every key, its type and its default, in one place.
 * `config.example.yaml` documents the same keys for operators; keep the two in step.
 * Key names follow Synapse where Synapse has the same setting, so operators can carry
 * their settings over (`server_name`, `public_baseurl`, `rc_*`, `registration_shared_secret`, ...).
 */
import { Type, type Static } from '@sinclair/typebox';
import { StringEnum } from '../schemas.js';
import type { AppServiceRegistration } from './appservices.js';

/**
 * What a value must look like, in words for the operator: the config error for a key whose schema
 * carries it is this one sentence instead of the validator's patterns and union branches.
 */
export const EXPECTED = 'x-expected';

/** A Synapse-style rate limit: a bucket of `burst_count` actions that drains at `per_second`. */
export interface RateLimitConfig {
  per_second: number;
  burst_count: number;
}

/** A duration as milliseconds, or a Synapse-style string such as "500ms", "30s", "5m", "1h", "7d". */
export const DurationSchema = Type.Union(
  [Type.Integer({ minimum: 1 }), Type.String({ pattern: '^[0-9]+(ms|s|m|h|d|w|y)?$' })],
  { [EXPECTED]: 'a duration such as 500ms, 30s, 5m, 1h or 7d (a plain number is milliseconds)' },
);

/** A duration, or null for "never" / "no limit". */
const durationOrNull = (defaultValue: string | null) =>
  Type.Union([DurationSchema, Type.Null()], {
    default: defaultValue,
    [EXPECTED]: 'a duration such as 500ms, 30s, 5m, 1h or 7d (a plain number is milliseconds), or null',
  });
const duration = (defaultValue: string) => Type.Union([DurationSchema], { default: defaultValue, [EXPECTED]: DurationSchema[EXPECTED] as string });

/** A limit whose fields each fall back to this limiter's default, as Synapse fills in a missing one. */
const rateLimit = (per_second: number, burst_count: number) =>
  Type.Object(
    {
      per_second: Type.Number({ minimum: 0, default: per_second }),
      burst_count: Type.Number({ minimum: 0, default: burst_count }),
    },
    { additionalProperties: false, default: {} },
  );

/**
 * A Synapse `attribute_requirements` entry: the claim `attribute` equals `value` (or, for a list
 * claim such as `groups`, contains it), or equals / contains one of `one_of`.
 */
const AttributeRequirementSchema = Type.Object(
  {
    attribute: Type.String({ minLength: 1 }),
    value: Type.Optional(Type.String()),
    one_of: Type.Optional(Type.Array(Type.String(), { minItems: 1 })),
  },
  { additionalProperties: false },
);

/**
 * One entry of Synapse's `oidc_providers`, so an operator can paste the block of the main
 * homeserver. Keys Synapse knows and the portal has no use for (idp_icon, allow_existing_users...)
 * are accepted and ignored; docs/portal.md lists those it reads.
 */
const OidcProviderSchema = Type.Object(
  {
    idp_id: Type.String({ pattern: '^[A-Za-z0-9._~-]{1,64}$', default: 'oidc', [EXPECTED]: 'a short id of letters, digits and . _ ~ -' }),
    idp_name: Type.String({ minLength: 1, maxLength: 100, default: 'your organisation' }),
    issuer: Type.String({ pattern: '^https?://[^\\s]+$', [EXPECTED]: "the provider's issuer URL, https://" }),
    client_id: Type.String({ minLength: 1 }),
    client_secret: Type.Optional(Type.Union([Type.String({ minLength: 1 }), Type.Null()])),
    client_secret_path: Type.Optional(Type.Union([Type.String({ minLength: 1 }), Type.Null()])),
    client_auth_method: StringEnum(['client_secret_basic', 'client_secret_post', 'none'] as const, { default: 'client_secret_basic' }),
    scopes: Type.Array(Type.String({ minLength: 1 }), { default: ['openid', 'profile'] }),
    // Synapse's switch for what discovery and the library check (https issuer, ...); tests and labs only.
    skip_verification: Type.Boolean({ default: false }),
    user_profile_method: StringEnum(['auto', 'userinfo_endpoint'] as const, { default: 'auto' }),
    user_mapping_provider: Type.Object(
      {
        config: Type.Object(
          {
            subject_claim: Type.String({ minLength: 1, default: 'sub' }),
            localpart_template: Type.String({ minLength: 1, default: '{{ user.preferred_username }}' }),
            display_name_template: Type.Optional(Type.String({ minLength: 1 })),
          },
          { default: {} },
        ),
      },
      { default: {} },
    ),
    // Who may sign in to the portal at all (as Synapse: every requirement must hold).
    attribute_requirements: Type.Array(AttributeRequirementSchema, { default: [] }),
    backchannel_logout_enabled: Type.Boolean({ default: false }),
    backchannel_logout_ignore_sub: Type.Boolean({ default: false }),
  },
  { additionalProperties: true },
);

export const ConfigSchema = Type.Object(
  {
    server_name: Type.String({
      minLength: 1,
      maxLength: 255,
      // A hostname (or IPv4 / [IPv6] literal) with an optional port, as the spec's server-name grammar.
      pattern: '^(\\[[0-9A-Fa-f:.]+\\]|[A-Za-z0-9.-]+)(:[0-9]{1,5})?$',
      default: 'localhost',
      [EXPECTED]: 'a host name such as example.org, an IPv4 address or an [IPv6] address, with an optional :port',
    }),
    public_baseurl: Type.Optional(Type.String({ pattern: '^https?://[^\\s]+$', [EXPECTED]: 'an http:// or https:// URL' })),
    listen: Type.Object(
      {
        host: Type.String({ minLength: 1, default: '127.0.0.1' }),
        port: Type.Integer({ minimum: 0, maximum: 65535, default: 8008 }),
        x_forwarded: Type.Boolean({ default: false }),
        // A request (headers and body) must arrive within this, or it is answered 408.
        request_timeout: duration('60s'),
        // Connections one client address may hold at once (0: no limit); not applied with x_forwarded.
        max_connections_per_address: Type.Integer({ minimum: 0, default: 256 }),
      },
      { additionalProperties: false, default: {} },
    ),
    database: Type.Object(
      {
        path: Type.String({ minLength: 1, default: './data/homeserver.db' }),
        synchronous: StringEnum(['full', 'normal'] as const, { default: 'full' }),
        // postgres://user:password@host:port/database selects PostgreSQL (docs/scaling.md); null: SQLite at `path`.
        url: Type.Union([Type.String({ pattern: '^postgres(ql)?://', [EXPECTED]: 'a postgres://user:password@host:port/database URL' }), Type.Null()], { default: null }),
        // One connection is held for the process's lifetime (its claim on the database); the rest serve queries.
        pool_size: Type.Integer({ minimum: 2, maximum: 1000, default: 10 }),
        statement_timeout: duration('60s'),
        // PostgreSQL: statements the server repeats go as named prepared statements (parsed once per connection).
        prepared_statements: Type.Boolean({ default: true }),
        schema: Type.String({ pattern: '^[a-z_][a-z0-9_]{0,62}$', default: 'public', [EXPECTED]: 'a lower-case SQL name such as public' }),
        // TLS to PostgreSQL, verified against the system's CAs or `ssl_ca_file` (a URL's sslmode works too).
        ssl: Type.Boolean({ default: false }),
        ssl_ca_file: Type.Union([Type.String({ minLength: 1 }), Type.Null()], { default: null }),
      },
      { additionalProperties: false, default: {} },
    ),
    registration_shared_secret: Type.Union([Type.String({ minLength: 1 }), Type.Null()], { default: null }),
    enable_registration: Type.Boolean({ default: false }),
    // Guest accounts (`register?kind=guest`), as Synapse's key: off, a bot server has no use for them.
    allow_guest_access: Type.Boolean({ default: false }),
    // Profiles are public (the spec, Synapse); true requires an access token to read one.
    require_auth_for_profile_requests: Type.Boolean({ default: false }),
    // The room directory (GET /publicRooms) needs an access token, as in Synapse; true lets anyone read it.
    allow_public_rooms_without_auth: Type.Boolean({ default: false }),
    password_hashing: Type.Object(
      {
        memory_cost_kib: Type.Integer({ minimum: 8, maximum: 4_194_304, default: 19_456 }),
        time_cost: Type.Integer({ minimum: 1, maximum: 100, default: 2 }),
        parallelism: Type.Integer({ minimum: 1, maximum: 64, default: 1 }),
      },
      { additionalProperties: false, default: {} },
    ),
    refreshable_access_token_lifetime: durationOrNull('5m'),
    nonrefreshable_access_token_lifetime: durationOrNull(null),
    refresh_token_lifetime: durationOrNull(null),
    ratelimiting_enabled: Type.Boolean({ default: true }),
    rc_message: rateLimit(50, 300),
    rc_login: Type.Object(
      {
        address: rateLimit(0.5, 20),
        account: rateLimit(0.5, 20),
        failed_attempts: rateLimit(0.1, 5),
      },
      { additionalProperties: false, default: {} },
    ),
    rc_registration: rateLimit(0.17, 3),
    max_request_body_bytes: Type.Integer({ minimum: 1024, default: 1_048_576 }),
    // Media uploads have their own cap (JSON bodies stay small); Synapse's name and size format.
    max_upload_size: Type.Union([Type.Integer({ minimum: 0 }), Type.String({ pattern: '^[0-9]+[KMG]?$' })], {
      default: '50M',
      [EXPECTED]: 'a size in bytes, or a number with K, M or G such as 50M',
    }),
    // Where uploaded files live; null: `media_store` beside the database file, or memory for `:memory:`.
    media_store_path: Type.Union([Type.String({ minLength: 1 }), Type.Null()], { default: null }),
    // Synapse's key and default (since 1.120): the unauthenticated legacy downloads never fetch
    // another server's media, and serve of it only what was cached while this was off.
    enable_authenticated_media: Type.Boolean({ default: true }),
    // Synapse's shape: cached remote media not downloaded for this long is deleted (null: kept).
    media_retention: Type.Object(
      { remote_media_lifetime: durationOrNull('30d') },
      { additionalProperties: false, default: {} },
    ),
    // Fetching other servers' media: fetches at once (in all and per server), fetches that may wait
    // for a turn and how long, and the most the cache of remote media may hold (null: no bound).
    media: Type.Object(
      {
        max_concurrent_remote_fetches: Type.Integer({ minimum: 1, default: 8 }),
        max_concurrent_remote_fetches_per_server: Type.Integer({ minimum: 1, default: 2 }),
        max_queued_remote_fetches: Type.Integer({ minimum: 0, default: 32 }),
        remote_fetch_queue_timeout: duration('10s'),
        max_remote_cache_size: Type.Union([Type.Integer({ minimum: 1 }), Type.String({ pattern: '^[0-9]+[KMG]?$' }), Type.Null()], {
          default: '2G',
          [EXPECTED]: 'a size in bytes, or a number with K, M or G such as 2G, or null',
        }),
      },
      { additionalProperties: false, default: {} },
    ),
    // This server's ed25519 signing key, in Synapse's format; generated at first start. null: beside
    // the database, as `<server_name>.signing.key` (an in-memory database gets a key in memory).
    signing_key_path: Type.Union([Type.String({ minLength: 1 }), Type.Null()], { default: null }),
    // Keys this server signed with before, still published for checking old events (Synapse's key).
    old_signing_keys: Type.Record(
      Type.String({ pattern: '^ed25519:[A-Za-z0-9_]+$', [EXPECTED]: 'a key id such as ed25519:a_AbCd' }),
      Type.Object({ key: Type.String({ minLength: 1 }), expired_ts: Type.Integer({ minimum: 0 }) }, { additionalProperties: false }),
      { default: {} },
    ),
    // Longest a /sync may wait for news; longer client timeouts are cut to this.
    max_sync_timeout: duration('3m'),

    // ---- Federation (Synapse's key names where Synapse has the setting) ----
    // Serve TLS on the listener itself (tests, small deployments); normally a reverse proxy does.
    tls_certificate_path: Type.Union([Type.String({ minLength: 1 }), Type.Null()], { default: null }),
    tls_private_key_path: Type.Union([Type.String({ minLength: 1 }), Type.Null()], { default: null }),
    // null: federate with every server; a list: only with these (an empty list: with none).
    federation_domain_whitelist: Type.Union([Type.Array(Type.String({ minLength: 1 })), Type.Null()], { default: null }),
    // Addresses outbound federation (and key fetching) never connects to, unless whitelisted.
    ip_range_blacklist: Type.Optional(Type.Array(Type.String({ minLength: 1 }))),
    ip_range_whitelist: Type.Array(Type.String({ minLength: 1 }), { default: [] }),
    federation_verify_certificates: Type.Boolean({ default: true }),
    // PEM files of CAs trusted for federation instead of the system's (Synapse: replaces them).
    federation_custom_ca_list: Type.Array(Type.String({ minLength: 1 }), { default: [] }),
    // Notary servers asked for other servers' keys when a server cannot be asked itself.
    trusted_key_servers: Type.Array(
      Type.Object(
        {
          server_name: Type.String({ minLength: 1 }),
          verify_keys: Type.Optional(Type.Record(Type.String(), Type.String())),
        },
        { additionalProperties: false },
      ),
      { default: [] },
    ),
    // How long other servers may cache our key listing.
    key_refresh_interval: duration('1d'),
    // Serve /.well-known/matrix/server pointing at public_baseurl's host and port (delegation).
    serve_server_wellknown: Type.Boolean({ default: false }),
    // Inbound federation load per origin (Synapse's rc_federation: requests above sleep_limit in
    // window_size ms wait sleep_delay ms each; above reject_limit in flight they get 429).
    rc_federation: Type.Object(
      {
        window_size: Type.Integer({ minimum: 1, default: 1000 }),
        sleep_limit: Type.Integer({ minimum: 1, default: 10 }),
        sleep_delay: Type.Integer({ minimum: 0, default: 500 }),
        reject_limit: Type.Integer({ minimum: 1, default: 50 }),
        concurrent: Type.Integer({ minimum: 1, default: 3 }),
      },
      { additionalProperties: false, default: {} },
    ),
    federation: Type.Object(
      {
        // Longest one outbound federation request may take (connect to last byte).
        request_timeout: duration('60s'),
        // Largest response read from another server (a send_join of a big room is tens of MB).
        max_response_bytes: Type.Integer({ minimum: 65_536, default: 104_857_600 }),
        // After a destination fails, the first retry waits this long; each failure doubles it up
        // to max_retry_interval. Any request from the destination ends the wait at once.
        min_retry_interval: duration('10s'),
        max_retry_interval: duration('1h'),
        // What one inbound request (a transaction, a send_join) may make us fetch from its sender:
        // events it names that we lack, and the state at them. Past these, what still needs
        // fetching is refused (docs/federation.md, "Facing the open federation").
        inbound_fetch: Type.Object(
          {
            max_requests: Type.Integer({ minimum: 0, maximum: 10_000, default: 60 }),
            max_events: Type.Integer({ minimum: 0, maximum: 1_000_000, default: 1000 }),
            max_bytes: Type.Integer({ minimum: 0, default: 8_388_608 }),
            deadline: duration('30s'),
            // Fetch requests per origin over time (a leaky bucket, as the rc_* limits).
            per_origin: rateLimit(1, 500),
          },
          { additionalProperties: false, default: {} },
        ),
        // Filling gaps in rooms' timelines from other servers (/backfill): how many events a
        // room's gaps are filled with in the background after they open (the rest as clients
        // page back with /messages), and how long a page of /messages waits for a fill.
        backfill: Type.Object(
          {
            background_events: Type.Integer({ minimum: 0, maximum: 100_000, default: 1000 }),
            messages_wait: duration('10s'),
          },
          { additionalProperties: false, default: {} },
        ),
      },
      { additionalProperties: false, default: {} },
    ),
    bridge: Type.Object(
      {
        enabled: Type.Boolean({ default: true }),
        localpart: Type.String({
          pattern: '^[a-z0-9._=/+-]+$',
          minLength: 1,
          maxLength: 64,
          default: 'bridge',
          [EXPECTED]: 'a user name of lower-case letters, digits and . _ = / + -',
        }),
        displayname: Type.String({ minLength: 1, maxLength: 256, default: 'Bridge' }),
        // Where webhook URLs point; defaults to public_baseurl (or the listening address).
        webhook_base_url: Type.Optional(Type.String({ pattern: '^https?://[^\\s]+$', [EXPECTED]: 'an http:// or https:// URL' })),
        webhooks: Type.Object(
          {
            max_body_bytes: Type.Integer({ minimum: 1024, maximum: 67_108_864, default: 1_048_576 }),
            rate_limit: rateLimit(10, 50),
          },
          { additionalProperties: false, default: {} },
        ),
        feeds: Type.Object(
          {
            poll_interval_seconds: Type.Integer({ minimum: 1, maximum: 604_800, default: 600 }),
            concurrency: Type.Integer({ minimum: 1, maximum: 64, default: 4 }),
            timeout_seconds: Type.Integer({ minimum: 1, maximum: 600, default: 20 }),
            // Longest one document may take to parse (in a worker thread, off the request path).
            parse_timeout_seconds: Type.Integer({ minimum: 1, maximum: 600, default: 10 }),
            max_items_per_poll: Type.Integer({ minimum: 1, maximum: 100, default: 10 }),
            max_bytes: Type.Integer({ minimum: 1024, maximum: 268_435_456, default: 5_242_880 }),
            max_redirects: Type.Integer({ minimum: 0, maximum: 20, default: 5 }),
            allow_private_addresses: Type.Boolean({ default: false }),
          },
          { additionalProperties: false, default: {} },
        ),
        // The bridge's crypto device (docs/bridge.md, "Encrypted rooms"): it reads commands and posts
        // in encrypted rooms. Its store lives in the database, its key sealed with the key file
        // (null: `<server_name>.bridge-crypto.key` beside the signing key; in memory when that is).
        encryption: Type.Object(
          {
            enabled: Type.Boolean({ default: true }),
            key_path: Type.Union([Type.String({ minLength: 1 }), Type.Null()], { default: null }),
          },
          { additionalProperties: false, default: {} },
        ),
        // `bot-homeserver bridge`: the bridge alone, as an application service of another
        // homeserver (the organisation's main one); see docs/bridge.md. The bridge user is
        // @<localpart>:<server_name of that homeserver>.
        appservice: Type.Optional(
          Type.Object(
            {
              id: Type.String({ minLength: 1, default: 'bot-homeserver-bridge' }),
              homeserver_url: Type.String({ pattern: '^https?://[^\\s]+$', [EXPECTED]: 'the main homeserver’s client URL, http:// or https://' }),
              server_name: Type.String({ minLength: 1, maxLength: 255 }),
              as_token: Type.String({ minLength: 16, [EXPECTED]: 'a random secret of at least 16 characters (openssl rand -hex 32)' }),
              hs_token: Type.String({ minLength: 16, [EXPECTED]: 'a random secret of at least 16 characters (openssl rand -hex 32)' }),
              // Where the main homeserver reaches this bridge (the registration's url).
              url: Type.String({ pattern: '^https?://[^\\s]+$', [EXPECTED]: 'an http:// or https:// URL the main homeserver can reach' }),
              // The registration's sender, a user distinct from the bridge user (Synapse refuses /sync
              // to the sender, and the crypto device needs it); default <localpart>-appservice.
              sender_localpart: Type.Optional(Type.String({ pattern: '^[a-z0-9._=\\-/+]+$', [EXPECTED]: "a localpart of a-z, 0-9 and '._=-/+', not the bridge's" })),
            },
            { additionalProperties: false },
          ),
        ),
      },
      { additionalProperties: false, default: {} },
    ),
    // What is kept in memory between requests: rooms' state and users' room lists, bounded so that
    // memory follows the rooms in use, not every room ever made.
    caches: Type.Object(
      {
        room_state_events: Type.Integer({ minimum: 1000, default: 200_000 }),
        user_room_lists: Type.Integer({ minimum: 100, default: 50_000 }),
      },
      { additionalProperties: false, default: {} },
    ),
    // Full-text search (POST /search; Synapse's key): messages, room names and topics are indexed
    // as they are stored, which costs about 20 µs of CPU per message (docs/benchmarks.md).
    enable_search: Type.Boolean({ default: true }),
    // Application service registration files (Synapse's key): YAML, one per appservice; see
    // docs/appservices.md. Read and checked at start.
    app_service_config_files: Type.Array(Type.String({ minLength: 1 }), { default: [] }),
    // To-device messages (encryption keys travel as these) waiting for a device: at most
    // max_per_sender from one sender (a local sender over it gets 429), max_per_device in all,
    // shared fairly between senders (docs/configuration.md).
    to_device: Type.Object(
      {
        max_per_sender: Type.Integer({ minimum: 1, default: 1_000 }),
        max_per_device: Type.Integer({ minimum: 1, default: 10_000 }),
      },
      { additionalProperties: false, default: {} },
    ),
    // Presence (Synapse's key): online while clients sync, m.presence in sync and over federation.
    presence: Type.Object({ enabled: Type.Boolean({ default: true }) }, { additionalProperties: false, default: {} }),
    // Delivery of notifications to push gateways (HTTP pushers, `POST /_matrix/push/v1/notify`).
    // Gateways are reached only at addresses ip_range_blacklist/ip_range_whitelist allow. A failed
    // push is retried after min_retry_interval, doubling up to max_retry_interval; a pusher that has
    // failed for give_up_after skips the notification it is stuck on (as Synapse does).
    push: Type.Object(
      {
        request_timeout: duration('10s'),
        min_retry_interval: duration('1s'),
        max_retry_interval: duration('1h'),
        give_up_after: duration('1d'),
        // Pushers sending at once, across all users.
        max_concurrent: Type.Integer({ minimum: 1, maximum: 1000, default: 16 }),
        // The badge (`counts.unread`): rooms with unread notifications (true, Synapse's default) or notifications.
        group_unread_count_by_room: Type.Boolean({ default: true }),
        // PEM files of CAs trusted for https gateways besides the system's (a private gateway; tests).
        custom_ca_list: Type.Array(Type.String({ minLength: 1 }), { default: [] }),
      },
      { additionalProperties: false, default: {} },
    ),
    // Prometheus metrics at `path`, for clients at `allowed_addresses` only (by the connection's own
    // address; behind x_forwarded, never for a request that came through the proxy).
    metrics: Type.Object(
      {
        enabled: Type.Boolean({ default: true }),
        path: Type.String({ pattern: '^/[^\\s?#]*$', default: '/metrics', [EXPECTED]: 'a path such as /metrics' }),
        allowed_addresses: Type.Array(Type.String({ minLength: 1 }), { default: ['127.0.0.0/8', '::1/128'] }),
      },
      { additionalProperties: false, default: {} },
    ),
    // The bot portal (docs/portal.md): people sign in with the organisation's OpenID Connect
    // provider and make their own bots. Off unless configured.
    portal: Type.Optional(
      Type.Object(
        {
          // The server of the people's own user ids (@alice:example.org): owners are recorded so.
          people_server_name: Type.String({
            minLength: 1,
            maxLength: 255,
            pattern: '^(\\[[0-9A-Fa-f:.]+\\]|[A-Za-z0-9.-]+)(:[0-9]{1,5})?$',
            [EXPECTED]: 'the server name of the organisation’s homeserver, such as example.org',
          }),
          oidc_providers: Type.Array(OidcProviderSchema, { minItems: 1, maxItems: 10 }),
          // Where someone without the right to create bots asks for it (a ticket form, a mail address).
          request_access_url: Type.Union([Type.String({ pattern: '^(https?|mailto):[^\\s]+$', [EXPECTED]: 'an https:// or mailto: URL' }), Type.Null()], { default: null }),
          // The right to create bots by the provider's attributes (all must hold); null: by grants only.
          creator_attribute_requirements: Type.Union([Type.Array(AttributeRequirementSchema, { minItems: 1 }), Type.Null()], { default: null }),
          max_bots_per_owner: Type.Integer({ minimum: 0, maximum: 10_000, default: 10 }),
          bot_username_pattern: Type.String({ minLength: 1, maxLength: 500, default: '^[a-z][a-z0-9._-]{1,62}$' }),
          reserved_usernames: Type.Array(Type.String({ minLength: 1 }), {
            default: ['admin', 'administrator', 'root', 'support', 'security', 'abuse', 'postmaster', 'webmaster', 'help', 'info', 'noreply', 'no-reply', 'system', 'server', 'matrix', 'bridge', 'bot', 'bots'],
          }),
          session_lifetime: duration('8h'),
          session_idle_timeout: duration('30m'),
          // Signs the portal's cookies; null: a random secret kept in the database.
          cookie_secret: Type.Union([Type.String({ minLength: 32, [EXPECTED]: 'a random secret of at least 32 characters (openssl rand -hex 32)' }), Type.Null()], { default: null }),
          // Sign-ins started per client address: an office behind one address signs in together.
          rc_sign_in: rateLimit(0.2, 20),
          rc_bot_creation: rateLimit(0.01, 5),
        },
        { additionalProperties: false },
      ),
    ),
    logging: Type.Object(
      {
        level: StringEnum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const, { default: 'info' }),
        // json: one JSON object per line; pretty: readable lines; auto: pretty on a terminal, else json.
        format: StringEnum(['auto', 'json', 'pretty'] as const, { default: 'auto' }),
      },
      { additionalProperties: false, default: {} },
    ),
  },
  { additionalProperties: false },
);

/** The configuration as written (durations still in their written form). */
export type RawConfig = Static<typeof ConfigSchema>;

/** The configuration the server runs with: defaults applied, durations in milliseconds. */
export interface Config extends Omit<
  RawConfig,
  'app_service_config_files' | 'refreshable_access_token_lifetime' | 'nonrefreshable_access_token_lifetime' | 'refresh_token_lifetime' | 'max_sync_timeout' | 'max_upload_size' | 'listen' | 'key_refresh_interval' | 'federation' | 'ip_range_blacklist' | 'database' | 'media_retention' | 'media' | 'portal' | 'push'
> {
  /** The bot portal; undefined: off. */
  portal: PortalConfig | undefined;
  database: Omit<RawConfig['database'], 'statement_timeout'> & {
    /** Milliseconds. */
    statement_timeout: number;
  };
  key_refresh_interval: number;
  federation: {
    request_timeout: number;
    max_response_bytes: number;
    min_retry_interval: number;
    max_retry_interval: number;
    inbound_fetch: Omit<RawConfig['federation']['inbound_fetch'], 'deadline'> & { deadline: number };
    backfill: Omit<RawConfig['federation']['backfill'], 'messages_wait'> & { messages_wait: number };
  };
  ip_range_blacklist: string[];
  /** Durations in milliseconds. */
  push: Omit<RawConfig['push'], 'request_timeout' | 'min_retry_interval' | 'max_retry_interval' | 'give_up_after'> & {
    request_timeout: number;
    min_retry_interval: number;
    max_retry_interval: number;
    give_up_after: number;
  };
  listen: Omit<RawConfig['listen'], 'request_timeout'> & {
    /** Milliseconds. */
    request_timeout: number;
  };
  /** Bytes. */
  max_upload_size: number;
  media_retention: {
    /** Milliseconds, or null: kept until the size bound needs the room. */
    remote_media_lifetime: number | null;
  };
  media: Omit<RawConfig['media'], 'remote_fetch_queue_timeout' | 'max_remote_cache_size'> & {
    /** Milliseconds. */
    remote_fetch_queue_timeout: number;
    /** Bytes, or null for no bound. */
    max_remote_cache_size: number | null;
  };
  max_sync_timeout: number;
  refreshable_access_token_lifetime: number | null;
  nonrefreshable_access_token_lifetime: number | null;
  refresh_token_lifetime: number | null;
  app_service_config_files: string[];
  /** The registrations those files hold, read and checked. */
  app_services: AppServiceRegistration[];
}

/** `portal:` as the server runs with it: durations in milliseconds. */
export interface PortalConfig extends Omit<NonNullable<RawConfig['portal']>, 'session_lifetime' | 'session_idle_timeout' | 'oidc_providers'> {
  /** Milliseconds. */
  session_lifetime: number;
  /** Milliseconds. */
  session_idle_timeout: number;
  oidc_providers: OidcProviderConfig[];
}

export type OidcProviderConfig = Static<typeof OidcProviderSchema>;
export type AttributeRequirement = Static<typeof AttributeRequirementSchema>;
