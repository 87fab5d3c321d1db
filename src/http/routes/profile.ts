/** Profiles and account data. */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { Services } from '../../services.js';
import { authenticate, GUEST_ROUTE, requesterOf } from '../auth.js';
import { assertOwnUser } from './sync.js';

const JsonObject = Type.Object({}, { additionalProperties: true });
const UserParams = Type.Object({ userId: Type.String() });

export function profileRoutes(services: Services): FastifyPluginAsyncTypebox {
  return async (app) => {
    const requireUser = authenticate(services.sessions);
    // Reading a profile needs no token unless the operator asks for one.
    const readProfile = services.config.require_auth_for_profile_requests ? { onRequest: requireUser } : {};

    /** GET /profile/{userId} */
    app.get('/profile/:userId', { ...readProfile, schema: { params: UserParams } }, async (request) =>
      services.profiles.get(request.params.userId),
    );

    /** GET /profile/{userId}/displayname and /avatar_url */
    app.get('/profile/:userId/displayname', { ...readProfile, schema: { params: UserParams } }, async (request) => {
      const profile = await services.profiles.get(request.params.userId);
      return profile.displayname === undefined ? {} : { displayname: profile.displayname };
    });
    app.get('/profile/:userId/avatar_url', { ...readProfile, schema: { params: UserParams } }, async (request) => {
      const profile = await services.profiles.get(request.params.userId);
      return profile.avatar_url === undefined ? {} : { avatar_url: profile.avatar_url };
    });

    /** PUT /profile/{userId}/displayname and /avatar_url: your own only. */
    app.put(
      '/profile/:userId/displayname',
      { ...GUEST_ROUTE, onRequest: requireUser, schema: { params: UserParams, body: Type.Object({ displayname: Type.Union([Type.String(), Type.Null()]) }) } },
      async (request) => {
        assertOwnUser(requesterOf(request).userId, request.params.userId, 'set the displayname');
        await services.profiles.setDisplayname(request.params.userId, request.body.displayname);
        return {};
      },
    );
    app.put(
      '/profile/:userId/avatar_url',
      { onRequest: requireUser, schema: { params: UserParams, body: Type.Object({ avatar_url: Type.Union([Type.String(), Type.Null()]) }) } },
      async (request) => {
        assertOwnUser(requesterOf(request).userId, request.params.userId, 'set the avatar');
        await services.profiles.setAvatarUrl(request.params.userId, request.body.avatar_url);
        return {};
      },
    );

    const AccountDataParams = Type.Object({ userId: Type.String(), type: Type.String() });
    const RoomAccountDataParams = Type.Object({ userId: Type.String(), roomId: Type.String(), type: Type.String() });
    const TagsParams = Type.Object({ userId: Type.String(), roomId: Type.String() });
    const TagParams = Type.Object({ userId: Type.String(), roomId: Type.String(), tag: Type.String({ minLength: 1 }) });

    /** GET/PUT /user/{userId}/account_data/{type} */
    app.get('/user/:userId/account_data/:type', { onRequest: requireUser, schema: { params: AccountDataParams } }, async (request) => {
      assertOwnUser(requesterOf(request).userId, request.params.userId, 'get account data');
      return services.accountData.get(request.params.userId, undefined, request.params.type);
    });
    app.put('/user/:userId/account_data/:type', { onRequest: requireUser, schema: { params: AccountDataParams, body: JsonObject } }, async (request) => {
      assertOwnUser(requesterOf(request).userId, request.params.userId, 'add account data');
      await services.accountData.set(request.params.userId, undefined, request.params.type, request.body);
      return {};
    });

    /** POST /user_directory/search */
    app.post(
      '/user_directory/search',
      { onRequest: requireUser, schema: { body: Type.Object({ search_term: Type.String({ maxLength: 512 }), limit: Type.Optional(Type.Integer({ minimum: 0 })) }) } },
      async (request) => services.userDirectory.search(requesterOf(request).userId, request.body.search_term, Math.min(request.body.limit ?? 10, 50)),
    );

    /** GET /user/{userId}/rooms/{roomId}/tags */
    app.get('/user/:userId/rooms/:roomId/tags', { onRequest: requireUser, schema: { params: TagsParams } }, async (request) => {
      assertOwnUser(requesterOf(request).userId, request.params.userId, 'get tags');
      return services.accountData.tags(request.params.userId, request.params.roomId);
    });

    /** PUT/DELETE /user/{userId}/rooms/{roomId}/tags/{tag} */
    app.put(
      '/user/:userId/rooms/:roomId/tags/:tag',
      { onRequest: requireUser, schema: { params: TagParams, body: Type.Object({ order: Type.Optional(Type.Number({ minimum: 0, maximum: 1 })) }, { additionalProperties: true }) } },
      async (request) => {
        assertOwnUser(requesterOf(request).userId, request.params.userId, 'add tags');
        await services.accountData.addTag(request.params.userId, request.params.roomId, request.params.tag, request.body);
        return {};
      },
    );
    app.delete('/user/:userId/rooms/:roomId/tags/:tag', { onRequest: requireUser, schema: { params: TagParams } }, async (request) => {
      assertOwnUser(requesterOf(request).userId, request.params.userId, 'remove tags');
      await services.accountData.removeTag(request.params.userId, request.params.roomId, request.params.tag);
      return {};
    });

    /** GET/PUT /user/{userId}/rooms/{roomId}/account_data/{type} */
    app.get('/user/:userId/rooms/:roomId/account_data/:type', { onRequest: requireUser, schema: { params: RoomAccountDataParams } }, async (request) => {
      assertOwnUser(requesterOf(request).userId, request.params.userId, 'get account data');
      return services.accountData.get(request.params.userId, request.params.roomId, request.params.type);
    });
    app.put(
      '/user/:userId/rooms/:roomId/account_data/:type',
      { onRequest: requireUser, schema: { params: RoomAccountDataParams, body: JsonObject } },
      async (request) => {
        assertOwnUser(requesterOf(request).userId, request.params.userId, 'add account data');
        await services.accountData.set(request.params.userId, request.params.roomId, request.params.type, request.body);
        return {};
      },
    );
  };
}
