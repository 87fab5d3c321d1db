/** GET /capabilities: what this server lets a user do. */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { Services } from '../../services.js';
import { DEFAULT_ROOM_VERSION, SUPPORTED_ROOM_VERSIONS } from '../../rooms/room-versions.js';
import { authenticate, GUEST_ROUTE, requesterOf } from '../auth.js';

const ROOM_VERSIONS = {
  default: DEFAULT_ROOM_VERSION,
  available: Object.fromEntries(SUPPORTED_ROOM_VERSIONS.map((version) => [version, 'stable'])),
};

export function capabilitiesRoutes(services: Services): FastifyPluginAsyncTypebox {
  return async (app) => {
    /** GET /capabilities */
    app.get('/capabilities', { ...GUEST_ROUTE, onRequest: authenticate(services.sessions) }, async (request) => ({
      capabilities: {
        'm.room_versions': ROOM_VERSIONS,
        // People change their own password; a bot's is its secret, which the operator rotates.
        'm.change_password': { enabled: await services.accounts.mayChangeOwnPassword(requesterOf(request).userId) },
        'm.set_displayname': { enabled: true },
        'm.set_avatar_url': { enabled: true },
        'm.3pid_changes': { enabled: false },
        'm.get_login_token': { enabled: false },
      },
    }));
  };
}
