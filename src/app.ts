/**
 * `buildApp(config)`: the whole homeserver as a Fastify instance that never listens by itself.
 * Tests drive it with `inject` or supertest; `startServer` (server.ts) makes it listen.
 */
import { readFileSync } from 'node:fs';
import cors from '@fastify/cors';
import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { systemClock, type Clock } from './core/clock.js';
import { ConfigError, type Config } from './config/index.js';
import { frameworkErrorHandler, installErrorHandling } from './http/error-handler.js';
import { limitConnectionsPerAddress, requestDeadlineOptions } from './http/connections.js';
import { installJsonBodies } from './http/json-bodies.js';
import { installValidation } from './http/validation.js';
import { installRequestLogging, prettyLogger, serverLoggingOptions } from './http/logging.js';
import { adminRoutes } from './http/routes/admin.js';
import { federationKeyRoutes } from './http/routes/federation-keys.js';
import { federationRoutes } from './http/routes/federation.js';
import type { FederationTestHooks } from './federation/federation.js';
import { capabilitiesRoutes } from './http/routes/capabilities.js';
import { discoveryRoutes } from './http/routes/discovery.js';
import { registerRoutes } from './http/routes/register.js';
import { sessionRoutes } from './http/routes/session.js';
import { clientProbeRoutes } from './http/routes/client-probes.js';
import { profileRoutes } from './http/routes/profile.js';
import { deviceRoutes } from './http/routes/devices.js';
import { relationRoutes } from './http/routes/relations.js';
import { appserviceRoutes } from './http/routes/appservices.js';
import { keyRoutes } from './http/routes/keys.js';
import { AUTHENTICATED_MEDIA_PREFIX, authenticatedMediaRoutes, legacyMediaRoutes, MEDIA_PREFIXES } from './http/routes/media.js';
import { roomEventRoutes } from './http/routes/room-events.js';
import { legacyRoutes } from './http/routes/legacy.js';
import { directoryLookupRoutes, roomRoutes } from './http/routes/rooms.js';
import { syncRoutes } from './http/routes/sync.js';
import { webhookRoutes } from './http/routes/webhooks.js';
import { opsRoutes } from './http/routes/ops.js';
import { checkHealth } from './ops/health.js';
import { Metrics } from './ops/metrics.js';
import { Bridge, type BridgeOptions } from './bridge/bridge.js';
import { LocalHomeserver } from './bridge/local-homeserver.js';
import { bridgeCryptoKeyPath } from './bridge/crypto/store-key.js';
import { serverInfoFor, withTrailingSlash, type ServerInfo } from './server-info.js';
import { createServices, type Services } from './services.js';
import { bindServerName, checkpointInBackground, migrateToLatest, observeQueries, openDatabase, Storage } from './storage/index.js';
import type { LeasedJob } from './cluster/cluster.js';

/** The Client-Server API is served under both prefixes: matrix-nio speaks only r0. */
export const CLIENT_PREFIXES = ['/_matrix/client/v3', '/_matrix/client/r0'] as const;

/**
 * Legacy `r0` paths answer exactly as `v3` does, so they are routed as `v3` instead of being
 * registered twice: half the routes to compile, which is most of what starting an app costs
 * (a test double per test file). Logs keep the path the client asked for.
 */
const LEGACY_PREFIXES: ReadonlyArray<readonly [legacy: string, current: string]> = [
  ['/_matrix/client/r0/', '/_matrix/client/v3/'],
  ['/_matrix/media/r0/', '/_matrix/media/v3/'],
  // Cross-signing under the unstable prefix it had before spec v1.1 (Synapse still serves it;
  // SyTest's cross-signing tests use it).
  ['/_matrix/client/unstable/keys/device_signing/', '/_matrix/client/v3/keys/device_signing/'],
  ['/_matrix/client/unstable/keys/signatures/', '/_matrix/client/v3/keys/signatures/'],
];

export function routedUrl(url: string): string {
  for (const [legacy, current] of LEGACY_PREFIXES) {
    if (url.startsWith(legacy)) return current + url.slice(legacy.length);
  }
  return url;
}

const TOKEN_PRUNE_INTERVAL_MS = 3_600_000;
const DEACTIVATED_SWEEP_INTERVAL_MS = 60_000;
const PRESENCE_SWEEP_INTERVAL_MS = 15_000;
/** How long a shutdown waits for requests being answered before cutting them off. */
const SHUTDOWN_GRACE_MS = 10_000;

export interface AppDependencies {
  clock?: Clock;
  /** An already-open storage (the caller closes it); otherwise the config's database is opened. */
  storage?: Storage;
  /** A pino logger to log to; defaults to pino on stdout at the configured level. */
  logger?: FastifyBaseLogger;
  /** Test hooks for the bridge user (a fake feed fetcher, a fixed random source). */
  bridge?: BridgeOptions;
  /** Test hooks for federation (name resolution without DNS). */
  federation?: FederationTestHooks;
}

export interface Homeserver {
  config: Config;
  services: Services;
  server: ServerInfo;
  /** The bridge user, when `bridge.enabled`. */
  bridge: Bridge | undefined;
}

declare module 'fastify' {
  interface FastifyInstance {
    homeserver: Homeserver;
  }
}

export type App = FastifyInstance;

export async function buildApp(config: Config, deps: AppDependencies = {}): Promise<App> {
  const ownsStorage = deps.storage === undefined;
  const storage = deps.storage ?? new Storage(openDatabase({ ...config.database, measureQueries: config.metrics.enabled }), { searchIndex: config.enable_search });
  let services: Services;
  try {
    await migrateToLatest(storage.db);
    await bindServerName(storage.db, config.server_name);
    services = await createServices(config, storage, deps.clock ?? systemClock, { federation: deps.federation });
    // Before anything is written: other processes on the same PostgreSQL database are joined.
    await services.cluster?.start();
  } catch (err) {
    if (ownsStorage) await storage.close();
    throw err;
  }
  const server = serverInfoFor(config);
  const metrics = config.metrics.enabled ? instrument(services) : undefined;

  const app = Fastify({
    // Requests are logged by installRequestLogging, with secrets cut out of the URL.
    ...serverLoggingOptions(config.logging.level, deps.logger ?? (await prettyLogger(config.logging))),
    bodyLimit: config.max_request_body_bytes,
    trustProxy: config.listen.x_forwarded,
    // Room and event ids in paths are long once percent-encoded; the default cap is 100.
    routerOptions: { maxParamLength: 2048 },
    // Closing ends idle connections at once; requests being answered finish first (parked syncs
    // are released in preClose below, so nobody gets a connection cut without an answer).
    forceCloseConnections: 'idle',
    ...requestDeadlineOptions(config.listen),
    frameworkErrors: frameworkErrorHandler,
    rewriteUrl: (request) => routedUrl(request.url ?? '/'),
    // Our plugins are our own code and never hang; a timer per plugin only slowed every start.
    pluginTimeout: 0,
    // TLS on the listener itself when configured (tests; a reverse proxy is the usual front).
    ...(tlsOptions(config) as object),
  }).withTypeProvider<TypeBoxTypeProvider>();

  // SQLite's WAL checkpoints (a few ms each, every 1,000 pages written) go to a thread of their
  // own instead of the commit that crosses the line: no request waits for one.
  const checkpoints = ownsStorage ? checkpointInBackground(storage.db, (message) => app.log.warn(message)) : undefined;
  // Behind a reverse proxy every connection comes from it: the proxy limits clients instead.
  limitConnectionsPerAddress(app.server, config.listen.x_forwarded ? 0 : config.listen.max_connections_per_address);
  const bridge = config.bridge.enabled
    ? new Bridge(
        {
          homeserver: new LocalHomeserver(services, app.log),
          storage: services.storage,
          config: config.bridge,
          clock: services.clock,
          rateLimits: config.ratelimiting_enabled,
          webhookBaseUrl: () => withTrailingSlash(config.bridge.webhook_base_url ?? server.publicBaseUrl),
          log: app.log,
          cryptoKeyPath: bridgeCryptoKeyPath(config),
        },
        deps.bridge,
      )
    : undefined;
  if (bridge) services.cluster?.onWebhooksChanged(() => bridge.webhooks.forgetCached());
  app.decorate('homeserver', { config, services, server, bridge });
  app.decorateRequest('requester', null);
  // Expired tokens are deleted once a day has passed since they expired, and federation
  // transactions a day after they came: the tables would only grow. Cached remote media past
  // media_retention goes at the same pace.
  let pruning: NodeJS.Timeout | undefined;
  let deactivatedSweep: NodeJS.Timeout | undefined;
  let presenceSweep: NodeJS.Timeout | undefined;
  // What must run once per database: here, or with several processes wherever its lease is held
  // (taken over within seconds when that process dies).
  const runOnce = async (name: string, job: LeasedJob): Promise<void> => {
    if (services.cluster) await services.cluster.lease(name, job);
    else await job.start();
  };
  const maintenance: LeasedJob = {
    start: async () => {
      pruning = setInterval(() => {
        services.sessions.pruneExpiredTokens().catch((err: unknown) => app.log.error({ err }, 'pruning expired tokens failed'));
        services.roomFederation.pruneTransactions().catch((err: unknown) => app.log.error({ err }, 'pruning federation transactions failed'));
        services.toDevice.pruneTransactions().catch((err: unknown) => app.log.error({ err }, 'pruning to-device transactions failed'));
        // Hourly, as Synapse applies media_retention.
        services.media.applyRetention().catch((err: unknown) => app.log.error({ err }, 'applying media retention failed'));
      }, TOKEN_PRUNE_INTERVAL_MS);
      pruning.unref();
      // Accounts the CLI deactivated leave their rooms here, at start and then within a minute.
      const leaveDeactivated = () =>
        services.rooms
          .leaveRoomsOfDeactivatedUsers()
          .then((users) => users.length > 0 && app.log.info({ users }, 'deactivated accounts left their rooms'))
          .catch((err: unknown) => app.log.error({ err }, 'taking deactivated accounts out of their rooms failed'));
      await leaveDeactivated();
      deactivatedSweep = setInterval(() => void leaveDeactivated(), DEACTIVATED_SWEEP_INTERVAL_MS);
      deactivatedSweep.unref();
    },
    stop: () => {
      clearInterval(pruning);
      clearInterval(deactivatedSweep);
    },
  };
  app.addHook('onReady', async () => {
    if (services.cluster) services.cluster.log = app.log;
    await runOnce('maintenance', maintenance);
    // Users whose clients stopped syncing go offline (each process knows whom it serves).
    presenceSweep = setInterval(() => void services.presence.sweepIdle().catch((err: unknown) => app.log.error({ err }, 'presence sweep failed')), PRESENCE_SWEEP_INTERVAL_MS);
    presenceSweep.unref();
    services.media.log = app.log;
    await services.media.start();
    services.federationSender.log = app.log;
    services.roomFederation.useLogger(app.log);
    services.backfiller.useLogger(app.log);
    services.searchIndexer.log = app.log;
    await services.searchIndexer.start();
    await runOnce('federation-sender', { start: () => services.federationSender.start(), stop: () => services.federationSender.stop() });
    services.appservices.sender.log = app.log;
    await runOnce('appservice-sender', {
      start: async () => {
        await services.appservices.ensureSenders();
        await services.appservices.sender.start();
      },
      stop: () => services.appservices.sender.stop(),
    });
    services.pusherSender.log = app.log;
    await runOnce('pusher-sender', { start: () => services.pusherSender.start(), stop: () => services.pusherSender.stop() });
    if (bridge) await runOnce('bridge', { start: () => bridge.start(), stop: () => bridge.stop() });
  });
  app.addHook('preClose', async () => {
    // The leased jobs first, the bridge among them: its own sync must not spin on a notifier that
    // no longer parks anyone. Another process takes them over.
    if (services.cluster) await services.cluster.close();
    else await bridge?.stop();
    services.notifier.releaseAll();
    // A request that still runs after this long (a slow federation join) is cut off.
    setTimeout(() => app.server.closeAllConnections(), SHUTDOWN_GRACE_MS).unref();
  });
  app.addHook('onClose', async () => {
    metrics?.registry.clear();
    clearInterval(pruning);
    clearInterval(deactivatedSweep);
    clearInterval(presenceSweep);
    services.federationSender.stop();
    services.appservices.sender.stop();
    services.pusherSender.stop();
    services.pushGateways.close();
    await services.searchIndexer.close().catch((err: unknown) => app.log.error({ err }, 'search: indexing at shutdown failed; the next start does it'));
    // What a fill was writing is done before storage goes (it waits a few seconds at most).
    const backfills = services.backfiller.close();
    services.federation.close();
    await backfills;
    services.typing.clear();
    await bridge?.close();
    await services.cluster?.close();
    await checkpoints?.stop();
    if (ownsStorage) await storage.close();
  });

  installErrorHandling(app);
  installJsonBodies(app);
  installValidation(app);
  installRequestLogging(app, [config.metrics.path]);
  if (metrics) {
    // Labelled by the route's pattern (never the raw path, whose ids would make a series each).
    app.addHook('onResponse', (request, reply, done) => {
      metrics.requests.observe({ method: request.method, route: request.routeOptions.url ?? 'unmatched', status: String(reply.statusCode) }, reply.elapsedTime / 1000);
      done();
    });
  }
  await app.register(cors, {
    origin: '*',
    methods: ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'OPTIONS'],
    allowedHeaders: ['X-Requested-With', 'Content-Type', 'Authorization', 'Date'],
    strictPreflight: false,
  });
  // Answers are about one user at one moment: no cache may keep them.
  // (A callback hook: an async one costs a promise on every answer.)
  app.addHook('onSend', (_request, reply, payload, done) => {
    if (!reply.hasHeader('cache-control')) reply.header('Cache-Control', 'no-cache, no-store, must-revalidate');
    // Synapse answers JSON as exactly `application/json` (JSON is UTF-8 by definition); strict
    // clients and conformance tests compare the header as a whole.
    if (reply.getHeader('content-type') === 'application/json; charset=utf-8') reply.header('Content-Type', 'application/json');
    done(null, payload);
  });

  await app.register(named('discoveryRoutes', discoveryRoutes(server)));
  // Registered under v3 only: r0 requests are routed there (routedUrl).
  await app.register(
    named('clientApi', async (client: FastifyInstance) => {
      await client.register(named('sessionRoutes', sessionRoutes(services, server)));
      await client.register(named('registerRoutes', registerRoutes(services)));
      await client.register(named('capabilitiesRoutes', capabilitiesRoutes(services)));
      await client.register(named('roomRoutes', roomRoutes(services)));
      await client.register(named('directoryLookupRoutes', directoryLookupRoutes(services)));
      await client.register(named('roomEventRoutes', roomEventRoutes(services)));
      await client.register(named('syncRoutes', syncRoutes(services)));
      await client.register(named('legacyRoutes', legacyRoutes(services)));
      await client.register(named('profileRoutes', profileRoutes(services)));
      await client.register(named('deviceRoutes', deviceRoutes(services)));
      await client.register(named('keyRoutes', keyRoutes(services)));
      await client.register(named('clientProbeRoutes', clientProbeRoutes(services)));
    }),
    { prefix: CLIENT_PREFIXES[0] },
  );
  await app.register(named('relationRoutes', relationRoutes(services)), { prefix: '/_matrix/client/v1' });
  await app.register(named('appserviceRoutes', appserviceRoutes(services)), { prefix: '/_matrix/client/v1' });
  await app.register(named('legacyMediaRoutes', legacyMediaRoutes(services)), { prefix: MEDIA_PREFIXES[0] });
  await app.register(named('authenticatedMediaRoutes', authenticatedMediaRoutes(services)), { prefix: AUTHENTICATED_MEDIA_PREFIX });
  await app.register(named('adminRoutes', adminRoutes(services)));
  await app.register(named('federationKeyRoutes', federationKeyRoutes(services)));
  await app.register(named('federationRoutes', federationRoutes(services)), { prefix: '/_matrix/federation' });
  await app.register(named('opsRoutes', opsRoutes(() => checkHealth(storage), metrics, config)));
  // The bot portal, only when configured: its cookies, forms and headers stay inside its prefix.
  // (Loaded only then, with its cookie, CSRF and header plugins: no part of every start.)
  if (services.portal) {
    const { PORTAL_PREFIX, portalRoutes } = await import('./http/routes/portal.js');
    await app.register(named('portalRoutes', portalRoutes(services.portal, server)), { prefix: PORTAL_PREFIX });
  }
  if (bridge) await app.register(named('webhookRoutes', webhookRoutes(bridge, config.bridge.webhooks.max_body_bytes, metrics)));
  if (bridge && metrics) bridge.feeds.onPolled = (outcome) => metrics.feedPolls.inc({ outcome });
  return app;
}

/** Metrics fed by the services as they work. */
function instrument(services: Services): Metrics {
  const metrics = new Metrics({
    parkedSyncs: () => services.notifier.parkedCount(),
    federationQueue: () => services.storage.federation.queuedByKind(),
  });
  services.writer.onFlush((requests, events, ms) => {
    metrics.commitBatchRequests.observe(requests);
    metrics.commitDuration.observe(ms / 1000);
    metrics.eventsPersisted.inc(events);
  });
  services.notifier.wakeObserver = (ms) => metrics.syncWake.observe(ms / 1000);
  observeQueries(services.storage.db, (ms, failed) => metrics.observeQuery(ms, failed));
  return metrics;
}

/**
 * Gives a plugin the name Fastify shows in errors. Without one, Fastify looks the function up in
 * every entry of require.cache, twice per plugin: thousands of entries in a bot's test process.
 */
function named<Plugin extends object>(name: string, plugin: Plugin): Plugin {
  Object.defineProperty(plugin, Symbol.for('fastify.display-name'), { value: name });
  return plugin;
}

function tlsOptions(config: Config): { https: { key: Buffer; cert: Buffer } } | Record<string, never> {
  if (config.tls_certificate_path === null || config.tls_private_key_path === null) return {};
  return { https: { key: readConfiguredFile('tls_private_key_path', config.tls_private_key_path), cert: readConfiguredFile('tls_certificate_path', config.tls_certificate_path) } };
}

function readConfiguredFile(key: string, path: string): Buffer {
  try {
    return readFileSync(path);
  } catch (err) {
    throw new ConfigError(`${key}: cannot read ${path} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
  }
}
