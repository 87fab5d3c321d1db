/**
 * Request logging with secrets kept out. Access tokens arrive in the Authorization header or in
 * the query string (`?access_token=`), so we log requests ourselves, one line each when answered,
 * with the query's secrets replaced, rather than letting Fastify log the raw request.
 */
import type { FastifyInstance, FastifyServerOptions } from 'fastify';

const SECRET_QUERY_PARAMS = new Set(['access_token', 'refresh_token']);

/**
 * The URL with the values of secret query parameters replaced. Names are compared decoded, as the
 * query parser reads them (`access%5Ftoken` is `access_token` too).
 */
export function redactUrl(url: string): string {
  // A webhook's id is its credential, and it sits in the path.
  if (url.startsWith('/webhook/')) return url.replace(/^\/webhook\/[^/?#]*/, '/webhook/<redacted>');
  const queryStart = url.indexOf('?');
  if (queryStart < 0) return url;
  const pairs = url.slice(queryStart + 1).split('&').map((pair) => {
    const equals = pair.indexOf('=');
    const rawName = equals < 0 ? pair : pair.slice(0, equals);
    return SECRET_QUERY_PARAMS.has(decodeName(rawName)) ? `${rawName}=<redacted>` : pair;
  });
  return `${url.slice(0, queryStart)}?${pairs.join('&')}`;
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

export function installRequestLogging(app: FastifyInstance): void {
  app.addHook('onResponse', async (request, reply) => {
    request.log.info(
      {
        method: request.method,
        url: redactUrl(request.url),
        status: reply.statusCode,
        ms: Math.round(reply.elapsedTime * 10) / 10,
        user: request.requester?.userId,
        ip: request.ip,
      },
      'request',
    );
  });
}
