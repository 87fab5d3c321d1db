/**
 * What other servers ask of this one without signing: its keys (and, as a notary, other servers'
 * keys it has seen), its version, and where it is (`/.well-known/matrix/server`, when
 * `serve_server_wellknown` is on).
 */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { Services } from '../../services.js';
import { VERSION } from '../../version.js';

const MinimumValidUntil = Type.Object({ minimum_valid_until_ts: Type.Optional(Type.Integer()) }, { additionalProperties: true });
const KeyQueryBody = Type.Object({
  server_keys: Type.Record(Type.String(), Type.Record(Type.String(), MinimumValidUntil), { maxProperties: 100 }),
});

export function federationKeyRoutes(services: Services): FastifyPluginAsyncTypebox {
  const { federation, config } = services;
  return async (app) => {
    /** GET /_matrix/key/v2/server: this server's signing keys, signed. */
    app.get('/_matrix/key/v2/server', async () => federation.keyRing.ownKeyListing());
    // The old form with a key id is still asked for by some servers; the answer is the same.
    app.get('/_matrix/key/v2/server/:keyId', { schema: { params: Type.Object({ keyId: Type.String() }) } }, async () => federation.keyRing.ownKeyListing());

    /** POST /_matrix/key/v2/query: keys of several servers, as this server (a notary) has seen them. */
    app.post('/_matrix/key/v2/query', { schema: { body: KeyQueryBody } }, async (request) => {
      const listings = await Promise.all(
        Object.entries(request.body.server_keys).map(async ([server, keys]) => {
          const minimum = Math.max(0, ...Object.values(keys).map((key) => key.minimum_valid_until_ts ?? 0));
          return federation.keyRing.notaryListings(server, minimum, Object.keys(keys).slice(0, 20)).catch(() => []);
        }),
      );
      return { server_keys: listings.flat() };
    });

    /** GET /_matrix/key/v2/query/{serverName}, and the old form naming a key id (still asked by some servers, SyTest). */
    const NotaryQuery = Type.Object({ minimum_valid_until_ts: Type.Optional(Type.Integer()) });
    const notaryGet = async (serverName: string, keyIds: string[], minimum: number | undefined) => {
      return { server_keys: await federation.keyRing.notaryListings(serverName, minimum ?? 0, keyIds).catch(() => []) };
    };
    app.get(
      '/_matrix/key/v2/query/:serverName',
      { schema: { params: Type.Object({ serverName: Type.String({ maxLength: 255 }) }), querystring: NotaryQuery } },
      async (request) => notaryGet(request.params.serverName, [], request.query.minimum_valid_until_ts),
    );
    app.get(
      '/_matrix/key/v2/query/:serverName/:keyId',
      { schema: { params: Type.Object({ serverName: Type.String({ maxLength: 255 }), keyId: Type.String({ maxLength: 255 }) }), querystring: NotaryQuery } },
      async (request) => notaryGet(request.params.serverName, [request.params.keyId], request.query.minimum_valid_until_ts),
    );

    /** GET /_matrix/federation/v1/version: no authentication. */
    app.get('/_matrix/federation/v1/version', async () => ({ server: { name: 'bot-homeserver', version: VERSION } }));

    if (config.serve_server_wellknown) {
      /** GET /.well-known/matrix/server: delegation to public_baseurl's host (port 443 unless it says otherwise). */
      app.get('/.well-known/matrix/server', async (_request, reply) => {
        const base = new URL(services.config.public_baseurl ?? `https://${config.server_name}/`);
        reply.header('Cache-Control', 'max-age=86400');
        return { 'm.server': `${base.hostname}:${base.port || (base.protocol === 'http:' ? '80' : '443')}` };
      });
    }
  };
}
