/**
 * End-to-end encryption keys: `/keys/upload`, `/keys/query`, `/keys/claim`, `/keys/changes`, and
 * server-side key backup (`/room_keys/version`, `/room_keys/keys` at its three levels).
 */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { MatrixError } from '../../core/errors.js';
import type { Services } from '../../services.js';
import { parseSyncToken } from '../../sync/stream.js';
import { authenticate, GUEST_ROUTE, requesterOf } from '../auth.js';
import { AuthSchema, withPassword } from '../uia.js';
import type { UiaAuth } from '../../users/password-auth.js';
import type { JsonObject } from '../../rooms/events.js';
import { canonicalJson } from '../../core/canonical-json.js';

const AnyObject = Type.Object({}, { additionalProperties: true });

export function keyRoutes(services: Services): FastifyPluginAsyncTypebox {
  return async (app) => {
    app.addHook('onRequest', authenticate(services.sessions));

    app.post(
      '/keys/upload',
      { ...GUEST_ROUTE, schema: { body: Type.Object({ device_keys: Type.Optional(AnyObject), one_time_keys: Type.Optional(AnyObject), fallback_keys: Type.Optional(AnyObject) }, { additionalProperties: true }) } },
      async (request) => services.keys.upload(requesterOf(request), request.body),
    );

    app.post('/keys/query', { ...GUEST_ROUTE, schema: { body: Type.Object({ device_keys: AnyObject, timeout: Type.Optional(Type.Integer()) }, { additionalProperties: true }) } }, async (request) =>
      services.keys.query(requesterOf(request).userId, request.body),
    );

    /** POST /keys/device_signing/upload: replacing existing keys needs the password again. */
    app.post('/keys/device_signing/upload', { schema: { body: Type.Object({ auth: AuthSchema }, { additionalProperties: true }) } }, async (request, reply) => {
      const userId = requesterOf(request).userId;
      const { auth, ...keys } = request.body as { auth?: UiaAuth } & Record<string, unknown>;
      const crossSigning = services.keys.crossSigning;
      const upload = async () => {
        await crossSigning.upload(userId, keys as JsonObject);
        return {};
      };
      if (!(await crossSigning.uploadNeedsAuth(userId, keys as JsonObject))) return upload();
      return withPassword(services.passwordAuth, reply, userId, `POST /keys/device_signing/upload ${canonicalJson(keys)}`, auth, upload);
    });

    /** POST /keys/signatures/upload */
    app.post('/keys/signatures/upload', { ...GUEST_ROUTE, schema: { body: AnyObject } }, async (request) => services.keys.crossSigning.uploadSignatures(requesterOf(request).userId, request.body as JsonObject));

    app.post('/keys/claim', { ...GUEST_ROUTE, schema: { body: Type.Object({ one_time_keys: AnyObject, timeout: Type.Optional(Type.Integer()) }, { additionalProperties: true }) } }, async (request) =>
      services.keys.claim(request.body),
    );

    /** GET /keys/changes?from=&to=: sync tokens. */
    app.get('/keys/changes', { ...GUEST_ROUTE, schema: { querystring: Type.Object({ from: Type.String(), to: Type.String() }) } }, async (request) => {
      const from = parseSyncToken(request.query.from);
      const to = parseSyncToken(request.query.to);
      if (!from || !to) throw new MatrixError('M_INVALID_PARAM', 'from and to must be sync tokens', { status: 400 });
      const upTo = Math.min(to.stream, services.stream.current);
      const userId = requesterOf(request).userId;
      return { changed: await services.keys.changesBetween(userId, from.stream, upTo), left: await services.keys.leftBetween(userId, from.stream, upTo) };
    });

    // ---- key backup ----
    const backup = services.keyBackup;
    const VersionBody = Type.Object({ algorithm: Type.String(), auth_data: AnyObject, version: Type.Optional(Type.String()) }, { additionalProperties: true });
    const VersionParams = Type.Object({ version: Type.String({ maxLength: 64 }) });
    const VersionQuery = Type.Object({ version: Type.String({ maxLength: 64 }) });
    const RoomParams = Type.Object({ roomId: Type.String() });
    const SessionParams = Type.Object({ roomId: Type.String(), sessionId: Type.String() });
    const Sessions = Type.Record(Type.String(), AnyObject);
    const userOf = (request: Parameters<typeof requesterOf>[0]) => requesterOf(request).userId;

    app.post('/room_keys/version', { schema: { body: VersionBody } }, async (request) => backup.createVersion(userOf(request), request.body));
    app.get('/room_keys/version', async (request) => backup.version(userOf(request)));
    app.get('/room_keys/version/:version', { schema: { params: VersionParams } }, async (request) => backup.version(userOf(request), request.params.version));
    app.put('/room_keys/version/:version', { schema: { params: VersionParams, body: VersionBody } }, async (request) => {
      await backup.updateVersion(userOf(request), request.params.version, request.body);
      return {};
    });
    app.delete('/room_keys/version/:version', { schema: { params: VersionParams } }, async (request) => {
      await backup.deleteVersion(userOf(request), request.params.version);
      return {};
    });

    app.put('/room_keys/keys', { schema: { querystring: VersionQuery, body: Type.Object({ rooms: Type.Record(Type.String(), Type.Object({ sessions: Sessions })) }) } }, async (request) =>
      backup.putKeys(userOf(request), request.query.version, Object.fromEntries(Object.entries(request.body.rooms).map(([roomId, room]) => [roomId, room.sessions]))),
    );
    app.put('/room_keys/keys/:roomId', { schema: { params: RoomParams, querystring: VersionQuery, body: Type.Object({ sessions: Sessions }) } }, async (request) =>
      backup.putKeys(userOf(request), request.query.version, { [request.params.roomId]: request.body.sessions }),
    );
    app.put('/room_keys/keys/:roomId/:sessionId', { schema: { params: SessionParams, querystring: VersionQuery, body: AnyObject } }, async (request) =>
      backup.putKeys(userOf(request), request.query.version, { [request.params.roomId]: { [request.params.sessionId]: request.body } }),
    );
    app.get('/room_keys/keys', { schema: { querystring: VersionQuery } }, async (request) => backup.getKeys(userOf(request), request.query.version));
    app.get('/room_keys/keys/:roomId', { schema: { params: RoomParams, querystring: VersionQuery } }, async (request) => backup.getKeys(userOf(request), request.query.version, request.params.roomId));
    app.get('/room_keys/keys/:roomId/:sessionId', { schema: { params: SessionParams, querystring: VersionQuery } }, async (request) =>
      backup.getKeys(userOf(request), request.query.version, request.params.roomId, request.params.sessionId),
    );
    app.delete('/room_keys/keys', { schema: { querystring: VersionQuery } }, async (request) => backup.deleteKeys(userOf(request), request.query.version));
    app.delete('/room_keys/keys/:roomId', { schema: { params: RoomParams, querystring: VersionQuery } }, async (request) => backup.deleteKeys(userOf(request), request.query.version, request.params.roomId));
    app.delete('/room_keys/keys/:roomId/:sessionId', { schema: { params: SessionParams, querystring: VersionQuery } }, async (request) =>
      backup.deleteKeys(userOf(request), request.query.version, request.params.roomId, request.params.sessionId),
    );
  };
}
