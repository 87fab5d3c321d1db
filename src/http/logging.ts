/**
 * Request logging with secrets kept out, for every HTTP server this project runs (the homeserver,
 * and `bot-homeserver bridge`). Access tokens arrive in the Authorization header or in the query
 * string (`?access_token=`, also an appservice's hs_token from Synapse before its authenticated
 * paths), and a webhook's id, its credential, is in the path; so we log requests ourselves, one
 * line each when answered, with those replaced, rather than letting Fastify log the raw request.
 */
import { LogController, type FastifyBaseLogger, type FastifyInstance, type FastifyServerOptions } from 'fastify';
import { pino } from 'pino';
import { clientErrorHandler } from './connections.js';
import { isEnabled, requestLoggerFactory } from './request-logger.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The webhook a request was for, by name: its request line says which (its id is a secret). */
    webhookName: string | null;
  }
}

// `code`: the authorization code the OpenID provider sends to the bot portal's callback.
const SECRET_QUERY_PARAMS = new Set(['access_token', 'refresh_token', 'code']);

/**
 * The URL with the values of secret query parameters replaced. Names are compared decoded, as the
 * query parser reads them (`access%5Ftoken` is `access_token` too).
 */
export function redactUrl(url: string): string {
  const redactedPath = redactWebhookId(url);
  if (redactedPath !== url) return redactedPath;
  const queryStart = url.indexOf('?');
  if (queryStart < 0) return url;
  const pairs = url.slice(queryStart + 1).split('&').map((pair) => {
    const equals = pair.indexOf('=');
    const rawName = equals < 0 ? pair : pair.slice(0, equals);
    return SECRET_QUERY_PARAMS.has(decodeName(rawName)) ? `${rawName}=<redacted>` : pair;
  });
  return `${url.slice(0, queryStart)}?${pairs.join('&')}`;
}

/**
 * A webhook's id is its credential, and it sits in the path. Matched on the decoded path, and
 * anywhere in it: `/%77ebhook/<id>` is routed to the webhook too, and `//webhook/<id>` (a base
 * URL with a trailing slash) is a mistake whose id is still a secret.
 */
function redactWebhookId(url: string): string {
  const pathEnd = url.search(/[?#]/);
  const path = pathEnd < 0 ? url : url.slice(0, pathEnd);
  let decoded: string;
  try {
    decoded = decodeURIComponent(path);
  } catch {
    decoded = path;
  }
  const at = decoded.toLowerCase().indexOf('/webhook/');
  if (at < 0) return url;
  return `${decoded.slice(0, at)}/webhook/<redacted>`;
}

function decodeName(name: string): string {
  try {
    return decodeURIComponent(name.replaceAll('+', ' '));
  } catch {
    return name;
  }
}

export function loggerOptions(level: string): FastifyServerOptions['logger'] {
  return { level, redact: { paths: ['req.headers.authorization', 'req.headers.cookie'], censor: '<redacted>' } };
}

/** `logging.format`: JSON lines for machines, one readable line per entry for people. */
export type LogFormat = 'auto' | 'json' | 'pretty';

/** `auto` is pretty on a terminal and JSON anywhere else (a pipe, a file, journald, a container's log). */
export function isPretty(format: LogFormat, stream: { isTTY?: boolean } = process.stdout): boolean {
  return format === 'pretty' || (format === 'auto' && stream.isTTY === true);
}

/**
 * The logger of a server that was given none: undefined for JSON (Fastify makes pino on stdout from
 * loggerOptions), or pino writing through pino-pretty on stdout. The redaction is pino's, applied
 * before a line is written in either format, and URLs are redacted before they are logged at all,
 * so the pretty output holds no more than the JSON would. pino-pretty is loaded only when used.
 */
export async function prettyLogger(logging: { level: string; format: LogFormat }): Promise<FastifyBaseLogger | undefined> {
  if (logging.level === 'silent' || !isPretty(logging.format)) return undefined;
  const { default: pretty } = await import('pino-pretty');
  // sync: the last lines before an exit (a failed start, a shutdown) are written, not lost in a buffer.
  // Colours on a terminal only (pino-pretty's own test also colours wherever $CI is set, files too).
  const colorize = process.stdout.isTTY === true && !('NO_COLOR' in process.env);
  const stream = pretty({ destination: 1, sync: true, colorize, translateTime: 'SYS:yyyy-mm-dd HH:MM:ss.l', ignore: 'pid,hostname', singleLine: true });
  return pino(loggerOptions(logging.level) as object, stream) as FastifyBaseLogger;
}

/**
 * The Fastify options of every HTTP server this project runs: its logger (the one given, else pino
 * on stdout), Fastify's own request lines off (they hold the raw URL; installRequestLogging writes
 * the redacted one), per-request loggers made only when used (request-logger.ts), and what Node
 * refuses before routing answered by our handler (Fastify's logs the raw request bytes at trace).
 */
export function serverLoggingOptions(level: string, logger: FastifyBaseLogger | undefined) {
  return {
    ...(logger ? { loggerInstance: logger } : { logger: loggerOptions(level) }),
    logController: new LogController({ disableRequestLogging: true }),
    childLoggerFactory: requestLoggerFactory,
    clientErrorHandler,
  };
}

/** Route patterns polled all day by every client or monitor. */
const ROUTINE_ROUTES = new Set(['/_matrix/client/v3/sync', '/_matrix/client/versions', '/health', '/metrics']);

export function installRequestLogging(app: FastifyInstance, moreRoutine: readonly string[] = []): void {
  const routine = new Set([...ROUTINE_ROUTES, ...moreRoutine]);
  app.decorateRequest('webhookName', null);
  // A plain callback hook that returns at once below `info` (the bench runs at `warn`): building
  // the line, redacting the URL included, cost a few microseconds per request for nothing. The
  // line goes through the app's logger with the request id, so no per-request child logger is
  // made for it (see request-logger.ts).
  const log = app.log;
  app.addHook('onResponse', (request, reply, done) => {
    // Routine polling (every bot's /sync, health checks, scrapes) answered well is logged at
    // debug: at info it was most of the log, a line per bot every 30 seconds. Errors stay at info.
    // Routine routes have no parameters: the routed path (r0 already rewritten to v3) is the
    // route, and reading it costs less than Fastify's routeOptions, which builds an object.
    if (!isEnabled(log, 'debug') && !isEnabled(log, 'info')) {
      done();
      return;
    }
    const queryAt = request.url.indexOf('?');
    const path = queryAt < 0 ? request.url : request.url.slice(0, queryAt);
    const level = reply.statusCode < 400 && routine.has(path) ? 'debug' : 'info';
    if (isEnabled(log, level)) {
      log[level](
        {
          reqId: request.id,
          method: request.method,
          url: redactUrl(request.originalUrl),
          status: reply.statusCode,
          ms: Math.round(reply.elapsedTime * 10) / 10,
          user: request.requester?.userId,
          webhook: request.webhookName ?? undefined,
          ip: request.ip,
        },
        'request',
      );
    }
    done();
  });
}
