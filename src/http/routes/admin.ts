/**
 * The operator's API: Synapse's admin endpoints that scripts use (shared-secret registration,
 * users, deactivation, rate-limit overrides), plus ours for bot credentials. Everything except
 * shared-secret registration needs an admin's access token.
 */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyRequest } from 'fastify';
import type { Services } from '../../services.js';
import type { UserRow } from '../../users/account-service.js';
import { localpartOf } from '../../users/user-ids.js';
import { VERSION } from '../../version.js';
import { authenticate, requesterOf } from '../auth.js';
import { MatrixError } from '../../core/errors.js';
import { StringEnum } from '../../schemas.js';
import { optionalBody } from '../validation.js';

const UserIdParams = Type.Object({ userId: Type.String() });
const Nullable = <T extends ReturnType<typeof Type.String>>(schema: T) => Type.Union([schema, Type.Null()]);

export const PutUserBodySchema = Type.Object({
  password: Type.Optional(Type.String({ maxLength: 512 })),
  logout_devices: Type.Optional(Type.Boolean()),
  displayname: Type.Optional(Nullable(Type.String({ maxLength: 256 }))),
  avatar_url: Type.Optional(Nullable(Type.String())),
  admin: Type.Optional(Type.Boolean()),
  deactivated: Type.Optional(Type.Boolean()),
  user_type: Type.Optional(Nullable(Type.String())),
});

const RatelimitBodySchema = Type.Object({
  messages_per_second: Type.Integer({ minimum: 0, default: 0 }),
  burst_count: Type.Integer({ minimum: 0, default: 0 }),
});

const ListUsersQuerySchema = Type.Object({
  from: Type.Integer({ minimum: 0, maximum: 2 ** 31, default: 0 }),
  limit: Type.Integer({ minimum: 1, maximum: 1000, default: 100 }),
  name: Type.Optional(Type.String()),
  user_id: Type.Optional(Type.String()),
  guests: Type.Optional(Type.Boolean()),
  deactivated: Type.Boolean({ default: false }),
  admins: Type.Optional(Type.Boolean()),
  order_by: StringEnum(['name', 'admin', 'deactivated', 'user_type', 'displayname', 'creation_ts'] as const, {
    default: 'name',
  }),
  dir: StringEnum(['f', 'b'] as const, { default: 'f' }),
});

export function adminRoutes(services: Services): FastifyPluginAsyncTypebox {
  return async (app) => {
    const requireUser = authenticate(services.sessions);
    const requireAdmin = async (request: FastifyRequest) => {
      await requireUser(request);
      if (!(await services.accounts.isAdmin(requesterOf(request).userId))) {
        throw new MatrixError('M_FORBIDDEN', 'You are not a server admin');
      }
    };
    const localUser = (userId: string): string => {
      if (!localpartOf(userId, services.config.server_name)) {
        throw new MatrixError('M_UNKNOWN', 'Can only look up local users');
      }
      return userId;
    };
    const existingUser = async (userId: string): Promise<UserRow> => {
      const user = await services.accounts.getUser(localUser(userId));
      if (!user) throw new MatrixError('M_NOT_FOUND', 'User not found');
      return user;
    };

    /** GET /_synapse/admin/v1/server_version */
    app.get('/_synapse/admin/v1/server_version', async () => ({ server_version: `bot-homeserver ${VERSION}` }));

    /** GET /_synapse/admin/v1/register: a nonce for shared-secret registration. */
    app.get('/_synapse/admin/v1/register', async () => ({ nonce: services.registration.issueNonce() }));

    /** POST /_synapse/admin/v1/register: register with an HMAC of the shared secret. */
    app.post('/_synapse/admin/v1/register', { schema: { body: Type.Object({}) } }, async (request) =>
      services.registration.registerWithSharedSecret(request.body),
    );

    /** GET /_synapse/admin/v2/users: a page of accounts. */
    app.get('/_synapse/admin/v2/users', { onRequest: requireAdmin, schema: { querystring: ListUsersQuerySchema } }, async (request) => {
      const query = request.query;
      const { users, total } = await services.accounts.listUsers({
        from: query.from,
        limit: query.limit,
        name: query.name,
        userId: query.name ? undefined : query.user_id,
        includeDeactivated: query.deactivated,
        admins: query.admins,
        orderBy: query.order_by,
        direction: query.dir === 'b' ? 'desc' : 'asc',
      });
      const page: Record<string, unknown> = { users: users.map(listedUser), total };
      if (query.from + query.limit < total) page.next_token = String(query.from + users.length);
      return page;
    });

    /** GET /_synapse/admin/v2/users/<user_id> */
    app.get('/_synapse/admin/v2/users/:userId', { onRequest: requireAdmin, schema: { params: UserIdParams } }, async (request) =>
      userDetails(await existingUser(request.params.userId)),
    );

    /** PUT /_synapse/admin/v2/users/<user_id>: create (201) or modify (200) an account. */
    app.put(
      '/_synapse/admin/v2/users/:userId',
      { onRequest: requireAdmin, schema: { params: UserIdParams, body: PutUserBodySchema } },
      async (request, reply) => {
        const userId = request.params.userId;
        const localpart = localpartOf(userId, services.config.server_name);
        if (!localpart) throw new MatrixError('M_UNKNOWN', 'This endpoint can only be used with local users');
        const body = request.body;
        const existing = await services.accounts.getUser(userId);
        if (existing) {
          if (body.admin === false && userId === requesterOf(request).userId) {
            throw new MatrixError('M_UNKNOWN', 'You may not demote yourself.');
          }
          await services.accounts.updateAccount(userId, {
            password: body.password,
            logoutDevices: body.logout_devices,
            displayname: body.displayname,
            avatarUrl: body.avatar_url,
            admin: body.admin,
            deactivated: body.deactivated,
            userType: body.user_type,
          });
          // Rooms see what the admin changed: a deactivated user leaves them, a new name shows there.
          if (body.deactivated === true && existing.deactivated === 0) await services.rooms.leaveAllRooms(userId);
          else if (body.displayname !== undefined || body.avatar_url !== undefined) await services.rooms.refreshMemberEvents(userId);
          return reply.code(200).send(userDetails(await existingUser(userId)));
        }
        await services.accounts.createUser({
          localpart,
          password: body.password,
          admin: body.admin,
          userType: body.user_type,
          displayname: body.displayname,
          avatarUrl: body.avatar_url,
        });
        if (body.deactivated) await services.accounts.deactivate(userId);
        return reply.code(201).send(userDetails(await existingUser(userId)));
      },
    );

    /** POST /_synapse/admin/v1/deactivate/<user_id> */
    app.post(
      '/_synapse/admin/v1/deactivate/:userId',
      {
        onRequest: requireAdmin,
        schema: { params: UserIdParams, body: optionalBody(Type.Object({ erase: Type.Optional(Type.Boolean()) })) },
      },
      async (request) => {
        const user = await existingUser(request.params.userId);
        await services.accounts.deactivate(user.user_id, { erase: request.body?.erase === true });
        await services.rooms.leaveAllRooms(user.user_id);
        return { id_server_unbind_result: 'success' };
      },
    );

    /** GET /_synapse/admin/v1/users/<user_id>/override_ratelimit */
    app.get('/_synapse/admin/v1/users/:userId/override_ratelimit', { onRequest: requireAdmin, schema: { params: UserIdParams } }, async (request) => {
      const user = await existingUser(request.params.userId);
      return (await services.limiters.messageOverride(user.user_id)) ?? {};
    });

    /** POST /_synapse/admin/v1/users/<user_id>/override_ratelimit: 0 messages per second exempts the user. */
    app.post(
      '/_synapse/admin/v1/users/:userId/override_ratelimit',
      { onRequest: requireAdmin, schema: { params: UserIdParams, body: optionalBody(RatelimitBodySchema) } },
      async (request) => {
        const user = await existingUser(request.params.userId);
        const override = { messages_per_second: request.body?.messages_per_second ?? 0, burst_count: request.body?.burst_count ?? 0 };
        await services.limiters.setMessageOverride(user.user_id, override);
        return override;
      },
    );

    /** DELETE /_synapse/admin/v1/users/<user_id>/override_ratelimit */
    app.delete('/_synapse/admin/v1/users/:userId/override_ratelimit', { onRequest: requireAdmin, schema: { params: UserIdParams } }, async (request) => {
      const user = await existingUser(request.params.userId);
      await services.limiters.setMessageOverride(user.user_id, null);
      return {};
    });

    /**
     * POST /_bot_homeserver/admin/v1/bots {"name": "hello"}: creates the bot (201) or rotates its
     * secret (200), answering `{user_id, password}` like `bot-homeserver create-bot --json`.
     */
    app.post(
      '/_bot_homeserver/admin/v1/bots',
      { onRequest: requireAdmin, schema: { body: Type.Object({ name: Type.String({ minLength: 1 }) }) } },
      async (request, reply) => {
        const credentials = await services.accounts.createOrRotateBot(request.body.name);
        return reply.code(credentials.created ? 201 : 200).send(credentials);
      },
    );

    /** GET /_synapse/admin/v1/federation/destinations: servers we send to, with their backoff and queue. */
    app.get('/_synapse/admin/v1/federation/destinations', { onRequest: requireAdmin }, async () => {
      const destinations = await services.federationSender.describeAll();
      return { destinations, total: destinations.length };
    });
    app.get('/_synapse/admin/v1/federation/destinations/:destination', { onRequest: requireAdmin, schema: { params: Type.Object({ destination: Type.String({ maxLength: 255 }) }) } }, async (request) =>
      services.federationSender.describe(request.params.destination),
    );
    /** POST .../reset_connection: end a destination's backoff and send its queue now. */
    app.post(
      '/_synapse/admin/v1/federation/destinations/:destination/reset_connection',
      { onRequest: requireAdmin, schema: { params: Type.Object({ destination: Type.String({ maxLength: 255 }) }) } },
      async (request) => {
        await services.federationSender.resetConnection(request.params.destination);
        return {};
      },
    );
  };
}

/** A user as `GET /_synapse/admin/v2/users/<id>` shows it (creation time in seconds, as Synapse). */
function userDetails(user: UserRow) {
  return {
    name: user.user_id,
    displayname: user.displayname,
    avatar_url: user.avatar_url,
    admin: user.admin === 1,
    deactivated: user.deactivated === 1,
    locked: false,
    suspended: false,
    shadow_banned: false,
    erased: false,
    is_guest: false,
    user_type: user.user_type,
    creation_ts: Math.floor(user.created_ts / 1000),
    appservice_id: null,
    consent_server_notice_sent: null,
    consent_version: null,
    consent_ts: null,
    threepids: [],
    external_ids: [],
    last_seen_ts: null,
  };
}

/** A user as the list shows it (creation time in milliseconds, as Synapse). */
function listedUser(user: UserRow) {
  return {
    name: user.user_id,
    user_type: user.user_type,
    is_guest: false,
    admin: user.admin === 1,
    deactivated: user.deactivated === 1,
    shadow_banned: false,
    displayname: user.displayname,
    avatar_url: user.avatar_url,
    creation_ts: user.created_ts,
    approved: true,
    erased: false,
    last_seen_ts: null,
    locked: false,
  };
}
