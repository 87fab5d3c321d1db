/**
 * Endpoints SDKs call at start or in passing that a bot server answers simply: push rules (the
 * spec's defaults; matrix-js-sdk will not start without them), presence (disabled, as on a Synapse
 * with presence off) and TURN (none configured). Anything else unknown gets 404 M_UNRECOGNIZED.
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

    /** Presence is not tracked: everyone is offline, and setting it is accepted and ignored. */
    app.get('/presence/:userId/status', { schema: { params: Type.Object({ userId: Type.String() }) } }, async (request) => {
      const user = await services.accounts.getUser(request.params.userId);
      if (!user) throw new MatrixError('M_NOT_FOUND', 'Unknown user');
      return { presence: 'offline' };
    });
    app.put(
      '/presence/:userId/status',
      { schema: { params: Type.Object({ userId: Type.String() }), body: Type.Object({ presence: Type.String(), status_msg: Type.Optional(Type.String()) }) } },
      async (request) => {
        if (request.params.userId !== requesterOf(request).userId) throw new MatrixError('M_FORBIDDEN', 'Cannot set presence of other users');
        return {};
      },
    );

    /** GET /voip/turnServer: no TURN server is configured, which Synapse answers with {}. */
    app.get('/voip/turnServer', async () => ({}));
  };
}
