/** GET /sync and filters. */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { Services } from '../../services.js';
import { StringEnum } from '../../schemas.js';
import { FilterSchema } from '../../sync/filters.js';
import { authenticate, requesterOf } from '../auth.js';
import { MatrixError } from '../errors.js';
import { parseStoredJson } from '../../core/json.js';

/** Stored filters are small; a larger one is a mistake or an attack. */
const MAX_FILTER_BYTES = 65_536;

const UserParams = Type.Object({ userId: Type.String() });

export function syncRoutes(services: Services): FastifyPluginAsyncTypebox {
  return async (app) => {
    app.addHook('onRequest', authenticate(services.sessions));

    /** GET /sync */
    app.get(
      '/sync',
      {
        schema: {
          querystring: Type.Object({
            since: Type.Optional(Type.String()),
            timeout: Type.Optional(Type.Integer({ minimum: 0 })),
            full_state: Type.Optional(Type.Boolean()),
            set_presence: Type.Optional(StringEnum(['offline', 'online', 'unavailable'] as const)),
            filter: Type.Optional(Type.String()),
          }),
        },
      },
      async (request, reply) => {
        // A client that goes away frees its parked sync at once.
        const disconnected = new AbortController();
        const onClose = (): void => {
          if (!reply.raw.writableFinished) disconnected.abort();
        };
        reply.raw.once('close', onClose);
        try {
          return await services.sync.sync({
            requester: requesterOf(request),
            since: request.query.since,
            timeoutMs: Math.min(request.query.timeout ?? 0, services.config.max_sync_timeout),
            fullState: request.query.full_state === true,
            filter: request.query.filter,
            signal: disconnected.signal,
          });
        } finally {
          reply.raw.off('close', onClose);
        }
      },
    );

    /** POST /user/{userId}/filter */
    app.post('/user/:userId/filter', { schema: { params: UserParams, body: FilterSchema } }, async (request) => {
      assertOwnUser(requesterOf(request).userId, request.params.userId, 'create filters');
      const definition = JSON.stringify(request.body);
      if (Buffer.byteLength(definition) > MAX_FILTER_BYTES) throw new MatrixError('M_TOO_LARGE', 'Filter is too large');
      const filterId = await services.storage.userData.insertFilter(request.params.userId, definition);
      return { filter_id: String(filterId) };
    });

    /** GET /user/{userId}/filter/{filterId} */
    app.get('/user/:userId/filter/:filterId', { schema: { params: Type.Object({ userId: Type.String(), filterId: Type.String() }) } }, async (request) => {
      assertOwnUser(requesterOf(request).userId, request.params.userId, 'get filters');
      const id = request.params.filterId;
      const stored = /^\d{1,15}$/.test(id) ? await services.storage.userData.getFilter(request.params.userId, Number(id)) : undefined;
      if (stored === undefined) throw new MatrixError('M_NOT_FOUND', 'No such filter');
      return parseStoredJson<unknown>(stored, {});
    });
  };
}

export function assertOwnUser(requesterId: string, userId: string, what: string): void {
  if (requesterId !== userId) throw new MatrixError('M_FORBIDDEN', `Cannot ${what} for other users.`);
}
