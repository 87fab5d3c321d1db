/**
 * Request bodies are JSON whatever the Content-Type says (Synapse reads them so, and some clients
 * send JSON as text/plain or with no type); an empty body is "no body", which routes that take none
 * accept and routes that need one answer with `M_NOT_JSON`. A body that is not JSON, or is nested
 * deeper than MAX_JSON_DEPTH, is refused only by routes that read a body (Synapse ignores the body
 * of, say, `POST /logout`); nothing a route stores can be deeper.
 */
import type { FastifyInstance } from 'fastify';
import { JsonTooDeepError, MAX_JSON_DEPTH, parseJsonSafely } from '../core/json.js';

/**
 * Federation bodies wrap events in a few levels more (a transaction's list of PDUs): they may nest
 * that much deeper, and each PDU is held to MAX_JSON_DEPTH when it is checked.
 */
const FEDERATION_JSON_DEPTH = MAX_JSON_DEPTH + 16;

/** Stands in for a body that did not parse, until a route's body validation refuses it. */
export const NOT_JSON: unique symbol = Symbol('body is not JSON');
/** Stands in for a body nested deeper than the limit (never parsed). */
export const TOO_DEEP: unique symbol = Symbol('body is nested too deeply');

/** JSON is UTF-8: a body that is not (a lone byte 0xff, a truncated sequence) is not JSON. */
const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

export function installJsonBodies(app: FastifyInstance): void {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (request, body, done) => {
    let text: string;
    try {
      text = strictUtf8.decode(body as Buffer);
    } catch {
      done(null, NOT_JSON);
      return;
    }
    if (text.trim().length === 0) {
      done(null, undefined);
      return;
    }
    try {
      done(null, parseJsonSafely(text, request.url.startsWith('/_matrix/federation/') ? FEDERATION_JSON_DEPTH : MAX_JSON_DEPTH));
    } catch (err) {
      done(null, err instanceof JsonTooDeepError ? TOO_DEEP : NOT_JSON);
    }
  });
}
