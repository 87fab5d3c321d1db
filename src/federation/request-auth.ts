/**
 * Authenticating requests from other servers ("Request Authentication"): the `Authorization:
 * X-Matrix origin=..,destination=..,key=..,sig=..` header carries the origin's signature over the
 * method, URI, origin, destination and body; it is checked with the origin's published keys.
 */
import { MatrixError } from '../core/errors.js';
import { canonicalJsonBytes } from '../core/canonical-json.js';
import { decodeBase64 } from '../core/signed-json.js';
import { ed25519Verify } from '../core/ed25519.js';
import { parseServerName } from './discovery.js';
import type { KeyRing } from './key-ring.js';

export interface XMatrixAuthorization {
  origin: string;
  destination: string | undefined;
  key: string;
  sig: string;
}

/**
 * Reads an X-Matrix header: comma-separated `name=value` pairs, values optionally in double quotes
 * with `\` escapes (the spec's `auth-param` grammar). Undefined when it is not one.
 */
export function parseXMatrix(header: string): XMatrixAuthorization | undefined {
  const match = /^X-Matrix\s+(.*)$/is.exec(header.trim());
  if (!match) return undefined;
  const params = new Map<string, string>();
  const text = match[1]!;
  let i = 0;
  while (i < text.length) {
    while (i < text.length && (text[i] === ',' || text[i] === ' ' || text[i] === '\t')) i++;
    const nameStart = i;
    while (i < text.length && text[i] !== '=' && text[i] !== ',') i++;
    const name = text.slice(nameStart, i).trim().toLowerCase();
    if (text[i] !== '=') {
      if (name) return undefined;
      break;
    }
    i++;
    let value = '';
    if (text[i] === '"') {
      i++;
      while (i < text.length && text[i] !== '"') {
        if (text[i] === '\\' && i + 1 < text.length) i++;
        value += text[i];
        i++;
      }
      if (text[i] !== '"') return undefined;
      i++;
    } else {
      const valueStart = i;
      while (i < text.length && text[i] !== ',') i++;
      value = text.slice(valueStart, i).trim();
    }
    if (name && !params.has(name)) params.set(name, value);
  }
  const origin = params.get('origin');
  const key = params.get('key');
  const sig = params.get('sig');
  if (!origin || !key || !sig) return undefined;
  return { origin, destination: params.get('destination'), key, sig };
}

export interface SignedRequest {
  method: string;
  /** The request target as sent: path and query, undecoded. */
  uri: string;
  authorization: string | string[] | undefined;
  /** The parsed JSON body, when there is one. */
  body: unknown;
}

/**
 * The origin of a signed request, or a 401: the header must parse, name us as the destination
 * (when it names one), and carry a valid signature by one of the origin's current keys. An origin
 * that is not a server name is 400.
 */
export async function authenticateRequest(request: SignedRequest, serverName: string, keyRing: KeyRing, now: number): Promise<string> {
  const headers = request.authorization === undefined ? [] : Array.isArray(request.authorization) ? request.authorization : [request.authorization];
  const candidates = headers.map(parseXMatrix).filter((auth): auth is XMatrixAuthorization => auth !== undefined);
  if (candidates.length === 0) throw new MatrixError('M_UNAUTHORIZED', 'Missing or malformed X-Matrix Authorization header');
  // An origin that is no server name (`localhost:http`) is a malformed header: 400, as Synapse
  // answers, and never a key lookup.
  if (candidates.some((auth) => parseServerName(auth.origin) === undefined)) {
    throw new MatrixError('M_UNAUTHORIZED', 'Malformed X-Matrix Authorization header: the origin is not a server name', { status: 400 });
  }
  for (const auth of candidates) {
    if (auth.destination !== undefined && auth.destination !== serverName) {
      throw new MatrixError('M_UNAUTHORIZED', `The request is for ${auth.destination}, not ${serverName}`);
    }
    if (auth.origin === serverName) throw new MatrixError('M_UNAUTHORIZED', 'The request claims to come from this server');
    const signed: Record<string, unknown> = { method: request.method, uri: request.uri, origin: auth.origin, destination: auth.destination ?? serverName };
    if (request.body !== undefined) signed.content = request.body;
    const signature = decodeBase64(auth.sig);
    if (!signature || signature.length !== 64 || !auth.key.startsWith('ed25519:')) continue;
    const keys = await keyRing.verifyKeys(auth.origin, [auth.key], now);
    const key = keys.get(auth.key);
    if (!key) continue;
    let bytes: Buffer;
    try {
      bytes = canonicalJsonBytes(signed, { lenient: true });
    } catch {
      continue;
    }
    if (ed25519Verify(bytes, key, signature)) return auth.origin;
  }
  throw new MatrixError('M_UNAUTHORIZED', 'Invalid X-Matrix signature');
}
