/**
 * `m.room.server_acl` (Client-Server API, "Server Access Control Lists"): which servers a room
 * takes events and requests from. Deny wins over allow; no allow entry matches means denied;
 * IP literals are denied unless `allow_ip_literals` is true (its default). Globs: `*` any run of
 * characters, `?` one; the port is not part of the name compared.
 */
import type { StateLookup } from './auth-rules.js';

export function serverAllowedByAcl(state: StateLookup, serverName: string): boolean {
  const acl = state('m.room.server_acl', '')?.content;
  if (!acl) return true;
  const host = hostOf(serverName).toLowerCase();
  const allowIpLiterals = acl.allow_ip_literals !== false;
  if (!allowIpLiterals && isIpLiteral(host)) return false;
  if (globs(acl.deny).some((glob) => glob.test(host))) return false;
  return globs(acl.allow).some((glob) => glob.test(host));
}

function hostOf(serverName: string): string {
  if (serverName.startsWith('[')) {
    const end = serverName.indexOf(']');
    return end === -1 ? serverName : serverName.slice(0, end + 1);
  }
  const colon = serverName.lastIndexOf(':');
  return colon === -1 ? serverName : serverName.slice(0, colon);
}

function isIpLiteral(host: string): boolean {
  return host.startsWith('[') || /^\d{1,3}(\.\d{1,3}){3}$/.test(host);
}

const compiled = new Map<string, RegExp>();

function globs(value: unknown): RegExp[] {
  if (!Array.isArray(value)) return [];
  return value.filter((entry): entry is string => typeof entry === 'string').map(globToRegExp);
}

function globToRegExp(glob: string): RegExp {
  let regexp = compiled.get(glob);
  if (!regexp) {
    const body = glob
      .toLowerCase()
      .split('')
      .map((char) => (char === '*' ? '.*' : char === '?' ? '.' : char.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')))
      .join('');
    regexp = new RegExp(`^${body}$`, 's');
    if (compiled.size > 1000) compiled.clear();
    compiled.set(glob, regexp);
  }
  return regexp;
}
