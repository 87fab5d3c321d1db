/**
 * Endpoints SDKs call at start or in passing: push rules (the spec's defaults; matrix-js-sdk will
 * not start without them), presence, and TURN (none configured). Anything else unknown gets 404 M_UNRECOGNIZED.
 */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { Services } from '../../services.js';
import { authenticate, requesterOf } from '../auth.js';
import { MatrixError } from '../../core/errors.js';

export function clientProbeRoutes(services: Services): FastifyPluginAsyncTypebox {
  return async (app) => {
    app.addHook('onRequest', authenticate(services.sessions));

    /** GET /pushrules/ (js-sdk asks with the slash) and GET /pushrules/global/ */
    for (const path of ['/pushrules/', '/pushrules']) {
      app.get(path, async (request) => services.pushRules.ruleset(requesterOf(request).userId));
    }
    for (const path of ['/pushrules/global/', '/pushrules/global']) {
      app.get(path, async (request) => (await services.pushRules.ruleset(requesterOf(request).userId)).global);
    }
    const RuleParams = Type.Object({ kind: Type.String({ maxLength: 32 }), ruleId: Type.String({ minLength: 1, maxLength: 512 }) });
    /** GET/PUT/DELETE /pushrules/global/{kind}/{ruleId} */
    app.get('/pushrules/global/:kind/:ruleId', { schema: { params: RuleParams } }, async (request) =>
      services.pushRules.rule(requesterOf(request).userId, request.params.kind, request.params.ruleId),
    );
    app.put(
      '/pushrules/global/:kind/:ruleId',
      {
        schema: {
          params: RuleParams,
          querystring: Type.Object({ before: Type.Optional(Type.String({ maxLength: 512 })), after: Type.Optional(Type.String({ maxLength: 512 })) }),
          body: Type.Object({ actions: Type.Optional(Type.Array(Type.Unknown())), conditions: Type.Optional(Type.Array(Type.Unknown())), pattern: Type.Optional(Type.String({ maxLength: 1024 })) }),
        },
      },
      async (request) => {
        await services.pushRules.putRule(requesterOf(request).userId, request.params.kind, request.params.ruleId, request.body, request.query);
        return {};
      },
    );
    app.delete('/pushrules/global/:kind/:ruleId', { schema: { params: RuleParams } }, async (request) => {
      await services.pushRules.deleteRule(requesterOf(request).userId, request.params.kind, request.params.ruleId);
      return {};
    });
    /** GET/PUT /pushrules/global/{kind}/{ruleId}/enabled and /actions */
    for (const attribute of ['enabled', 'actions'] as const) {
      app.get(`/pushrules/global/:kind/:ruleId/${attribute}`, { schema: { params: RuleParams } }, async (request) => {
        const rule = await services.pushRules.rule(requesterOf(request).userId, request.params.kind, request.params.ruleId);
        return { [attribute]: rule[attribute] };
      });
      app.put(`/pushrules/global/:kind/:ruleId/${attribute}`, { schema: { params: RuleParams, body: Type.Object({ [attribute]: Type.Unknown() }) } }, async (request) => {
        await services.pushRules.setAttribute(requesterOf(request).userId, request.params.kind, request.params.ruleId, attribute, (request.body as Record<string, unknown>)[attribute]);
        return {};
      });
    }

    /** GET /pushers, POST /pushers/set: stored and listed; HTTP pushers are delivered to (push/pusher-sender.ts). */
    app.get('/pushers', async (request) => ({ pushers: await services.pushRules.pushers(requesterOf(request).userId) }));
    app.post('/pushers/set', { schema: { body: Type.Object({}, { additionalProperties: true, maxProperties: 20 }) } }, async (request) => {
      const requester = requesterOf(request);
      // The device that set it: logging it out removes the pusher (an appservice's as_token has none).
      await services.pushRules.setPusher(requester.userId, request.body as Record<string, unknown> as never, requester.appserviceId === undefined ? requester.deviceId : null);
      return {};
    });

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
