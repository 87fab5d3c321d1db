/** Login, token refresh, logout and whoami (`/_matrix/client/{v3,r0}`). */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { Services } from '../../services.js';
import type { ServerInfo } from '../../server-info.js';
import { authenticate, extractAccessToken, GUEST_ROUTE, requesterOf } from '../auth.js';
import { MatrixError } from '../../core/errors.js';

const PASSWORD_LOGIN = 'm.login.password';
const APPSERVICE_LOGIN = 'm.login.application_service';

/** Caps that keep a single request from filling memory (user ids are at most 255 bytes). */
export const MAX_USER_LENGTH = 255;
export { MAX_DEVICE_DISPLAY_NAME_LENGTH } from '../../users/session-service.js';
import { MAX_DEVICE_DISPLAY_NAME_LENGTH } from '../../users/session-service.js';

export const LoginBodySchema = Type.Object({
  type: Type.String(),
  identifier: Type.Optional(
    Type.Object({
      type: Type.String(),
      user: Type.Optional(Type.String({ maxLength: MAX_USER_LENGTH })),
    }),
  ),
  /** Deprecated in the spec, still sent by old scripts and bots. */
  user: Type.Optional(Type.String({ maxLength: MAX_USER_LENGTH })),
  password: Type.Optional(Type.String()),
  device_id: Type.Optional(Type.String()), // length checked by the session service (M_INVALID_PARAM, as Synapse)
  initial_device_display_name: Type.Optional(Type.String({ maxLength: MAX_DEVICE_DISPLAY_NAME_LENGTH })),
  refresh_token: Type.Optional(Type.Boolean()),
});

export const RefreshBodySchema = Type.Object({ refresh_token: Type.String() });

export function sessionRoutes(services: Services, server: ServerInfo): FastifyPluginAsyncTypebox {
  return async (app) => {
    const requireUser = authenticate(services.sessions);

    /** GET /login: the login flows we offer. */
    app.get('/login', async () => ({ flows: [{ type: PASSWORD_LOGIN }, { type: APPSERVICE_LOGIN }] }));

    /** POST /login: password login, by localpart or full user id; or an appservice's, with its as_token. */
    app.post('/login', { schema: { body: LoginBodySchema } }, async (request) => {
      const body = request.body;
      if (body.type === APPSERVICE_LOGIN) {
        const token = extractAccessToken(request);
        const requester = token === null ? null : await services.sessions.authenticate(token);
        const session = await services.appservices.login(requester, loginUser(body), {
          deviceId: body.device_id,
          initialDeviceDisplayName: body.initial_device_display_name,
          refreshable: body.refresh_token,
        });
        return { ...session, well_known: { 'm.homeserver': { base_url: server.publicBaseUrl } } };
      }
      if (body.type !== PASSWORD_LOGIN) throw new MatrixError('M_UNKNOWN', `Unknown login type ${body.type}`);
      if (body.password === undefined) throw new MatrixError('M_BAD_JSON', 'body.password is required');
      const session = await services.sessions.loginWithPassword({
        user: loginUser(body),
        password: body.password,
        address: request.ip,
        deviceId: body.device_id,
        initialDeviceDisplayName: body.initial_device_display_name,
        refreshable: body.refresh_token,
      });
      return {
        ...session,
        home_server: server.serverName,
        well_known: { 'm.homeserver': { base_url: server.publicBaseUrl } },
      };
    });

    /** POST /refresh: a new access token for a refresh token. */
    app.post('/refresh', { schema: { body: RefreshBodySchema } }, async (request) =>
      services.sessions.refresh(request.body.refresh_token),
    );

    /** GET /account/whoami */
    app.get('/account/whoami', { ...GUEST_ROUTE, onRequest: requireUser }, async (request) => {
      const requester = requesterOf(request);
      // An appservice acting through its as_token has no device of its own.
      if (requester.appserviceId !== undefined) return { user_id: requester.userId, is_guest: false };
      return { user_id: requester.userId, device_id: requester.deviceId, is_guest: requester.isGuest === true };
    });

    /** POST /logout: ends this device's session. */
    app.post('/logout', { onRequest: requireUser }, async (request) => {
      await services.sessions.logout(requesterOf(request));
      return {};
    });

    /** POST /logout/all: ends every session of this user. */
    app.post('/logout/all', { onRequest: requireUser }, async (request) => {
      await services.sessions.logoutAll(requesterOf(request).userId);
      return {};
    });
  };
}

/** The user named by a login: `identifier` (`m.id.user`) or the deprecated top-level `user`. */
function loginUser(body: { identifier?: { type: string; user?: string | undefined } | undefined; user?: string | undefined }): string {
  if (body.identifier) {
    if (body.identifier.type !== 'm.id.user') {
      throw new MatrixError('M_UNKNOWN', 'Unknown login identifier type');
    }
    if (body.identifier.user === undefined) throw new MatrixError('M_BAD_JSON', 'body.identifier.user is required');
    return body.identifier.user;
  }
  if (body.user !== undefined) return body.user;
  throw new MatrixError('M_INVALID_PARAM', 'Invalid login submission');
}
