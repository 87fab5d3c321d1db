/** GET /capabilities: what this server lets a user do. */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { Services } from '../../services.js';
import { authenticate } from '../auth.js';

/** Room versions this server can create and join; 10 is the default (its create event carries `creator`). */
export const ROOM_VERSIONS = { default: '10', available: { '10': 'stable' } } as const;

export function capabilitiesRoutes(services: Services): FastifyPluginAsyncTypebox {
  return async (app) => {
    /** GET /capabilities */
    app.get('/capabilities', { onRequest: authenticate(services.sessions) }, async () => ({
      capabilities: {
        'm.room_versions': ROOM_VERSIONS,
        // Bots get their passwords from the operator; changing them is the operator's job.
        'm.change_password': { enabled: false },
        'm.set_displayname': { enabled: true },
        'm.set_avatar_url': { enabled: true },
        'm.3pid_changes': { enabled: false },
        'm.get_login_token': { enabled: false },
      },
    }));
  };
}
