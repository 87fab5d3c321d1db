/** Rooms and membership: create, join, invite, leave, kick, ban, forget, member lists, aliases. */
import { Type } from '@sinclair/typebox';
import { MatrixError } from '../../core/errors.js';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { MAX_CREATE_ROOM_INVITES, MAX_INITIAL_STATE } from '../../rooms/room-service.js';
import type { Services } from '../../services.js';
import { StringEnum } from '../../schemas.js';
import { authenticate, extractAccessToken, GUEST_ROUTE, requesterOf } from '../auth.js';
import { optionalBody } from '../validation.js';

const JsonObject = Type.Object({}, { additionalProperties: true });
const Reason = Type.Optional(Type.String({ maxLength: 2048 }));
const RoomIdParams = Type.Object({ roomId: Type.String() });
const TargetBody = Type.Object({ user_id: Type.String(), reason: Reason });
const ReasonBody = optionalBody(Type.Object({ reason: Reason }));

export const CreateRoomBodySchema = optionalBody(
  Type.Object({
    preset: Type.Optional(StringEnum(['private_chat', 'public_chat', 'trusted_private_chat'] as const)),
    visibility: Type.Optional(StringEnum(['public', 'private'] as const)),
    name: Type.Optional(Type.String({ maxLength: 255 })),
    topic: Type.Optional(Type.String({ maxLength: 65_536 })),
    invite: Type.Optional(Type.Array(Type.String(), { maxItems: MAX_CREATE_ROOM_INVITES })),
    is_direct: Type.Optional(Type.Boolean()),
    initial_state: Type.Optional(
      Type.Array(Type.Object({ type: Type.String(), state_key: Type.Optional(Type.String()), content: JsonObject }), { maxItems: MAX_INITIAL_STATE }),
    ),
    creation_content: Type.Optional(JsonObject),
    power_level_content_override: Type.Optional(JsonObject),
    room_version: Type.Optional(Type.String()),
    room_alias_name: Type.Optional(Type.String({ maxLength: 200 })),
  }),
);

/** Servers to join through: `via` (current) and `server_name` (deprecated), each repeatable. */
const ServerList = Type.Union([Type.String({ maxLength: 255 }), Type.Array(Type.String({ maxLength: 255 }), { maxItems: 50 })]);
const JoinServersQuery = Type.Object({ via: Type.Optional(ServerList), server_name: Type.Optional(ServerList) });

function listOf(value: string | string[] | undefined): string[] {
  return value === undefined ? [] : Array.isArray(value) ? value : [value];
}

export function roomRoutes(services: Services): FastifyPluginAsyncTypebox {
  return async (app) => {
    app.addHook('onRequest', authenticate(services.sessions));

    /** POST /createRoom */
    app.post('/createRoom', { schema: { body: CreateRoomBodySchema } }, async (request) => {
      const roomId = await services.rooms.createRoom(requesterOf(request), request.body ?? {});
      return { room_id: roomId };
    });

    /** POST /join/{roomIdOrAlias} */
    app.post('/join/:roomIdOrAlias', { ...GUEST_ROUTE, schema: { params: Type.Object({ roomIdOrAlias: Type.String() }), querystring: JoinServersQuery, body: ReasonBody } }, async (request) => {
      const via = [...listOf(request.query.via), ...listOf(request.query.server_name)];
      const roomId = await services.rooms.join(requesterOf(request), request.params.roomIdOrAlias, request.body?.reason, via, request.body ?? {});
      return { room_id: roomId };
    });

    /** POST /knock/{roomIdOrAlias} */
    app.post('/knock/:roomIdOrAlias', { schema: { params: Type.Object({ roomIdOrAlias: Type.String() }), querystring: JoinServersQuery, body: ReasonBody } }, async (request) => {
      const via = [...listOf(request.query.via), ...listOf(request.query.server_name)];
      const roomId = await services.rooms.knock(requesterOf(request), request.params.roomIdOrAlias, request.body?.reason, via);
      return { room_id: roomId };
    });

    /** POST /rooms/{roomId}/join */
    app.post('/rooms/:roomId/join', { ...GUEST_ROUTE, schema: { params: RoomIdParams, body: ReasonBody } }, async (request) => {
      const roomId = await services.rooms.join(requesterOf(request), request.params.roomId, request.body?.reason, [], request.body ?? {});
      return { room_id: roomId };
    });

    /** POST /rooms/{roomId}/invite */
    app.post('/rooms/:roomId/invite', { schema: { params: RoomIdParams, body: TargetBody } }, async (request) => {
      await services.rooms.invite(requesterOf(request), request.params.roomId, request.body.user_id, request.body.reason);
      return {};
    });

    /** POST /rooms/{roomId}/leave */
    app.post('/rooms/:roomId/leave', { ...GUEST_ROUTE, schema: { params: RoomIdParams, body: ReasonBody } }, async (request) => {
      await services.rooms.leave(requesterOf(request), request.params.roomId, request.body?.reason);
      return {};
    });

    /** POST /rooms/{roomId}/kick */
    app.post('/rooms/:roomId/kick', { schema: { params: RoomIdParams, body: TargetBody } }, async (request) => {
      await services.rooms.kick(requesterOf(request), request.params.roomId, request.body.user_id, request.body.reason);
      return {};
    });

    /** POST /rooms/{roomId}/ban */
    app.post('/rooms/:roomId/ban', { schema: { params: RoomIdParams, body: TargetBody } }, async (request) => {
      await services.rooms.ban(requesterOf(request), request.params.roomId, request.body.user_id, request.body.reason);
      return {};
    });

    /** POST /rooms/{roomId}/unban */
    app.post('/rooms/:roomId/unban', { schema: { params: RoomIdParams, body: TargetBody } }, async (request) => {
      await services.rooms.unban(requesterOf(request), request.params.roomId, request.body.user_id, request.body.reason);
      return {};
    });

    /** POST /rooms/{roomId}/forget */
    app.post('/rooms/:roomId/forget', { schema: { params: RoomIdParams, body: optionalBody(JsonObject) } }, async (request) => {
      await services.rooms.forget(requesterOf(request), request.params.roomId);
      return {};
    });

    /** GET /joined_rooms */
    app.get('/joined_rooms', GUEST_ROUTE, async (request) => {
      const rooms = await services.roomCache.roomsOf(requesterOf(request).userId);
      return { joined_rooms: [...rooms].filter(([, entry]) => entry.membership === 'join').map(([roomId]) => roomId) };
    });

    /** GET /rooms/{roomId}/members */
    app.get(
      '/rooms/:roomId/members',
      {
        ...GUEST_ROUTE,
        schema: {
          params: RoomIdParams,
          querystring: Type.Object({
            membership: Type.Optional(StringEnum(['join', 'invite', 'knock', 'leave', 'ban'] as const)),
            not_membership: Type.Optional(StringEnum(['join', 'invite', 'knock', 'leave', 'ban'] as const)),
            at: Type.Optional(Type.String()),
          }),
        },
      },
      async (request) => {
        const requester = requesterOf(request);
        const chunk = await services.history.members(requester, request.params.roomId, request.query.membership, request.query.not_membership);
        return { chunk };
      },
    );

    /** GET /rooms/{roomId}/joined_members */
    app.get('/rooms/:roomId/joined_members', { schema: { params: RoomIdParams } }, async (request) => ({
      joined: await services.history.joinedMembers(requesterOf(request), request.params.roomId),
    }));

    /** GET /rooms/{roomId}/aliases */
    app.get('/rooms/:roomId/aliases', { schema: { params: RoomIdParams } }, async (request) => ({
      aliases: await services.rooms.aliasesOf(requesterOf(request), request.params.roomId),
    }));

    const AliasParams = Type.Object({ roomAlias: Type.String() });

    /** PUT /directory/room/{roomAlias} */
    app.put('/directory/room/:roomAlias', { schema: { params: AliasParams, body: Type.Object({ room_id: Type.String() }) } }, async (request) => {
      await services.rooms.createAlias(requesterOf(request), request.params.roomAlias, request.body.room_id);
      return {};
    });

    /** DELETE /directory/room/{roomAlias} */
    app.delete('/directory/room/:roomAlias', { schema: { params: AliasParams } }, async (request) => {
      const requester = requesterOf(request);
      await services.rooms.deleteAlias(requester, request.params.roomAlias, await services.accounts.isAdmin(requester.userId));
      return {};
    });

    /** POST /search: room events (messages, names, topics) by full-text search. */
    app.post(
      '/search',
      {
        schema: {
          querystring: Type.Object({ next_batch: Type.Optional(Type.String({ maxLength: 32 })) }),
          body: Type.Object({
            search_categories: Type.Object({
              room_events: Type.Optional(
                Type.Object(
                  {
                    search_term: Type.String({ maxLength: 1024 }),
                    keys: Type.Optional(Type.Array(StringEnum(['content.body', 'content.name', 'content.topic'] as const), { maxItems: 3 })),
                    order_by: Type.Optional(StringEnum(['rank', 'recent'] as const)),
                    filter: Type.Optional(
                      Type.Object(
                        { rooms: Type.Optional(Type.Array(Type.String(), { maxItems: 1000 })), not_rooms: Type.Optional(Type.Array(Type.String(), { maxItems: 1000 })), limit: Type.Optional(Type.Integer({ minimum: 0 })) },
                        { additionalProperties: true },
                      ),
                    ),
                  },
                  { additionalProperties: true },
                ),
              ),
            }),
          }),
        },
      },
      async (request) => {
        if (!services.config.enable_search) throw new MatrixError('M_UNKNOWN', 'Search is disabled on this homeserver', { status: 400 });
        const requester = requesterOf(request);
        const query = request.body.search_categories.room_events;
        if (!query) return { search_categories: {} };
        const rooms = await services.roomCache.roomsOf(requester.userId);
        const joined = [...rooms].filter(([, entry]) => entry.membership === 'join').map(([roomId]) => roomId);
        return services.history.search(requester, joined, {
          searchTerm: query.search_term,
          keys: query.keys,
          orderBy: query.order_by,
          rooms: query.filter?.rooms,
          notRooms: query.filter?.not_rooms,
          limit: query.filter?.limit,
          nextBatch: request.query.next_batch,
        });
      },
    );

    /** POST /rooms/{roomId}/upgrade */
    app.post('/rooms/:roomId/upgrade', { schema: { params: RoomIdParams, body: Type.Object({ new_version: Type.String({ maxLength: 32 }) }) } }, async (request) => ({
      replacement_room: await services.rooms.upgradeRoom(requesterOf(request), request.params.roomId, request.body.new_version),
    }));

    /** POST /publicRooms: the same, with a search (`filter.generic_search_term`). */
    app.post(
      '/publicRooms',
      { ...GUEST_ROUTE, schema: { querystring: Type.Object({ server: Type.Optional(Type.String({ maxLength: 255 })) }), body: PublicRoomsBody } },
      async (request) =>
        services.rooms.publicRooms({
          limit: request.body.limit ?? undefined,
          since: request.body.since ?? undefined,
          searchTerm: request.body.filter?.generic_search_term ?? undefined,
          server: request.query.server,
        }),
    );

    /** PUT /directory/list/room/{roomId}: publish the room here, or take it out. */
    app.put(
      '/directory/list/room/:roomId',
      { schema: { params: RoomIdParams, body: Type.Object({ visibility: Type.Optional(StringEnum(['public', 'private'] as const)) }) } },
      async (request) => {
        const requester = requesterOf(request);
        await services.rooms.setDirectoryVisibility(requester, request.params.roomId, request.body.visibility ?? 'public', await services.accounts.isAdmin(requester.userId));
        return {};
      },
    );
  };
}

/** The body of `POST /publicRooms`, here and over federation. */
export const PublicRoomsBody = Type.Object(
  {
    // null is as good as absent (Synapse reads them so; clients send `"since": null` for the first page).
    limit: Type.Optional(Type.Union([Type.Integer({ minimum: 0 }), Type.Null()])),
    since: Type.Optional(Type.Union([Type.String({ maxLength: 512 }), Type.Null()])),
    filter: Type.Optional(
      Type.Union([Type.Object({ generic_search_term: Type.Optional(Type.Union([Type.String({ maxLength: 512 }), Type.Null()])) }, { additionalProperties: true }), Type.Null()]),
    ),
  },
  { additionalProperties: true },
);

/** GET /directory/room/{roomAlias}: resolving an alias needs no login. */
export function directoryLookupRoutes(services: Services): FastifyPluginAsyncTypebox {
  return async (app) => {
    const requireUser = authenticate(services.sessions);
    /**
     * GET /publicRooms: this server's directory, or another's (`server`). A token is needed, as in
     * Synapse by default; `allow_public_rooms_without_auth` (Synapse's key) lets anyone without one
     * read this server's own list (never another server's: that would make us a proxy for anyone).
     */
    app.get(
      '/publicRooms',
      {
        ...GUEST_ROUTE,
        onRequest: async (request) => {
          const server = (request.query as Record<string, unknown>).server;
          if (services.config.allow_public_rooms_without_auth && extractAccessToken(request) === null && (server === undefined || server === services.config.server_name)) return;
          await requireUser(request);
        },
        schema: { querystring: Type.Object({ limit: Type.Optional(Type.Integer({ minimum: 0 })), since: Type.Optional(Type.String({ maxLength: 512 })), server: Type.Optional(Type.String({ maxLength: 255 })) }) },
      },
      async (request) => services.rooms.publicRooms({ limit: request.query.limit, since: request.query.since, server: request.query.server }),
    );
    app.get('/directory/room/:roomAlias', { schema: { params: Type.Object({ roomAlias: Type.String() }) } }, async (request) => {
      const { roomId, servers } = await services.rooms.lookupAlias(request.params.roomAlias);
      return { room_id: roomId, servers };
    });
    /** GET /directory/list/room/{roomId}: whether a room is published here (no login needed). */
    app.get('/directory/list/room/:roomId', { schema: { params: Type.Object({ roomId: Type.String() }) } }, async (request) => ({
      visibility: await services.rooms.directoryVisibility(request.params.roomId),
    }));
  };
}
