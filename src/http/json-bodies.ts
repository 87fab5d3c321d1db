/**
 * Request bodies are JSON whatever the Content-Type says (Synapse reads them so, and some clients
 * send JSON as text/plain or with no type); an empty body is "no body", which routes that take none
 * accept and routes that need one answer with `M_NOT_JSON`.
 */
import type { FastifyInstance } from 'fastify';
import { MatrixError } from './errors.js';

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
      done(new MatrixError('M_NOT_JSON', 'Content not JSON.'), undefined);
    }
  });
}
