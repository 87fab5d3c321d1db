/**
 * Endpoints SDKs call at start or in passing: push rules (the spec's defaults; matrix-js-sdk will
 * not start without them), presence, and TURN (none configured). Anything else unknown gets 404 M_UNRECOGNIZED.
 */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { defaultPushRules } from '../../push/default-rules.js';
import type { Services } from '../../services.js';
import { authenticate, requesterOf } from '../auth.js';
import { MatrixError } from '../../core/errors.js';

export function clientProbeRoutes(services: Services): FastifyPluginAsyncTypebox {
  return async (app) => {
    app.addHook('onRequest', authenticate(services.sessions));

    /** GET /pushrules/ (js-sdk asks with the slash) and GET /pushrules/global/ */
    for (const path of ['/pushrules/', '/pushrules']) {
      app.get(path, async (request) => defaultPushRules(requesterOf(request).userId));
    }
    for (const path of ['/pushrules/global/', '/pushrules/global']) {
      app.get(path, async (request) => defaultPushRules(requesterOf(request).userId).global);
    }

    /** GET /presence/{userId}/status: oneself, or someone sharing a room. */
    app.get('/presence/:userId/status', { schema: { params: Type.Object({ userId: Type.String({ maxLength: 255 }) }) } }, async (request) => {
      return services.presence.get(requesterOf(request).userId, request.params.userId);
    });
    /** PUT /presence/{userId}/status: one's own. */
    app.put(
      '/presence/:userId/status',
      {
        schema: {
          params: Type.Object({ userId: Type.String({ maxLength: 255 }) }),
          body: Type.Object({ presence: Type.String({ maxLength: 32 }), status_msg: Type.Optional(Type.Union([Type.String(), Type.Null()])) }),
        },
      },
      async (request) => {
        if (request.params.userId !== requesterOf(request).userId) throw new MatrixError('M_FORBIDDEN', 'Cannot set presence of other users');
        await services.presence.set(request.params.userId, request.body.presence, request.body.status_msg ?? undefined);
        return {};
      },
    );

    /** GET /voip/turnServer: no TURN server is configured, which Synapse answers with {}. */
    app.get('/voip/turnServer', async () => ({}));
  };
}
