/**
 * Open registration (off unless `enable_registration: true`), as Synapse runs it; and the
 * registrations application services make of their users.
 */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { Services } from '../../services.js';
import { MAX_DEVICE_DISPLAY_NAME_LENGTH, MAX_USER_LENGTH } from './session.js';
import { extractAccessToken } from '../auth.js';

const APPSERVICE_LOGIN = 'm.login.application_service';

export const RegisterBodySchema = Type.Object({
  /** `m.login.application_service`: an appservice registers a user of its namespaces. */
  type: Type.Optional(Type.String()),
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
  /** Upgrading a guest account to a full one (same user id). */
  guest_access_token: Type.Optional(Type.String({ maxLength: 1024 })),
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
        if (body.type === APPSERVICE_LOGIN) {
          // Open to appservices whether or not open registration is on, as in Synapse.
          const token = extractAccessToken(request);
          const requester = token === null ? null : await services.sessions.authenticate(token);
          return services.appservices.register(requester, {
            username: body.username,
            inhibitLogin: body.inhibit_login === true,
            deviceId: body.device_id,
            initialDeviceDisplayName: body.initial_device_display_name,
            refreshable: body.refresh_token === true,
          });
        }
        const outcome = await services.registration.registerOpen({
          kind: request.query.kind,
          username: body.username,
          password: body.password,
          auth: body.auth,
          deviceId: body.device_id,
          initialDeviceDisplayName: body.initial_device_display_name,
          inhibitLogin: body.inhibit_login,
          refreshable: body.refresh_token,
          guestAccessToken: body.guest_access_token,
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
