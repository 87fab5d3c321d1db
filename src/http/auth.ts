/**
 * Access-token authentication. Clients send the token as `Authorization: Bearer <token>` (the
 * JS SDKs) or as `?access_token=` (matrix-nio and old scripts); both are accepted.
 */
import type { FastifyRequest } from 'fastify';
import { MatrixError } from '../core/errors.js';
import type { Requester, SessionService } from '../users/session-service.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** Set by `authenticate` on routes that need a user. */
    requester: Requester | null;
  }
  interface FastifyContextConfig {
    /**
     * The route serves guest accounts too (Synapse's `allow_guest=True` servlets: see
     * `GUEST_ROUTE`). On every other authenticated route a guest gets 403 `M_GUEST_ACCESS_FORBIDDEN`.
     */
    allowGuest?: boolean;
  }
}

/** Route options of a route open to guests: `app.get(path, { ...GUEST_ROUTE, ... }, handler)`. */
export const GUEST_ROUTE = { config: { allowGuest: true } } as const;

export function extractAccessToken(request: FastifyRequest): string | null {
  const header = request.headers.authorization;
  const query = (request.query as Record<string, unknown> | undefined)?.access_token;
  const fromQuery = typeof query === 'string' && query.length > 0 ? query : null;
  if (header !== undefined) {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
    if (!match) throw new MatrixError('M_MISSING_TOKEN', 'Invalid Authorization header.');
    if (fromQuery !== null) {
      throw new MatrixError('M_MISSING_TOKEN', 'Mixing Authorization headers and access_token query parameters.');
    }
    return match[1]!;
  }
  return fromQuery;
}

/**
 * An onRequest hook that requires a valid access token and sets `request.requester`. It runs
 * before the body is read or validated: an anonymous caller learns nothing about the endpoint.
 */
export function authenticate(sessions: SessionService) {
  return async function requireAccessToken(request: FastifyRequest): Promise<void> {
    const token = extractAccessToken(request);
    if (token === null) throw new MatrixError('M_MISSING_TOKEN', 'Missing access token');
    // An application service names the user it acts as (its as_token only; others are refused it).
    const userId = (request.query as Record<string, unknown> | undefined)?.user_id;
    const userAgent = request.headers['user-agent'];
    const requester = await sessions.authenticate(token, typeof userId === 'string' ? userId : undefined, { ip: request.ip, userAgent });
    assertGuestAllowed(request, requester);
    request.requester = requester;
  };
}

/** Guests reach only the routes marked `allowGuest` (Synapse's `Guest access not allowed`). */
export function assertGuestAllowed(request: FastifyRequest, requester: Requester): void {
  if (requester.isGuest && request.routeOptions.config.allowGuest !== true) {
    throw new MatrixError('M_GUEST_ACCESS_FORBIDDEN', 'Guest access not allowed');
  }
}

/** The authenticated user of a request whose route used `authenticate`. */
export function requesterOf(request: FastifyRequest): Requester {
  if (!request.requester) throw new Error('route is missing the authenticate hook');
  return request.requester;
}
