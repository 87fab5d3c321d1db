/**
 * `/_matrix/client/v1`: relations (`/rooms/{roomId}/relations/{eventId}[/{relType}[/{eventType}]]`),
 * threads (`/rooms/{roomId}/threads`) and `/rooms/{roomId}/timestamp_to_event`, which the spec
 * defines in v1 only.
 */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { Services } from '../../services.js';
import { StringEnum } from '../../schemas.js';
import { authenticate, GUEST_ROUTE, requesterOf } from '../auth.js';

const RelationsQuery = Type.Object({
  from: Type.Optional(Type.String({ maxLength: 64 })),
  to: Type.Optional(Type.String({ maxLength: 64 })),
  limit: Type.Optional(Type.Integer({ minimum: 0 })),
  dir: Type.Optional(StringEnum(['b', 'f'] as const)),
  recurse: Type.Optional(Type.Boolean()),
});

export function relationRoutes(services: Services): FastifyPluginAsyncTypebox {
  return async (app) => {
    app.addHook('onRequest', authenticate(services.sessions));

    const relations = (params: { roomId: string; eventId: string; relType?: string; eventType?: string }, query: { from?: string; to?: string; limit?: number; dir?: 'b' | 'f' }, requester: Parameters<typeof services.history.relations>[0]) =>
      services.history.relations(requester, params.roomId, params.eventId, { ...query, relType: params.relType, eventType: params.eventType });

    const Params = Type.Object({ roomId: Type.String(), eventId: Type.String() });
    app.get('/rooms/:roomId/relations/:eventId', { ...GUEST_ROUTE, schema: { params: Params, querystring: RelationsQuery } }, async (request) =>
      relations(request.params, request.query, requesterOf(request)),
    );
    app.get(
      '/rooms/:roomId/relations/:eventId/:relType',
      { ...GUEST_ROUTE, schema: { params: Type.Object({ roomId: Type.String(), eventId: Type.String(), relType: Type.String({ maxLength: 255 }) }), querystring: RelationsQuery } },
      async (request) => relations(request.params, request.query, requesterOf(request)),
    );
    app.get(
      '/rooms/:roomId/relations/:eventId/:relType/:eventType',
      { ...GUEST_ROUTE, schema: { params: Type.Object({ roomId: Type.String(), eventId: Type.String(), relType: Type.String({ maxLength: 255 }), eventType: Type.String({ maxLength: 255 }) }), querystring: RelationsQuery } },
      async (request) => relations(request.params, request.query, requesterOf(request)),
    );

    app.get(
      '/rooms/:roomId/timestamp_to_event',
      {
        schema: {
          params: Type.Object({ roomId: Type.String() }),
          querystring: Type.Object({ ts: Type.Integer({ minimum: 0 }), dir: StringEnum(['b', 'f'] as const) }),
        },
      },
      async (request) => services.history.timestampToEvent(requesterOf(request), request.params.roomId, request.query.ts, request.query.dir),
    );

    app.get(
      '/rooms/:roomId/threads',
      {
        schema: {
          params: Type.Object({ roomId: Type.String() }),
          querystring: Type.Object({ include: Type.Optional(StringEnum(['all', 'participated'] as const)), from: Type.Optional(Type.String({ maxLength: 64 })), limit: Type.Optional(Type.Integer({ minimum: 0 })) }),
        },
      },
      async (request) => services.history.threads(requesterOf(request), request.params.roomId, request.query),
    );
  };
}
