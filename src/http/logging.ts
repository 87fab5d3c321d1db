/**
 * Request logging with secrets kept out. Access tokens arrive in the Authorization header or in
 * the query string (`?access_token=`), so we log requests ourselves, one line each when answered,
 * with the query's secrets replaced, rather than letting Fastify log the raw request.
 */
import type { FastifyInstance, FastifyServerOptions } from 'fastify';

const SECRET_QUERY_PARAMS = /([?&](?:access_token|refresh_token)=)[^&]*/gi;

export function redactUrl(url: string): string {
  return url.replace(SECRET_QUERY_PARAMS, '$1<redacted>');
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
