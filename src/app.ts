/**
 * `buildApp(config)`: the whole homeserver as a Fastify instance that never listens by itself.
 * Tests drive it with `inject` or supertest; `startServer` (server.ts) makes it listen.
 */
import cors from '@fastify/cors';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { systemClock, type Clock } from './clock.js';
import type { Config } from './config/index.js';
import { frameworkErrorHandler, installErrorHandling } from './http/error-handler.js';
import { installJsonBodies } from './http/json-bodies.js';
import { installValidation } from './http/validation.js';
import { installRequestLogging, loggerOptions } from './http/logging.js';
import { adminRoutes } from './http/routes/admin.js';
import { capabilitiesRoutes } from './http/routes/capabilities.js';
import { discoveryRoutes } from './http/routes/discovery.js';
import { registerRoutes } from './http/routes/register.js';
import { sessionRoutes } from './http/routes/session.js';
import { clientProbeRoutes } from './http/routes/client-probes.js';
import { profileRoutes } from './http/routes/profile.js';
import { AUTHENTICATED_MEDIA_PREFIX, authenticatedMediaRoutes, legacyMediaRoutes, MEDIA_PREFIXES } from './http/routes/media.js';
import { roomEventRoutes } from './http/routes/room-events.js';
import { directoryLookupRoutes, roomRoutes } from './http/routes/rooms.js';
import { syncRoutes } from './http/routes/sync.js';
import { webhookRoutes } from './http/routes/webhooks.js';
import { Bridge, type BridgeOptions } from './bridge/bridge.js';
import { serverInfoFor, type ServerInfo } from './server-info.js';
import { createServices, type Services } from './services.js';
import { migrateToLatest, openDatabase, Storage } from './storage/index.js';

/** The Client-Server API is served under both prefixes: matrix-nio speaks only r0. */
export const CLIENT_PREFIXES = ['/_matrix/client/v3', '/_matrix/client/r0'] as const;

const TOKEN_PRUNE_INTERVAL_MS = 3_600_000;

export interface AppDependencies {
  clock?: Clock;
  /** An already-open storage (the caller closes it); otherwise the config's database is opened. */
  storage?: Storage;
  /** A pino logger to log to; defaults to pino on stdout at the configured level. */
  logger?: FastifyBaseLogger;
  /** Test hooks for the bridge user (a fake feed fetcher, a fixed random source). */
  bridge?: BridgeOptions;
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
  const storage = deps.storage ?? new Storage(openDatabase(config.database));
  try {
    await migrateToLatest(storage.db);
  } catch (err) {
    if (ownsStorage) await storage.close();
    throw err;
  }
  const services = await createServices(config, storage, deps.clock ?? systemClock);
  const server = serverInfoFor(config);

  const app = Fastify({
    ...(deps.logger ? { loggerInstance: deps.logger } : { logger: loggerOptions(config.logging.level) }),
    bodyLimit: config.max_request_body_bytes,
    trustProxy: config.listen.x_forwarded,
    // Room and event ids in paths are long once percent-encoded; the default cap is 100.
    routerOptions: { maxParamLength: 2048 },
    forceCloseConnections: true,
    frameworkErrors: frameworkErrorHandler,
    // Requests are logged by installRequestLogging, with secrets cut out of the URL.
    logController: new LogController({ disableRequestLogging: true }),
  }).withTypeProvider<TypeBoxTypeProvider>();

  const bridge = config.bridge.enabled ? new Bridge(services, server, app.log, deps.bridge) : undefined;
  app.decorate('homeserver', { config, services, server, bridge });
  app.decorateRequest('requester', null);
  // Expired tokens are deleted once a day has passed since they expired; the tables would only grow.
  let pruning: NodeJS.Timeout | undefined;
  app.addHook('onReady', async () => {
    pruning = setInterval(() => {
      services.sessions.pruneExpiredTokens().catch((err: unknown) => app.log.error({ err }, 'pruning expired tokens failed'));
    }, TOKEN_PRUNE_INTERVAL_MS);
    pruning.unref();
    await services.media.start();
    await bridge?.start();
  });
  app.addHook('onClose', async () => {
    clearInterval(pruning);
    await bridge?.stop();
    services.typing.clear();
    if (ownsStorage) await storage.close();
  });

  installErrorHandling(app);
  installJsonBodies(app);
  installValidation(app);
  installRequestLogging(app);
  await app.register(cors, {
    origin: '*',
    methods: ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'OPTIONS'],
    allowedHeaders: ['X-Requested-With', 'Content-Type', 'Authorization', 'Date'],
    strictPreflight: false,
  });
  // Answers are about one user at one moment: no cache may keep them.
  app.addHook('onSend', async (_request, reply, payload) => {
    if (!reply.hasHeader('cache-control')) reply.header('Cache-Control', 'no-cache, no-store, must-revalidate');
    return payload;
  });

  await app.register(discoveryRoutes(server));
  for (const prefix of CLIENT_PREFIXES) {
    await app.register(
      async (client) => {
        await client.register(sessionRoutes(services, server));
        await client.register(registerRoutes(services));
        await client.register(capabilitiesRoutes(services));
        await client.register(roomRoutes(services));
        await client.register(directoryLookupRoutes(services));
        await client.register(roomEventRoutes(services));
        await client.register(syncRoutes(services));
        await client.register(profileRoutes(services));
        await client.register(clientProbeRoutes(services));
      },
      { prefix },
    );
  }
  for (const prefix of MEDIA_PREFIXES) await app.register(legacyMediaRoutes(services), { prefix });
  await app.register(authenticatedMediaRoutes(services), { prefix: AUTHENTICATED_MEDIA_PREFIX });
  await app.register(adminRoutes(services));
  if (bridge) await app.register(webhookRoutes(bridge, config.bridge.webhooks.max_body_bytes));
  return app;
}
