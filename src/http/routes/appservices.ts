/** `POST /_matrix/client/v1/appservice/{appserviceId}/ping`: an appservice checks that this server reaches it. */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { Services } from '../../services.js';
import { authenticate, requesterOf } from '../auth.js';

export function appserviceRoutes(services: Services): FastifyPluginAsyncTypebox {
  return async (app) => {
    app.post(
      '/appservice/:appserviceId/ping',
      {
        onRequest: authenticate(services.sessions),
        schema: {
          params: Type.Object({ appserviceId: Type.String() }),
          body: Type.Object({ transaction_id: Type.Optional(Type.String({ maxLength: 255 })) }),
        },
      },
      async (request) => services.appservices.ping(requesterOf(request), request.params.appserviceId, request.body.transaction_id),
    );
  };
}
