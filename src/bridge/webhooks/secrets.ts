/**
 * Signing secrets of webhooks, and checking a request against one.
 *
 * HMAC signatures (GitHub, Gitea, Forgejo, Sentry) can only be checked with the secret itself, so
 * it cannot be stored as a one-way hash like the webhook id. It is stored sealed instead: AES-256-GCM
 * under a key derived from the webhook's id, which the database holds only as a hash. Reading the
 * secret takes the URL and the database together; either alone yields nothing.
 */
import { createCipheriv, createDecipheriv, createHash, createHmac, hkdfSync, randomBytes, timingSafeEqual } from 'node:crypto';

const SEAL_VERSION = 'v1';
const KEY_INFO = 'bot-homeserver webhook signing secret v1';
/** Secrets people bring (Sentry makes its own) must not be guessable. */
export const MIN_SECRET_LENGTH = 16;
export const MAX_SECRET_LENGTH = 256;

export function generateSecret(): string {
  return randomBytes(32).toString('base64url');
}

function keyFor(webhookId: string): Buffer {
  return Buffer.from(hkdfSync('sha256', webhookId, '', KEY_INFO, 32));
}

/** The secret sealed for storage; `idHash` binds it to its own webhook row. */
export function sealSecret(webhookId: string, idHash: string, secret: string): string {
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', keyFor(webhookId), iv);
  cipher.setAAD(Buffer.from(idHash));
  const sealed = Buffer.concat([cipher.update(secret, 'utf8'), cipher.final()]);
  return [SEAL_VERSION, iv.toString('base64url'), sealed.toString('base64url'), cipher.getAuthTag().toString('base64url')].join('.');
}

/** The secret, or undefined when the seal does not open with this id (it cannot, unless tampered). */
export function openSecret(webhookId: string, idHash: string, sealed: string): string | undefined {
  const [version, iv, data, tag] = sealed.split('.');
  if (version !== SEAL_VERSION || iv === undefined || data === undefined || tag === undefined) return undefined;
  try {
    const decipher = createDecipheriv('aes-256-gcm', keyFor(webhookId), Buffer.from(iv, 'base64url'));
    decipher.setAAD(Buffer.from(idHash));
    decipher.setAuthTag(Buffer.from(tag, 'base64url'));
    return Buffer.concat([decipher.update(Buffer.from(data, 'base64url')), decipher.final()]).toString('utf8');
  } catch {
    return undefined;
  }
}

export type SignatureCheck = { ok: true; scheme: string } | { ok: false; reason: 'missing' | 'mismatch'; scheme?: string };

type Headers = Readonly<Record<string, string | string[] | undefined>>;

interface Scheme {
  name: string;
  header: string;
  /** True when the header's value proves knowledge of the secret for this body. */
  verify(value: string, secret: string, rawBody: Buffer, parsed: () => unknown): boolean;
}

const hmacHex = (algorithm: 'sha256' | 'sha1', secret: string, data: Buffer | string) => createHmac(algorithm, secret).update(data).digest('hex');

/** The hex digest given, against the one expected; constant time, any case. */
function sameHex(given: string, expected: string): boolean {
  return sameText(given.trim().toLowerCase(), expected);
}

/** Compared as SHA-256 digests: equal lengths always, so not even the secret's length leaks. */
function sameText(given: string, expected: string): boolean {
  return timingSafeEqual(createHash('sha256').update(given).digest(), createHash('sha256').update(expected).digest());
}

function prefixed(prefix: string, algorithm: 'sha256' | 'sha1') {
  return (value: string, secret: string, rawBody: Buffer) =>
    value.trim().toLowerCase().startsWith(prefix) && sameHex(value.trim().slice(prefix.length), hmacHex(algorithm, secret, rawBody));
}

const plainHmac = (value: string, secret: string, rawBody: Buffer) => sameHex(value, hmacHex('sha256', secret, rawBody));

/** The ways senders prove they know the secret, most specific first. */
const SCHEMES: Scheme[] = [
  { name: 'X-Hub-Signature-256', header: 'x-hub-signature-256', verify: prefixed('sha256=', 'sha256') },
  { name: 'X-Forgejo-Signature', header: 'x-forgejo-signature', verify: plainHmac },
  { name: 'X-Gitea-Signature', header: 'x-gitea-signature', verify: plainHmac },
  { name: 'X-Gogs-Signature', header: 'x-gogs-signature', verify: plainHmac },
  {
    name: 'Sentry-Hook-Signature',
    header: 'sentry-hook-signature',
    // Sentry signs the JSON it sends; its own examples re-serialize the parsed body, so accept either.
    verify: (value, secret, rawBody, parsed) => {
      if (plainHmac(value, secret, rawBody)) return true;
      const body = parsed();
      return body !== undefined && sameHex(value, hmacHex('sha256', secret, JSON.stringify(body)));
    },
  },
  { name: 'X-Gitlab-Token', header: 'x-gitlab-token', verify: (value, secret) => sameText(value, secret) },
  { name: 'Authorization', header: 'authorization', verify: (value, secret) => authorizationHolds(value, secret) },
  // GitHub's older SHA-1 signature, for senders that only send that one.
  { name: 'X-Hub-Signature', header: 'x-hub-signature', verify: prefixed('sha1=', 'sha1') },
];

/** `Bearer <secret>`, or Basic auth with the secret as password (any user name). */
function authorizationHolds(value: string, secret: string): boolean {
  const match = /^(\S+)\s+(.*)$/s.exec(value.trim());
  const credentials = match?.[2] ?? '';
  switch (match?.[1]?.toLowerCase()) {
    case 'bearer':
      return sameText(credentials, secret);
    case 'basic': {
      const decoded = Buffer.from(credentials, 'base64').toString('utf8');
      const colon = decoded.indexOf(':');
      return colon >= 0 && sameText(decoded.slice(colon + 1), secret);
    }
    default:
      return false;
  }
}

/**
 * Checks a request against the webhook's secret, by the first proof it carries. Forgejo sends
 * several (all valid); a forger gains nothing by choosing one, as each needs the secret. `parsed`
 * reads the body as JSON (undefined when it is not), only if a scheme needs it.
 */
export function checkSignature(secret: string, headers: Headers, rawBody: Buffer, parsed: () => unknown): SignatureCheck {
  for (const scheme of SCHEMES) {
    const raw = headers[scheme.header];
    const value = Array.isArray(raw) ? raw[0] : raw;
    if (value === undefined || value === '') continue;
    return scheme.verify(value, secret, rawBody, parsed) ? { ok: true, scheme: scheme.name } : { ok: false, reason: 'mismatch', scheme: scheme.name };
  }
  return { ok: false, reason: 'missing' };
}
