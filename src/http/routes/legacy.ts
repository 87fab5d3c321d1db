/**
 * The legacy read APIs Synapse still serves (the spec's r0.6 and earlier), which SyTest and old
 * clients use: the event stream `GET /events`, one event `GET /events/{eventId}`, and the initial
 * syncs `GET /initialSync` and `GET /rooms/{roomId}/initialSync`. Built on sync (sync/legacy-sync.ts).
 */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { Services } from '../../services.js';
import { legacyLimit, v1 } from '../../sync/legacy-sync.js';
import { authenticate, GUEST_ROUTE, requesterOf } from '../auth.js';
import { whileClientWaits } from '../connections.js';
import { MatrixError } from '../../core/errors.js';

export function legacyRoutes(services: Services): FastifyPluginAsyncTypebox {
  return async (app) => {
    app.addHook('onRequest', authenticate(services.sessions));

    /** GET /events: the event stream since `from` (a sync token), waiting up to `timeout` ms. */
    app.get(
      '/events',
      {
        ...GUEST_ROUTE,
        schema: {
          querystring: Type.Object({
            from: Type.Optional(Type.String()),
            timeout: Type.Optional(Type.Integer({ minimum: 0 })),
            // Accepted (clients send it) and not needed: a page holds at most 100 events a room.
            limit: Type.Optional(Type.Integer({ minimum: 0 })),
            room_id: Type.Optional(Type.String()),
          }),
        },
      },
      async (request, reply) => {
        // As Synapse: a guest reads one room's stream, never every room's.
        if (requesterOf(request).isGuest && request.query.room_id === undefined) throw new MatrixError('M_UNKNOWN', 'Guest users must specify room_id param');
        // A client that goes away frees its parked request at once.
        return whileClientWaits(reply.raw, (signal) =>
          services.legacySync.events({
            requester: requesterOf(request),
            from: request.query.from,
            timeoutMs: Math.min(request.query.timeout ?? 0, services.config.max_sync_timeout),
            roomId: request.query.room_id,
            signal,
          }),
        );
      },
    );

    /** GET /events/{eventId}: one event of any room the user may read it in. */
    app.get('/events/:eventId', { schema: { params: Type.Object({ eventId: Type.String() }) } }, async (request) => {
      const event = await services.history.eventById(requesterOf(request), request.params.eventId);
      return v1(event, String(event.room_id));
    });

    const InitialSyncQuery = Type.Object({
      limit: Type.Optional(Type.Integer({ minimum: 0 })),
      archived: Type.Optional(Type.Boolean()),
    });

    /** GET /initialSync: every room with its state and latest messages (`archived`: rooms left too). */
    app.get('/initialSync', { schema: { querystring: InitialSyncQuery } }, async (request) =>
      services.legacySync.initialSync(requesterOf(request), { limit: legacyLimit(request.query.limit), archived: request.query.archived === true }),
    );

    /** GET /rooms/{roomId}/initialSync: one room, as the user may see it. */
    app.get(
      '/rooms/:roomId/initialSync',
      { ...GUEST_ROUTE, schema: { params: Type.Object({ roomId: Type.String() }), querystring: InitialSyncQuery } },
      async (request) => services.legacySync.roomInitialSync(requesterOf(request), request.params.roomId, legacyLimit(request.query.limit)),
    );
  };
}
