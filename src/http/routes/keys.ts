/** End-to-end encryption keys: `/keys/upload`, `/keys/query`, `/keys/claim`, `/keys/changes`. */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { MatrixError } from '../../core/errors.js';
import type { Services } from '../../services.js';
import { parseSyncToken } from '../../sync/stream.js';
import { authenticate, requesterOf } from '../auth.js';

const AnyObject = Type.Object({}, { additionalProperties: true });

export function keyRoutes(services: Services): FastifyPluginAsyncTypebox {
  return async (app) => {
    app.addHook('onRequest', authenticate(services.sessions));

    app.post(
      '/keys/upload',
      { schema: { body: Type.Object({ device_keys: Type.Optional(AnyObject), one_time_keys: Type.Optional(AnyObject), fallback_keys: Type.Optional(AnyObject) }, { additionalProperties: true }) } },
      async (request) => services.keys.upload(requesterOf(request), request.body),
    );

    app.post('/keys/query', { schema: { body: Type.Object({ device_keys: AnyObject, timeout: Type.Optional(Type.Integer()) }, { additionalProperties: true }) } }, async (request) =>
      services.keys.query(request.body),
    );

    app.post('/keys/claim', { schema: { body: Type.Object({ one_time_keys: AnyObject, timeout: Type.Optional(Type.Integer()) }, { additionalProperties: true }) } }, async (request) =>
      services.keys.claim(request.body),
    );

    /** GET /keys/changes?from=&to=: sync tokens. */
    app.get('/keys/changes', { schema: { querystring: Type.Object({ from: Type.String(), to: Type.String() }) } }, async (request) => {
      const from = parseSyncToken(request.query.from);
      const to = parseSyncToken(request.query.to);
      if (!from || !to) throw new MatrixError('M_INVALID_PARAM', 'from and to must be sync tokens', { status: 400 });
      const upTo = Math.min(to.stream, services.stream.current);
      return { changed: await services.keys.changedFor(requesterOf(request).userId, from.stream, upTo), left: [] };
    });
  };
}
