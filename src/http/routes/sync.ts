/** GET /sync and filters. */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { Services } from '../../services.js';
import { StringEnum } from '../../schemas.js';
import { FilterSchema } from '../../sync/filters.js';
import { authenticate, GUEST_ROUTE, requesterOf } from '../auth.js';
import { whileClientWaits } from '../connections.js';
import { MatrixError } from '../../core/errors.js';

const UserParams = Type.Object({ userId: Type.String() });

export function syncRoutes(services: Services): FastifyPluginAsyncTypebox {
  return async (app) => {
    app.addHook('onRequest', authenticate(services.sessions));

    /** GET /sync */
    app.get(
      '/sync',
      {
        ...GUEST_ROUTE,
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
      async (request, reply) =>
        // A client that goes away frees its parked request at once.
        whileClientWaits(reply.raw, (signal) =>
          services.sync.sync({
            requester: requesterOf(request),
            since: request.query.since,
            timeoutMs: Math.min(request.query.timeout ?? 0, services.config.max_sync_timeout),
            fullState: request.query.full_state === true,
            filter: request.query.filter,
            signal,
            setPresence: request.query.set_presence,
          }),
        ),
    );

    /** POST /user/{userId}/filter */
    app.post('/user/:userId/filter', { schema: { params: UserParams, body: FilterSchema } }, async (request) => {
      assertOwnUser(requesterOf(request).userId, request.params.userId, 'create filters');
      return { filter_id: await services.sync.createFilter(request.params.userId, request.body) };
    });

    /** GET /user/{userId}/filter/{filterId} */
    app.get('/user/:userId/filter/:filterId', { schema: { params: Type.Object({ userId: Type.String(), filterId: Type.String() }) } }, async (request) => {
      assertOwnUser(requesterOf(request).userId, request.params.userId, 'get filters');
      return services.sync.storedFilter(request.params.userId, request.params.filterId);
    });
  };
}

export function assertOwnUser(requesterId: string, userId: string, what: string): void {
  if (requesterId !== userId) throw new MatrixError('M_FORBIDDEN', `Cannot ${what} for other users.`);
}
