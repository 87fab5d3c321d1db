/**
 * Request bodies are JSON whatever the Content-Type says (Synapse reads them so, and some clients
 * send JSON as text/plain or with no type); an empty body is "no body", which routes that take none
 * accept and routes that need one answer with `M_NOT_JSON`. A body that is not JSON is refused
 * only by routes that read a body (Synapse ignores the body of, say, `POST /logout`).
 */
import type { FastifyInstance } from 'fastify';
import secureJson from 'secure-json-parse';

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
      done(null, parseJsonSafely(text));
    } catch {
      done(null, NOT_JSON);
    }
  });
}

/**
 * JSON.parse that drops `__proto__` keys (and `constructor.prototype`): such keys in event content
 * or filters would otherwise reach object prototypes when the server copies or projects them.
 * Throws on text that is not JSON.
 */
export function parseJsonSafely(text: string): unknown {
  return secureJson.parse(text, undefined, { protoAction: 'remove', constructorAction: 'remove' });
}
