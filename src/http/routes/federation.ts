/**
 * The Server-Server API served under `/_matrix/federation`: every request must carry a valid
 * X-Matrix signature of its origin (checked after the body is read, since the body is signed
 * too), passes `rc_federation`, and tells the sender that the origin is up. The work is in
 * federation/room-federation.ts; these routes read parameters and shape answers.
 */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { multipartMedia } from '../../federation/media.js';
import { baseType, contentDisposition, THUMBNAIL_TYPES } from '../../media/content-disposition.js';
import { MatrixError } from '../../core/errors.js';
import { PublicRoomsBody } from './rooms.js';
import { InboundLimiter } from '../../federation/inbound-limiter.js';
import { MAX_INVITE_ROOM_STATE, v1InviteBody } from '../../federation/room-federation.js';
import type { Services } from '../../services.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The server a federation request came from (set by the X-Matrix check). */
    origin: string | null;
  }
}

const Json = Type.Object({}, { additionalProperties: true });
const RoomUserParams = Type.Object({ roomId: Type.String(), userId: Type.String() });
const RoomEventParams = Type.Object({ roomId: Type.String(), eventId: Type.String() });
const VersionsQuery = Type.Object({ ver: Type.Optional(Type.Union([Type.String(), Type.Array(Type.String(), { maxItems: 100 })])) });
const EventIdQuery = Type.Object({ event_id: Type.String() });
const TransactionBody = Type.Object(
  {
    origin: Type.Optional(Type.String()),
    origin_server_ts: Type.Optional(Type.Integer()),
    pdus: Type.Array(Type.Unknown(), { maxItems: 50 }),
    edus: Type.Optional(Type.Array(Type.Unknown(), { maxItems: 100 })),
  },
  { additionalProperties: true },
);
// Both lists may be left out (empty), as Synapse reads them: the room's ACL and membership are
// checked before anything of the body.
const MissingEventsBody = Type.Object(
  {
    earliest_events: Type.Optional(Type.Array(Type.String(), { maxItems: 100 })),
    latest_events: Type.Optional(Type.Array(Type.String(), { maxItems: 100 })),
    limit: Type.Optional(Type.Integer()),
    min_depth: Type.Optional(Type.Integer()),
  },
  { additionalProperties: true },
);
const InviteBody = Type.Object({ room_version: Type.Optional(Type.String()), event: Json, invite_room_state: Type.Optional(Type.Array(Type.Unknown(), { maxItems: MAX_INVITE_ROOM_STATE })) }, { additionalProperties: true });

function listOf(value: string | string[] | undefined): string[] {
  return value === undefined ? [] : Array.isArray(value) ? value : [value];
}

export function federationRoutes(services: Services): FastifyPluginAsyncTypebox {
  const { federation, roomFederation, config } = services;
  const limiter = new InboundLimiter(config.rc_federation, services.clock);
  return async (app) => {
    app.decorateRequest('origin', null);
    // After the body is parsed: the signature covers it.
    app.addHook('preHandler', async (request) => {
      request.origin = await federation.authenticate({
        method: request.method,
        uri: request.originalUrl,
        authorization: request.headers.authorization,
        body: request.body,
      });
      services.federationSender.destinationIsUp(request.origin);
    });
    const originOf = (request: FastifyRequest): string => {
      if (!request.origin) throw new Error('federation route without the X-Matrix check');
      return request.origin;
    };
    const limited = <T>(request: FastifyRequest, work: () => Promise<T>): Promise<T> => limiter.run(originOf(request), work);

    /** PUT /v1/send/{txnId}: a transaction of PDUs and EDUs. */
    app.put('/v1/send/:txnId', { schema: { params: Type.Object({ txnId: Type.String({ maxLength: 255 }) }), body: TransactionBody } }, async (request) =>
      limited(request, () => roomFederation.transaction(originOf(request), request.params.txnId, request.body)),
    );

    // ---- joins, leaves, knocks ----
    app.get('/v1/make_join/:roomId/:userId', { schema: { params: RoomUserParams, querystring: VersionsQuery } }, async (request) =>
      limited(request, () => {
        const versions = listOf(request.query.ver);
        // No `ver` means a server that only knows version 1.
        return roomFederation.makeMembership(originOf(request), request.params.roomId, request.params.userId, 'join', versions.length > 0 ? versions : ['1']);
      }),
    );
    app.put('/v2/send_join/:roomId/:eventId', { schema: { params: RoomEventParams, body: Json } }, async (request) =>
      limited(request, () => roomFederation.sendMembership(originOf(request), request.params.roomId, request.params.eventId, request.body, 'join')),
    );
    // v1 answers are `[200, body]`, a relic Synapse still speaks.
    app.put('/v1/send_join/:roomId/:eventId', { schema: { params: RoomEventParams, body: Json } }, async (request) => [
      200,
      await limited(request, () => roomFederation.sendMembership(originOf(request), request.params.roomId, request.params.eventId, request.body, 'join')),
    ]);
    app.get('/v1/make_leave/:roomId/:userId', { schema: { params: RoomUserParams } }, async (request) =>
      limited(request, () => roomFederation.makeMembership(originOf(request), request.params.roomId, request.params.userId, 'leave', undefined)),
    );
    app.put('/v2/send_leave/:roomId/:eventId', { schema: { params: RoomEventParams, body: Json } }, async (request) =>
      limited(request, () => roomFederation.sendMembership(originOf(request), request.params.roomId, request.params.eventId, request.body, 'leave')),
    );
    app.put('/v1/send_leave/:roomId/:eventId', { schema: { params: RoomEventParams, body: Json } }, async (request) => [
      200,
      await limited(request, () => roomFederation.sendMembership(originOf(request), request.params.roomId, request.params.eventId, request.body, 'leave')),
    ]);
    app.get('/v1/make_knock/:roomId/:userId', { schema: { params: RoomUserParams, querystring: VersionsQuery } }, async (request) =>
      limited(request, () => roomFederation.makeMembership(originOf(request), request.params.roomId, request.params.userId, 'knock', listOf(request.query.ver))),
    );
    app.put('/v1/send_knock/:roomId/:eventId', { schema: { params: RoomEventParams, body: Json } }, async (request) =>
      limited(request, () => roomFederation.sendMembership(originOf(request), request.params.roomId, request.params.eventId, request.body, 'knock')),
    );

    // ---- invites ----
    app.put('/v2/invite/:roomId/:eventId', { schema: { params: RoomEventParams, body: InviteBody } }, async (request) =>
      limited(request, () => roomFederation.receiveInvite(originOf(request), request.params.roomId, request.params.eventId, request.body)),
    );
    app.put('/v1/invite/:roomId/:eventId', { schema: { params: RoomEventParams, body: Json } }, async (request) => [
      200,
      await limited(request, () => roomFederation.receiveInvite(originOf(request), request.params.roomId, request.params.eventId, v1InviteBody(request.body))),
    ]);

    // ---- reading rooms ----
    app.get('/v1/event/:eventId', { schema: { params: Type.Object({ eventId: Type.String() }) } }, async (request) =>
      limited(request, () => roomFederation.event(originOf(request), request.params.eventId)),
    );
    app.get('/v1/state/:roomId', { schema: { params: Type.Object({ roomId: Type.String() }), querystring: EventIdQuery } }, async (request) =>
      limited(request, () => roomFederation.stateAt(originOf(request), request.params.roomId, request.query.event_id, false)),
    );
    app.get('/v1/state_ids/:roomId', { schema: { params: Type.Object({ roomId: Type.String() }), querystring: EventIdQuery } }, async (request) =>
      limited(request, () => roomFederation.stateAt(originOf(request), request.params.roomId, request.query.event_id, true)),
    );
    app.get('/v1/event_auth/:roomId/:eventId', { schema: { params: RoomEventParams } }, async (request) =>
      limited(request, () => roomFederation.eventAuth(originOf(request), request.params.roomId, request.params.eventId)),
    );
    app.get(
      '/v1/backfill/:roomId',
      { schema: { params: Type.Object({ roomId: Type.String() }), querystring: Type.Object({ v: Type.Union([Type.String(), Type.Array(Type.String(), { maxItems: 50 })]), limit: Type.Integer({ minimum: 0 }) }) } },
      async (request) => limited(request, () => roomFederation.backfill(originOf(request), request.params.roomId, listOf(request.query.v), request.query.limit)),
    );
    app.post('/v1/get_missing_events/:roomId', { schema: { params: Type.Object({ roomId: Type.String() }), body: MissingEventsBody } }, async (request) =>
      limited(request, () =>
        roomFederation.missingEvents(originOf(request), request.params.roomId, {
          ...request.body,
          earliest_events: request.body.earliest_events ?? [],
          latest_events: request.body.latest_events ?? [],
        }),
      ),
    );

    // ---- queries ----
    app.get(
      '/v1/query/profile',
      { schema: { querystring: Type.Object({ user_id: Type.String(), field: Type.Optional(Type.Union([Type.Literal('displayname'), Type.Literal('avatar_url')])) }) } },
      async (request) => {
        const { user_id: userId, field } = request.query;
        if (!userId.endsWith(`:${config.server_name}`)) throw new MatrixError('M_INVALID_PARAM', 'The user is not of this server');
        const profile = await services.profiles.get(userId);
        return field === undefined ? profile : field in profile ? { [field]: profile[field] } : {};
      },
    );
    app.get('/v1/query/directory', { schema: { querystring: Type.Object({ room_alias: Type.String() }) } }, async (request) => {
      const alias = request.query.room_alias;
      if (!alias.endsWith(`:${config.server_name}`)) throw new MatrixError('M_NOT_FOUND', `Room alias ${alias} not found`);
      const { roomId, servers } = await services.rooms.lookupAlias(alias);
      return { room_id: roomId, servers };
    });
    app.get('/v1/publicRooms', { schema: { querystring: Type.Object({ limit: Type.Optional(Type.Integer({ minimum: 0 })), since: Type.Optional(Type.String()) }, { additionalProperties: true }) } }, async (request) =>
      services.rooms.publicRooms({ limit: request.query.limit, since: request.query.since }),
    );
    app.post('/v1/publicRooms', { schema: { body: PublicRoomsBody } }, async (request) =>
      services.rooms.publicRooms({ limit: request.body.limit ?? undefined, since: request.body.since ?? undefined, searchTerm: request.body.filter?.generic_search_term ?? undefined }),
    );
    // ---- media (authenticated federation media, spec v1.11) ----
    const serveMedia = async (mediaId: string, reply: FastifyReply, thumbnail: boolean) => {
      const media = await services.media.open(config.server_name, mediaId, { authenticated: true });
      if (thumbnail && !THUMBNAIL_TYPES.has(baseType(media.row.content_type))) {
        media.stream.destroy();
        throw new MatrixError('M_NOT_FOUND', 'No thumbnail for this media type');
      }
      const answer = multipartMedia(media.row.content_type, contentDisposition(media.row.content_type, media.row.upload_name), Number(media.row.size_bytes), media.stream);
      return reply.header('Content-Type', answer.contentType).header('Content-Length', String(answer.length)).send(answer.body);
    };
    app.get('/v1/media/download/:mediaId', { schema: { params: Type.Object({ mediaId: Type.String({ maxLength: 255 }) }) } }, async (request, reply) =>
      limited(request, () => serveMedia(request.params.mediaId, reply, false)),
    );
    app.get('/v1/media/thumbnail/:mediaId', { schema: { params: Type.Object({ mediaId: Type.String({ maxLength: 255 }) }), querystring: Type.Object({}, { additionalProperties: true }) } }, async (request, reply) =>
      limited(request, () => serveMedia(request.params.mediaId, reply, true)),
    );

    // ---- end-to-end encryption keys of this server's users ----
    /** GET /v1/user/devices/{userId}: every device of the user, with its keys. */
    app.get('/v1/user/devices/:userId', { schema: { params: Type.Object({ userId: Type.String() }) } }, async (request) => {
      const userId = request.params.userId;
      if (!userId.endsWith(`:${config.server_name}`)) throw new MatrixError('M_INVALID_PARAM', 'The user is not of this server');
      await services.profiles.get(userId);
      return limited(request, () => services.keys.devicesForServer(userId));
    });
    app.post('/v1/user/keys/query', { schema: { body: Type.Object({ device_keys: Json }, { additionalProperties: true }) } }, async (request) =>
      limited(request, () => services.keys.queryForServer(request.body)),
    );
    app.post('/v1/user/keys/claim', { schema: { body: Type.Object({ one_time_keys: Json }, { additionalProperties: true }) } }, async (request) =>
      limited(request, () => services.keys.claimForServer(request.body)),
    );
  };
}
