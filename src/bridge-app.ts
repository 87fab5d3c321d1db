/**
 * `bot-homeserver bridge`: the bridge alone, as an application service of another homeserver (the
 * organisation's main Synapse, where people sign in). It listens for that homeserver's
 * transactions (`/_matrix/app/v1/...`, checked against the `hs_token`) and for webhooks
 * (`/webhook/<id>`), keeps its webhooks, feeds and commands in its own database, and acts through
 * the main homeserver's client API. The commands, renderers, signatures and limits are the
 * in-process bridge's.
 */
import type { AddressInfo } from 'node:net';
import { Type } from '@sinclair/typebox';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyRequest } from 'fastify';
import { stringify as toYaml } from 'yaml';
import { AppserviceHomeserver, NotReady } from './bridge/appservice-homeserver.js';
import { Bridge, type BridgeOptions } from './bridge/bridge.js';
import { bridgeCryptoKeyPath } from './bridge/crypto/store-key.js';
import { ConfigError, type Config } from './config/index.js';
import { systemClock } from './core/clock.js';
import { MatrixError } from './core/errors.js';
import { escapeRegExp } from './core/escape-regexp.js';
import { installErrorHandling } from './http/error-handler.js';
import { installJsonBodies } from './http/json-bodies.js';
import { installRequestLogging, prettyLogger, serverLoggingOptions } from './http/logging.js';
import { webhookRoutes } from './http/routes/webhooks.js';
import { baseUrlFor, withTrailingSlash } from './server-info.js';
import { VERSION } from './version.js';
import { migrateToLatest, openDatabase, Storage } from './storage/index.js';

/** How long a request to the main homeserver may take. */
const HOMESERVER_TIMEOUT_MS = 30_000;

export interface RunningBridge {
  app: FastifyInstance;
  bridge: Bridge;
  port: number;
  url: string;
  close(): Promise<void>;
}

export interface BridgeAppOptions {
  logger?: FastifyBaseLogger | undefined;
  bridge?: BridgeOptions | undefined;
}

function appserviceConfig(config: Config): NonNullable<Config['bridge']['appservice']> {
  const appservice = config.bridge.appservice;
  if (!appservice) {
    throw new ConfigError('bridge.appservice is not set: it names the main homeserver (homeserver_url, server_name), the tokens (as_token, hs_token) and the url it reaches this bridge at; see docs/bridge.md');
  }
  return appservice;
}

/** The registration's sender: never the bridge user itself. */
export function appserviceSenderLocalpart(config: Config): string {
  const localpart = appserviceConfig(config).sender_localpart ?? `${config.bridge.localpart}-appservice`;
  if (localpart === config.bridge.localpart) {
    throw new ConfigError(`bridge.appservice.sender_localpart must differ from bridge.localpart (${localpart}): Synapse refuses /sync to the appservice's sender`);
  }
  return localpart;
}

/** The registration file to install in the main homeserver (Synapse's `app_service_config_files`). */
export function bridgeRegistration(config: Config): string {
  const appservice = appserviceConfig(config);
  const userId = `@${config.bridge.localpart}:${appservice.server_name}`;
  return toYaml({
    id: appservice.id,
    url: appservice.url,
    as_token: appservice.as_token,
    hs_token: appservice.hs_token,
    // Not the bridge user: Synapse answers /sync to the sender with a 500, and the bridge's crypto
    // device syncs as the bridge user. The bridge user is in the exclusive namespace; the bridge
    // registers it and acts as it with ?user_id= (identity assertion).
    sender_localpart: appserviceSenderLocalpart(config),
    // The bridge has its own limits (webhooks, feeds); the homeserver's would only drop posts.
    rate_limited: false,
    namespaces: {
      users: [{ exclusive: true, regex: `^${escapeRegExp(userId)}$` }],
      aliases: [],
      rooms: [],
    },
  });
}

export async function startBridgeApp(config: Config, options: BridgeAppOptions = {}): Promise<RunningBridge> {
  const appservice = appserviceConfig(config);
  const storage = new Storage(openDatabase(config.database));
  try {
    await migrateToLatest(storage.db);
  } catch (err) {
    await storage.close();
    throw err;
  }
  const app = Fastify({
    // The server's request logging: one line per request, tokens and webhook ids cut out.
    ...serverLoggingOptions(config.logging.level, options.logger ?? (await prettyLogger(config.logging))),
    bodyLimit: config.max_request_body_bytes,
    trustProxy: config.listen.x_forwarded,
    routerOptions: { maxParamLength: 2048 },
    forceCloseConnections: 'idle',
    pluginTimeout: 0,
  }).withTypeProvider<TypeBoxTypeProvider>();
  let publicUrl = config.bridge.webhook_base_url ?? config.public_baseurl;
  const homeserver = new AppserviceHomeserver({
    homeserverUrl: appservice.homeserver_url,
    serverName: appservice.server_name,
    localpart: config.bridge.localpart,
    asToken: appservice.as_token,
    displayName: config.bridge.displayname,
    storage,
    log: app.log,
    timeoutMs: HOMESERVER_TIMEOUT_MS,
  });
  const bridge = new Bridge(
    {
      homeserver,
      storage,
      config: config.bridge,
      clock: systemClock,
      rateLimits: config.ratelimiting_enabled,
      webhookBaseUrl: () => withTrailingSlash(publicUrl ?? ''),
      log: app.log,
      cryptoKeyPath: bridgeCryptoKeyPath(config),
    },
    options.bridge,
  );

  installErrorHandling(app);
  installJsonBodies(app);
  installRequestLogging(app);
  await app.register(async (scope) => {
    // Only the main homeserver, which holds the hs_token, may call these.
    scope.addHook('onRequest', async (request) => {
      if (!holdsToken(request, appservice.hs_token)) throw new MatrixError('M_FORBIDDEN', 'Bad or missing hs_token', { status: 403 });
    });
    const transaction = async (request: FastifyRequest<{ Params: { txnId: string }; Body: { events?: unknown } }>) => {
      const events = Array.isArray(request.body?.events) ? (request.body.events as Record<string, unknown>[]) : [];
      try {
        await homeserver.receiveTransaction(request.params.txnId, events);
      } catch (err) {
        if (err instanceof NotReady) throw new MatrixError('M_UNKNOWN', err.message, { status: 503 });
        throw err;
      }
      return {};
    };
    const txnSchema = { params: Type.Object({ txnId: Type.String() }), body: Type.Object({ events: Type.Optional(Type.Array(Type.Any())) }) };
    // Each under its path and the one before Matrix 1.1: Synapse before 1.81 calls only the
    // latter (with the hs_token as ?access_token=), later ones fall back to it on a 404.
    for (const prefix of ['/_matrix/app/v1', '']) {
      scope.put(`${prefix}/transactions/:txnId`, { schema: txnSchema }, transaction);
      // The bridge creates no users or aliases on request.
      scope.get(`${prefix}/users/:userId`, async () => {
        throw new MatrixError('M_NOT_FOUND', 'No such user here');
      });
      scope.get(`${prefix}/rooms/:alias`, async () => {
        throw new MatrixError('M_NOT_FOUND', 'No such alias here');
      });
    }
    scope.post('/_matrix/app/v1/ping', async () => ({}));
  });
  await app.register(webhookRoutes(bridge, config.bridge.webhooks.max_body_bytes));
  app.get('/health', async () => ({ status: 'ok' }));
  app.addHook('onClose', async () => {
    await bridge.close();
    await storage.close();
  });

  try {
    await app.listen({ host: config.listen.host, port: config.listen.port, listenTextResolver: (address) => `bot-homeserver ${VERSION} bridge listening on ${address}` });
    const { port } = app.server.address() as AddressInfo;
    const url = baseUrlFor(config.listen.host, port, false);
    publicUrl ??= url;
    // Transactions that come before the bridge follows its rooms are answered 503 and retried.
    await bridge.start();
    app.log.info({ version: VERSION, port, homeserver: appservice.homeserver_url, user: bridge.userId }, 'bridge ready');
    return { app, bridge, port, url, close: () => app.close() };
  } catch (err) {
    await app.close();
    throw err;
  }
}

function holdsToken(request: FastifyRequest, token: string): boolean {
  const header = request.headers.authorization;
  const given = header?.startsWith('Bearer ') ? header.slice('Bearer '.length).trim() : (request.query as Record<string, unknown> | undefined)?.access_token;
  return typeof given === 'string' && given === token;
}

