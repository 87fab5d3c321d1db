/**
 * The operator's API: Synapse's admin endpoints that scripts use (shared-secret registration,
 * users, deactivation, rate-limit overrides), plus ours for bot credentials. Everything except
 * shared-secret registration needs an admin's access token.
 */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyRequest } from 'fastify';
import type { Services } from '../../services.js';
import { BOT_USER_TYPE, type UserRow } from '../../users/account-service.js';
import { localpartOf } from '../../users/user-ids.js';
import { VERSION } from '../../version.js';
import { authenticate, requesterOf } from '../auth.js';
import { MatrixError } from '../../core/errors.js';
import { StringEnum } from '../../schemas.js';
import { optionalBody } from '../validation.js';
import { assertPersonId } from '../../portal/bot-ownership.js';

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

const ListBotsQuerySchema = Type.Object({
  from: Type.Integer({ minimum: 0, maximum: 2 ** 31, default: 0 }),
  limit: Type.Integer({ minimum: 1, maximum: 1000, default: 100 }),
  deactivated: Type.Boolean({ default: false }),
});

const AuditQuerySchema = Type.Object({
  limit: Type.Integer({ minimum: 1, maximum: 1000, default: 100 }),
  from: Type.Optional(Type.String({ pattern: '^[0-9]{1,15}$' })),
  target: Type.Optional(Type.String({ maxLength: 255 })),
  actor: Type.Optional(Type.String({ maxLength: 255 })),
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
      services.registration.registerWithSharedSecret(request.body, { auditBot: (userId) => services.bots.audited(SHARED_SECRET_ACTOR, 'create', userId) }),
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
        includeGuests: query.guests !== false,
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
          // A bot's deactivation or new secret goes to the bot audit log, as from any other way.
          const botChange =
            existing.user_type !== BOT_USER_TYPE
              ? undefined
              : body.deactivated === true && existing.deactivated === 0
                ? 'deactivate'
                : body.deactivated === false && existing.deactivated === 1
                  ? 'reactivate'
                  : body.password
                    ? 'rotate'
                    : undefined;
          await services.accounts.updateAccount(userId, {
            password: body.password,
            logoutDevices: body.logout_devices,
            displayname: body.displayname,
            avatarUrl: body.avatar_url,
            admin: body.admin,
            deactivated: body.deactivated,
            userType: body.user_type,
            also: botChange ? services.bots.audited(requesterOf(request).userId, botChange, userId) : undefined,
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
          also: body.user_type === BOT_USER_TYPE ? services.bots.audited(requesterOf(request).userId, 'create', userId) : undefined,
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
        const audited = user.user_type === BOT_USER_TYPE && user.deactivated === 0 ? services.bots.audited(requesterOf(request).userId, 'deactivate', user.user_id) : undefined;
        await services.accounts.deactivate(user.user_id, { erase: request.body?.erase === true, also: audited });
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
      { onRequest: requireAdmin, schema: { body: Type.Object({ name: Type.String({ minLength: 1 }), owner: Type.Optional(Type.String({ minLength: 1, maxLength: 255 })) }) } },
      async (request, reply) => {
        const owner = request.body.owner;
        if (owner !== undefined) assertPersonId(owner);
        const credentials = await services.bots.createOrRotate(request.body.name, requesterOf(request).userId, owner);
        return reply.code(credentials.created ? 201 : 200).send(credentials);
      },
    );

    /** GET /_bot_homeserver/admin/v1/bots: bot accounts with their owners, a page at a time. */
    app.get('/_bot_homeserver/admin/v1/bots', { onRequest: requireAdmin, schema: { querystring: ListBotsQuerySchema } }, async (request) => {
      const { from, limit, deactivated } = request.query;
      const { users, total } = await services.accounts.listUsers({ from, limit, includeDeactivated: deactivated, userType: BOT_USER_TYPE, orderBy: 'name', direction: 'asc' });
      const owners = await services.bots.ownersOf(users.map((user) => user.user_id));
      const page: Record<string, unknown> = {
        bots: users.map((user) => ({ user_id: user.user_id, displayname: user.displayname, owner: owners.get(user.user_id) ?? null, deactivated: user.deactivated === 1, creation_ts: user.created_ts })),
        total,
      };
      if (from + limit < total) page.next_token = String(from + users.length);
      return page;
    });

    /** PUT /_bot_homeserver/admin/v1/bots/<user_id>/owner {"owner": "@bob:example.org"}: moves a bot to another owner. */
    app.put(
      '/_bot_homeserver/admin/v1/bots/:userId/owner',
      { onRequest: requireAdmin, schema: { params: UserIdParams, body: Type.Object({ owner: Type.String({ minLength: 1, maxLength: 255 }) }) } },
      async (request) => services.bots.move(localUser(request.params.userId), request.body.owner, requesterOf(request).userId),
    );

    /** GET /_bot_homeserver/admin/v1/owners/grants: who an operator gave the right to create bots. */
    app.get('/_bot_homeserver/admin/v1/owners/grants', { onRequest: requireAdmin }, async () => {
      const grants = await services.bots.listGrants();
      return { grants: grants.map((grant) => ({ user_id: grant.user_id, granted_by: grant.granted_by, granted_ts: grant.granted_ts, note: grant.note })) };
    });

    /** PUT /_bot_homeserver/admin/v1/owners/grants/<user_id> {"note": "ticket 1234"}: gives the right to create bots. */
    app.put(
      '/_bot_homeserver/admin/v1/owners/grants/:userId',
      { onRequest: requireAdmin, schema: { params: UserIdParams, body: optionalBody(Type.Object({ note: Type.Optional(Type.String({ maxLength: 500 })) })) } },
      async (request) => {
        const grant = await services.bots.grant(request.params.userId, requesterOf(request).userId, request.body?.note ?? null);
        return { user_id: grant.user_id, granted_by: grant.granted_by, granted_ts: grant.granted_ts, note: grant.note };
      },
    );

    /** DELETE /_bot_homeserver/admin/v1/owners/grants/<user_id>: takes the right back (their bots stay theirs). */
    app.delete('/_bot_homeserver/admin/v1/owners/grants/:userId', { onRequest: requireAdmin, schema: { params: UserIdParams } }, async (request) => {
      if (!(await services.bots.revoke(request.params.userId, requesterOf(request).userId))) throw new MatrixError('M_NOT_FOUND', 'This person has no grant');
      return {};
    });

    /** GET /_bot_homeserver/admin/v1/owners/identities/<user_id>: the provider's account a person is bound to. */
    app.get('/_bot_homeserver/admin/v1/owners/identities/:userId', { onRequest: requireAdmin, schema: { params: UserIdParams } }, async (request) => {
      const identity = await services.bots.identityOf(request.params.userId);
      if (!identity) throw new MatrixError('M_NOT_FOUND', 'This person has not signed in to the portal');
      return { user_id: request.params.userId, idp_id: identity.idp, subject: identity.subject, bound_ts: identity.since };
    });

    /**
     * DELETE /_bot_homeserver/admin/v1/owners/identities/<user_id>: releases the binding (the next
     * account to sign in as this person is bound instead) and ends their portal sessions.
     */
    app.delete('/_bot_homeserver/admin/v1/owners/identities/:userId', { onRequest: requireAdmin, schema: { params: UserIdParams } }, async (request) => {
      if (!(await services.bots.unbindIdentity(request.params.userId, requesterOf(request).userId))) throw new MatrixError('M_NOT_FOUND', 'This person has not signed in to the portal');
      return {};
    });

    /**
     * DELETE /_bot_homeserver/admin/v1/owners/sessions/<user_id>: signs a person out of the portal
     * everywhere, at once (logged). Answers how many sessions ended.
     */
    app.delete('/_bot_homeserver/admin/v1/owners/sessions/:userId', { onRequest: requireAdmin, schema: { params: UserIdParams } }, async (request) => ({
      ended: await services.bots.endSessionsOf(request.params.userId, requesterOf(request).userId),
    }));

    /** GET /_bot_homeserver/admin/v1/audit: the bot audit log, newest first (`next_token` pages on). */
    app.get('/_bot_homeserver/admin/v1/audit', { onRequest: requireAdmin, schema: { querystring: AuditQuerySchema } }, async (request) => {
      const { limit, from, target, actor } = request.query;
      const entries = await services.bots.auditLog({ limit, before: from === undefined ? undefined : Number(from), target, actor });
      const page: Record<string, unknown> = { entries };
      const last = entries.at(-1);
      if (entries.length === limit && last) page.next_token = String(last.id);
      return page;
    });

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

/** Who made a bot through shared-secret registration, in the bot audit log (no account asked). */
const SHARED_SECRET_ACTOR = 'shared-secret-registration';

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
    is_guest: user.is_guest === 1,
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
    is_guest: user.is_guest === 1,
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
