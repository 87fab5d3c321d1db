/**
 * Request bodies are JSON whatever the Content-Type says (Synapse reads them so, and some clients
 * send JSON as text/plain or with no type); an empty body is "no body", which routes that take none
 * accept and routes that need one answer with `M_NOT_JSON`. A body that is not JSON is refused
 * only by routes that read a body (Synapse ignores the body of, say, `POST /logout`).
 */
import type { FastifyInstance } from 'fastify';

/** Stands in for a body that did not parse, until a route's body validation refuses it. */
export const NOT_JSON: unique symbol = Symbol('body is not JSON');

export function installJsonBodies(app: FastifyInstance): void {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'string' }, (_request, body, done) => {
    const text = body as string;
    if (text.trim().length === 0) {
      done(null, undefined);
      return;
    }
    try {
      done(null, JSON.parse(text));
    } catch {
      done(null, NOT_JSON);
    }
  });
}
