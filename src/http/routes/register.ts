/** Open registration (off unless `enable_registration: true`), as Synapse runs it. */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { Services } from '../../services.js';
import { MAX_DEVICE_DISPLAY_NAME_LENGTH, MAX_USER_LENGTH } from './session.js';

export const RegisterBodySchema = Type.Object({
  username: Type.Optional(Type.String({ maxLength: MAX_USER_LENGTH })),
  password: Type.Optional(Type.String()),
  auth: Type.Optional(
    Type.Object({
      type: Type.Optional(Type.String()),
      session: Type.Optional(Type.String()),
    }),
  ),
  device_id: Type.Optional(Type.String()), // length checked by the session service (M_INVALID_PARAM, as Synapse)
  initial_device_display_name: Type.Optional(Type.String({ maxLength: MAX_DEVICE_DISPLAY_NAME_LENGTH })),
  inhibit_login: Type.Optional(Type.Boolean()),
  refresh_token: Type.Optional(Type.Boolean()),
});

export function registerRoutes(services: Services): FastifyPluginAsyncTypebox {
  return async (app) => {
    /** POST /register: user-interactive auth with `m.login.dummy`, then the account. */
    app.post(
      '/register',
      {
        schema: {
          body: RegisterBodySchema,
          querystring: Type.Object({ kind: Type.String({ default: 'user' }) }),
        },
      },
      async (request, reply) => {
        const body = request.body;
        const outcome = await services.registration.registerOpen({
          kind: request.query.kind,
          username: body.username,
          password: body.password,
          auth: body.auth,
          deviceId: body.device_id,
          initialDeviceDisplayName: body.initial_device_display_name,
          inhibitLogin: body.inhibit_login,
          refreshable: body.refresh_token,
          address: request.ip,
        });
        return reply.code(outcome.status).send(outcome.body);
      },
    );

    /** GET /register/available?username= */
    app.get(
      '/register/available',
      { schema: { querystring: Type.Object({ username: Type.String() }) } },
      async (request) => {
        await services.registration.checkAvailable(request.query.username);
        return { available: true };
      },
    );
  };
}
