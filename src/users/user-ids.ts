/** User ids: `@localpart:server_name`. Localparts follow Synapse's registration rule. */
import { MatrixError } from '../core/errors.js';

/** Synapse accepts these for new accounts: lower-case letters, digits and `._=-/+`. */
const LOCALPART_PATTERN = /^[a-z0-9._=\-/+]+$/;
/** The spec caps a full user id at 255 bytes. */
const MAX_USER_ID_LENGTH = 255;

export function userIdFor(localpart: string, serverName: string): string {
  return `@${localpart}:${serverName}`;
}

/**
 * Why a localpart cannot be registered, or null if it can. A leading `_` is kept for application
 * services (`byAppservice`), whose bridged users conventionally start with one (`_irc_alice`).
 */
export function localpartProblem(localpart: string, serverName: string, byAppservice = false): string | null {
  if (localpart.length === 0) return 'User ID cannot be empty';
  if (!LOCALPART_PATTERN.test(localpart)) return "User ID can only contain characters a-z, 0-9, or '=_-./+'";
  if (localpart.startsWith('_') && !byAppservice) return 'User ID may not begin with _';
  if (Buffer.byteLength(userIdFor(localpart, serverName)) > MAX_USER_ID_LENGTH) {
    return `User ID may not be longer than ${MAX_USER_ID_LENGTH} characters`;
  }
  return null;
}

export function assertValidLocalpart(localpart: string, serverName: string, byAppservice = false): void {
  const problem = localpartProblem(localpart, serverName, byAppservice);
  if (problem) throw new MatrixError('M_INVALID_USERNAME', problem);
}

/**
 * Reads what a person types as a user (`hello`, `@hello:server`) as a local user id, or null when
 * it names another server or is not a user id at all. Localparts are matched case-insensitively,
 * as Synapse does at login.
 */
export function resolveLocalUserId(input: string, serverName: string): string | null {
  const trimmed = input.trim();
  if (!trimmed.startsWith('@')) return trimmed ? userIdFor(trimmed.toLowerCase(), serverName) : null;
  const colon = trimmed.indexOf(':');
  if (colon < 2) return null;
  if (trimmed.slice(colon + 1) !== serverName) return null;
  return userIdFor(trimmed.slice(1, colon).toLowerCase(), serverName);
}

/** The localpart of a user id on this server, or null when it is not one of ours. */
export function localpartOf(userId: string, serverName: string): string | null {
  const suffix = `:${serverName}`;
  if (!userId.startsWith('@') || !userId.endsWith(suffix)) return null;
  const localpart = userId.slice(1, -suffix.length);
  return localpart.length > 0 ? localpart : null;
}
