/**
 * A user's own devices and account: `/devices`, `/delete_devices`, `/account/password` and
 * `/account/deactivate`. What cannot be undone asks for the password again (user-interactive auth,
 * `users/password-auth.ts`), in a session fixed to the one request it began with.
 */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyReply } from 'fastify';
import type { Services } from '../../services.js';
import { MatrixError } from '../../core/errors.js';
import { authenticate, GUEST_ROUTE, requesterOf } from '../auth.js';
import { optionalBody } from '../validation.js';
import { AuthSchema, withPassword as withPasswordOf } from '../uia.js';
import type { UiaAuth } from '../../users/password-auth.js';
import { MAX_DEVICE_DISPLAY_NAME_LENGTH } from '../../users/session-service.js';
import { BOT_USER_TYPE } from '../../users/account-service.js';
import { MAX_DEVICES_PER_DELETE } from '../../users/device-service.js';

const Auth = AuthSchema;
const DeviceParams = Type.Object({ deviceId: Type.String({ minLength: 1, maxLength: 512 }) });

export function deviceRoutes(services: Services): FastifyPluginAsyncTypebox {
  return async (app) => {
    const requireUser = authenticate(services.sessions);

    const withPassword = (reply: FastifyReply, userId: string, operation: string, auth: UiaAuth | undefined, work: () => Promise<unknown>) =>
      withPasswordOf(services.passwordAuth, reply, userId, operation, auth, work);

    /** GET /devices */
    app.get('/devices', { ...GUEST_ROUTE, onRequest: requireUser }, async (request) => ({ devices: await services.devices.list(requesterOf(request).userId) }));

    /**
     * GET /admin/whois/{userId}: a user's devices with where and with what each was last seen.
     * For server admins, and for users asking about themselves (as Synapse allows).
     */
    app.get('/admin/whois/:userId', { onRequest: requireUser, schema: { params: Type.Object({ userId: Type.String({ maxLength: 255 }) }) } }, async (request) => {
      const requester = requesterOf(request);
      if (request.params.userId !== requester.userId && !(await services.accounts.isAdmin(requester.userId))) {
        throw new MatrixError('M_FORBIDDEN', 'You are not a server admin');
      }
      return services.devices.whois(request.params.userId);
    });

    /** GET /devices/{deviceId} */
    app.get('/devices/:deviceId', { ...GUEST_ROUTE, onRequest: requireUser, schema: { params: DeviceParams } }, async (request) =>
      services.devices.get(requesterOf(request).userId, request.params.deviceId),
    );

    /** PUT /devices/{deviceId}: its display name. */
    app.put(
      '/devices/:deviceId',
      {
        ...GUEST_ROUTE,
        onRequest: requireUser,
        schema: { params: DeviceParams, body: optionalBody(Type.Object({ display_name: Type.Optional(Type.Union([Type.String({ maxLength: MAX_DEVICE_DISPLAY_NAME_LENGTH * 4 }), Type.Null()])) })) },
      },
      async (request) => {
        const userId = requesterOf(request).userId;
        const displayName = request.body?.display_name;
        // No display_name: nothing to change, but the device must exist (as Synapse answers).
        if (displayName === undefined) await services.devices.get(userId, request.params.deviceId);
        else await services.devices.rename(userId, request.params.deviceId, displayName);
        return {};
      },
    );

    /** DELETE /devices/{deviceId}: logs the device out (user-interactive auth). */
    app.delete(
      '/devices/:deviceId',
      { onRequest: requireUser, schema: { params: DeviceParams, body: optionalBody(Type.Object({ auth: Auth })) } },
      async (request, reply) => {
        const userId = requesterOf(request).userId;
        const deviceId = request.params.deviceId;
        return withPassword(reply, userId, `DELETE /devices/${deviceId}`, request.body?.auth, async () => {
          await services.devices.delete(userId, [deviceId]);
          return {};
        });
      },
    );

    /** POST /delete_devices (user-interactive auth). */
    app.post(
      '/delete_devices',
      {
        onRequest: requireUser,
        schema: { body: Type.Object({ devices: Type.Array(Type.String({ maxLength: 512 }), { maxItems: MAX_DEVICES_PER_DELETE }), auth: Auth }) },
      },
      async (request, reply) => {
        const userId = requesterOf(request).userId;
        const devices = [...new Set(request.body.devices)];
        return withPassword(reply, userId, `POST /delete_devices ${JSON.stringify([...devices].sort())}`, request.body.auth, async () => {
          await services.devices.delete(userId, devices);
          return {};
        });
      },
    );

    /** PUT /sendToDevice/{eventType}/{txnId}: once per transaction id of this device. */
    app.put(
      '/sendToDevice/:eventType/:txnId',
      {
        ...GUEST_ROUTE,
        onRequest: requireUser,
        schema: {
          params: Type.Object({ eventType: Type.String({ minLength: 1, maxLength: 255 }), txnId: Type.String({ minLength: 1, maxLength: 255 }) }),
          body: Type.Object({ messages: Type.Record(Type.String({ maxLength: 255 }), Type.Record(Type.String({ maxLength: 512 }), Type.Object({}, { additionalProperties: true }))) }),
        },
      },
      async (request) => {
        const requester = requesterOf(request);
        await services.toDevice.send(requester, request.params.eventType, request.params.txnId, request.body.messages);
        return {};
      },
    );

    /** POST /account/password (user-interactive auth; not for bots, whose secret the operator rotates). */
    app.post(
      '/account/password',
      {
        onRequest: requireUser,
        schema: { body: Type.Object({ new_password: Type.String({ minLength: 1 }), logout_devices: Type.Optional(Type.Boolean()), auth: Auth }) },
      },
      async (request, reply) => {
        const requester = requesterOf(request);
        await services.accounts.assertMayChangeOwnPassword(requester.userId);
        return withPassword(reply, requester.userId, 'POST /account/password', request.body.auth, async () => {
          await services.accounts.changeOwnPassword(requester.userId, requester.deviceId, request.body.new_password, request.body.logout_devices ?? true);
          return {};
        });
      },
    );

    /** POST /account/deactivate (user-interactive auth): ends every session and leaves every room. */
    app.post(
      '/account/deactivate',
      {
        onRequest: requireUser,
        schema: { body: optionalBody(Type.Object({ auth: Auth, erase: Type.Optional(Type.Boolean()), id_server: Type.Optional(Type.String()) })) },
      },
      async (request, reply) => {
        const userId = requesterOf(request).userId;
        return withPassword(reply, userId, 'POST /account/deactivate', request.body?.auth, async () => {
          // A bot that deactivates itself (its secret did it) is in the bot audit log too.
          const user = await services.accounts.getUser(userId);
          const also = user?.user_type === BOT_USER_TYPE ? services.bots.audited(userId, 'deactivate', userId) : undefined;
          await services.accounts.deactivate(userId, { erase: request.body?.erase === true, also });
          await services.rooms.leaveAllRooms(userId);
          // No identity server is ever bound here (third-party identifiers are out of scope).
          return { id_server_unbind_result: 'no-support' };
        });
      },
    );
  };
}
