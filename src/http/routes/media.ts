/**
 * Media: upload, download and config. Served under `/_matrix/media/v3` and `/r0` (the legacy paths
 * the SDKs use; downloads there need no token: matrix-nio, which speaks only r0, downloads our own
 * media there) and, for downloads and config, under `/_matrix/client/v1/media` (authenticated
 * media, spec v1.11). As in Synapse with `enable_authenticated_media` (its default since 1.120),
 * only the authenticated downloads fetch another server's media; the legacy ones serve of it only
 * what was cached for them before.
 */
import { Readable } from 'node:stream';
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Services } from '../../services.js';
import { baseType, contentDisposition, THUMBNAIL_TYPES } from '../../media/content-disposition.js';
import type { OpenMedia, OpenOptions } from '../../media/media-service.js';
import { authenticate, GUEST_ROUTE, requesterOf } from '../auth.js';
import { MatrixError } from '../../core/errors.js';

/** Legacy media prefixes; nio speaks only r0. */
export const MEDIA_PREFIXES = ['/_matrix/media/v3', '/_matrix/media/r0'] as const;
export const AUTHENTICATED_MEDIA_PREFIX = '/_matrix/client/v1/media';

const MediaParams = Type.Object({ serverName: Type.String(), mediaId: Type.String() });
const NamedMediaParams = Type.Object({ serverName: Type.String(), mediaId: Type.String(), fileName: Type.String() });
/** `allow_remote=false`: another server's media is not fetched (Synapse's `parse_boolean`). */
const LegacyDownloadQuery = Type.Object({ allow_remote: Type.Optional(Type.Union([Type.Literal('true'), Type.Literal('false')])) }, { additionalProperties: true });
const UploadQuery = Type.Object({ filename: Type.Optional(Type.String()) }, { additionalProperties: true });

/**
 * Sandboxed so that an uploaded HTML or SVG file cannot run script as this origin even if a
 * browser ignores Content-Disposition; nosniff so the declared type is the one used.
 */
const DOWNLOAD_SECURITY_HEADERS = {
  'Content-Security-Policy': "sandbox; default-src 'none'; script-src 'none'; plugin-types application/pdf; style-src 'unsafe-inline'; media-src 'self'; object-src 'self';",
  'X-Content-Type-Options': 'nosniff',
  'Cross-Origin-Resource-Policy': 'cross-origin',
};

function sendMedia(reply: FastifyReply, media: OpenMedia, fileName: string | undefined, cacheControl: string) {
  const { row, stream } = media;
  // Fastify answers HEAD by draining the GET's body: that would read the whole file for nothing.
  // An empty stream keeps the Content-Length set below (a string body would reset it to 0).
  const body = reply.request.method === 'HEAD' ? (stream.destroy(), Readable.from([])) : stream;
  return reply
    .headers(DOWNLOAD_SECURITY_HEADERS)
    .header('Content-Type', row.content_type)
    .header('Content-Length', String(row.size_bytes))
    .header('Content-Disposition', contentDisposition(row.content_type, fileName ?? row.upload_name))
    // An mxc URI never changes what it names.
    .header('Cache-Control', cacheControl)
    .send(body);
}

/**
 * Thumbnails: no image scaling here. An image of a type a thumbnail may have is served whole
 * (clients scale it; bots' images are small), anything else is 404 `M_NOT_FOUND`, as Synapse
 * answers for media it cannot thumbnail.
 */
async function openThumbnail(services: Services, serverName: string, mediaId: string, options: OpenOptions): Promise<OpenMedia> {
  const media = await services.media.open(serverName, mediaId, options);
  if (!THUMBNAIL_TYPES.has(baseType(media.row.content_type))) {
    media.stream.destroy();
    throw new MatrixError('M_NOT_FOUND', 'No thumbnail for this media type');
  }
  return media;
}

/** A header as the client sent it, even after `request.headers` was changed. */
function rawHeader(request: FastifyRequest, name: string): string | undefined {
  const raw = request.raw.rawHeaders;
  for (let i = 0; i < raw.length; i += 2) if (raw[i]!.toLowerCase() === name) return raw[i + 1];
  return undefined;
}

function mediaConfig(services: Services) {
  return { 'm.upload.size': services.media.maxUploadSize };
}

/** Routes under `/_matrix/media/{v3,r0}`. */
export function legacyMediaRoutes(services: Services): FastifyPluginAsyncTypebox {
  return async (app) => {
    const requireUser = authenticate(services.sessions);
    const publicCache = 'public, max-age=86400, immutable';

    // Uploads are bytes, not JSON, and may be far larger than JSON bodies: the route streams the
    // raw request itself, under `max_upload_size`.
    app.removeAllContentTypeParsers();
    app.addContentTypeParser('*', (_request, payload, done) => done(null, payload));
    // Fastify refuses a Content-Type it cannot parse (415) before any parser runs; Synapse stores
    // whatever it is given. Hide the header from Fastify; the route reads it from the raw headers.
    const hideContentType = async (request: FastifyRequest) => {
      delete request.headers['content-type'];
    };

    /** POST /upload?filename= : the body is the file, its Content-Type the media's type. */
    app.post('/upload', { onRequest: [requireUser, hideContentType], schema: { querystring: UploadQuery } }, async (request) => {
      const length = request.headers['content-length'];
      const contentUri = await services.media.upload({
        uploader: requesterOf(request).userId,
        contentType: rawHeader(request, 'content-type'),
        filename: request.query.filename,
        declaredLength: length === undefined ? undefined : Number(length),
        body: request.raw,
      });
      return { content_uri: contentUri };
    });

    // No token: while enable_authenticated_media is on, never a fetch from another server.
    const unauthenticated = (query: { allow_remote?: 'true' | 'false' | undefined }): OpenOptions => ({ authenticated: false, allowRemote: query.allow_remote !== 'false' });
    /** GET /download/{serverName}/{mediaId} */
    app.get('/download/:serverName/:mediaId', { schema: { params: MediaParams, querystring: LegacyDownloadQuery } }, async (request, reply) =>
      sendMedia(reply, await services.media.open(request.params.serverName, request.params.mediaId, unauthenticated(request.query)), undefined, publicCache),
    );
    /** GET /download/{serverName}/{mediaId}/{fileName}: the same bytes, named fileName. */
    app.get('/download/:serverName/:mediaId/:fileName', { schema: { params: NamedMediaParams, querystring: LegacyDownloadQuery } }, async (request, reply) =>
      sendMedia(reply, await services.media.open(request.params.serverName, request.params.mediaId, unauthenticated(request.query)), request.params.fileName, publicCache),
    );
    /** GET /thumbnail/{serverName}/{mediaId} */
    app.get('/thumbnail/:serverName/:mediaId', { schema: { params: MediaParams, querystring: LegacyDownloadQuery } }, async (request, reply) =>
      sendMedia(reply, await openThumbnail(services, request.params.serverName, request.params.mediaId, unauthenticated(request.query)), undefined, publicCache),
    );
    /** GET /config */
    app.get('/config', { onRequest: requireUser }, async () => mediaConfig(services));
  };
}

/** Routes under `/_matrix/client/v1/media`: the same downloads, for users with a token. */
export function authenticatedMediaRoutes(services: Services): FastifyPluginAsyncTypebox {
  return async (app) => {
    const requireUser = authenticate(services.sessions);
    const privateCache = 'private, max-age=86400, immutable';
    const authenticated: OpenOptions = { authenticated: true };

    /** GET /download/{serverName}/{mediaId} */
    app.get('/download/:serverName/:mediaId', { ...GUEST_ROUTE, onRequest: requireUser, schema: { params: MediaParams } }, async (request, reply) =>
      sendMedia(reply, await services.media.open(request.params.serverName, request.params.mediaId, authenticated), undefined, privateCache),
    );
    /** GET /download/{serverName}/{mediaId}/{fileName} */
    app.get('/download/:serverName/:mediaId/:fileName', { ...GUEST_ROUTE, onRequest: requireUser, schema: { params: NamedMediaParams } }, async (request, reply) =>
      sendMedia(reply, await services.media.open(request.params.serverName, request.params.mediaId, authenticated), request.params.fileName, privateCache),
    );
    /** GET /thumbnail/{serverName}/{mediaId} */
    app.get('/thumbnail/:serverName/:mediaId', { ...GUEST_ROUTE, onRequest: requireUser, schema: { params: MediaParams } }, async (request, reply) =>
      sendMedia(reply, await openThumbnail(services, request.params.serverName, request.params.mediaId, authenticated), undefined, privateCache),
    );
    /** GET /config */
    app.get('/config', { onRequest: requireUser }, async () => mediaConfig(services));
  };
}
