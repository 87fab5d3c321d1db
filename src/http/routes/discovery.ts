/** Discovery: which spec versions we speak, and where the homeserver is. No authentication. */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { ServerInfo } from '../../server-info.js';

/** The Client-Server API versions whose endpoints bots use that we serve (see docs/api-coverage.md). */
export const SUPPORTED_VERSIONS = [
  'r0.0.1', 'r0.1.0', 'r0.2.0', 'r0.3.0', 'r0.4.0', 'r0.5.0', 'r0.6.0', 'r0.6.1',
  'v1.1', 'v1.2', 'v1.3', 'v1.4', 'v1.5', 'v1.6', 'v1.7', 'v1.8', 'v1.9', 'v1.10', 'v1.11',
];

export function discoveryRoutes(server: ServerInfo): FastifyPluginAsyncTypebox {
  return async (app) => {
    /** GET /_matrix/client/versions */
    app.get('/_matrix/client/versions', async () => ({ versions: SUPPORTED_VERSIONS, unstable_features: {} }));

    /** GET /.well-known/matrix/client */
    app.get('/.well-known/matrix/client', async () => ({
      'm.homeserver': { base_url: server.publicBaseUrl },
    }));
  };
}
