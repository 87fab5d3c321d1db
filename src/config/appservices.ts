/**
 * Application service registrations (Synapse's `app_service_config_files`): the YAML files an
 * operator installs so that a bridge or an appservice bot may act on this server. Read and checked
 * at start; an error names the file and the key, and two registrations may not share an id or a
 * token.
 */
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { compileNamespaceRegex } from './namespace-regex.js';

export interface Namespace {
  exclusive: boolean;
  /** As written in the registration. */
  regex: string;
  /** Matches from the start of the id, as Synapse's `re.match` does. */
  pattern: RegExp;
}

export interface AppServiceRegistration {
  /** The file it was read from, for messages. */
  file: string;
  id: string;
  /** Where transactions go; null: the appservice only uses the client API. */
  url: string | null;
  asToken: string;
  hsToken: string;
  senderLocalpart: string;
  namespaces: { users: Namespace[]; aliases: Namespace[]; rooms: Namespace[] };
  rateLimited: boolean;
  protocols: string[];
  receiveEphemeral: boolean;
}

export class RegistrationFileError extends Error {
  override name = 'RegistrationFileError';
}

/** Reads and checks every file; throws RegistrationFileError naming the file and key at the first problem. */
export function loadAppServiceRegistrations(files: readonly string[]): AppServiceRegistration[] {
  const registrations = files.map((file) => {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (err) {
      throw new RegistrationFileError(`app_service_config_files: cannot read ${file}: ${(err as Error).message}`);
    }
    return parseAppServiceRegistration(text, file);
  });
  // No two may share an id, a token (either kind) or a sender.
  const owners = { id: new Map<string, string>(), token: new Map<string, string>(), sender: new Map<string, string>() };
  for (const registration of registrations) {
    const claims: Array<[keyof typeof owners, string, string]> = [
      ['id', registration.id, 'id'],
      ['token', registration.asToken, 'as_token'],
      ['token', registration.hsToken, 'hs_token'],
      ['sender', registration.senderLocalpart, 'sender_localpart'],
    ];
    for (const [space, value, key] of claims) {
      const other = owners[space].get(value);
      if (other !== undefined) throw new RegistrationFileError(`${registration.file}: ${key} is also used by ${other}; every registration needs its own id, tokens and sender`);
      owners[space].set(value, registration.file);
    }
  }
  return registrations;
}

/** One registration file's contents, checked. */
export function parseAppServiceRegistration(text: string, file: string): AppServiceRegistration {
  let raw: unknown;
  try {
    raw = parseYaml(text);
  } catch (err) {
    throw new RegistrationFileError(`${file}: not valid YAML: ${(err as Error).message}`);
  }
  const fail = (key: string, problem: string): never => {
    throw new RegistrationFileError(`${file}: ${key} ${problem}`);
  };
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) fail('(the whole file)', 'must be a mapping of keys such as id, url, as_token');
  const doc = raw as Record<string, unknown>;
  const required = (key: string): string => {
    const value = doc[key];
    if (typeof value !== 'string' || value.length === 0) fail(key, 'is required and must be a non-empty string');
    return value as string;
  };
  const id = required('id');
  const asToken = required('as_token');
  const hsToken = required('hs_token');
  if (asToken === hsToken) fail('hs_token', 'must differ from as_token');
  const senderLocalpart = required('sender_localpart');
  if (!/^[a-z0-9._=\-/+]+$/.test(senderLocalpart)) fail('sender_localpart', "may only contain a-z, 0-9 and '._=-/+'");
  const url = doc.url;
  if (url !== null && url !== undefined && (typeof url !== 'string' || !/^https?:\/\/\S+$/.test(url))) fail('url', 'must be an http:// or https:// URL, or null');
  const rateLimited = doc.rate_limited ?? true;
  if (typeof rateLimited !== 'boolean') fail('rate_limited', 'must be true or false');
  const protocols = doc.protocols ?? [];
  if (!Array.isArray(protocols) || protocols.some((p) => typeof p !== 'string')) fail('protocols', 'must be a list of strings');
  // The stable name, and the name of MSC2409 that Synapse and bridges still write.
  const ephemeral = doc.receive_ephemeral ?? doc['de.sorunome.msc2409.push_ephemeral'] ?? false;
  if (typeof ephemeral !== 'boolean') fail('receive_ephemeral', 'must be true or false');
  const namespacesRaw = doc.namespaces ?? {};
  if (typeof namespacesRaw !== 'object' || namespacesRaw === null || Array.isArray(namespacesRaw)) fail('namespaces', 'must be a mapping with users, aliases and rooms');
  const namespaces = { users: [] as Namespace[], aliases: [] as Namespace[], rooms: [] as Namespace[] };
  for (const kind of ['users', 'aliases', 'rooms'] as const) {
    const list = (namespacesRaw as Record<string, unknown>)[kind] ?? [];
    if (!Array.isArray(list)) fail(`namespaces.${kind}`, 'must be a list of {exclusive, regex}');
    (list as unknown[]).forEach((entry, index) => {
      const where = `namespaces.${kind}[${index}]`;
      if (typeof entry !== 'object' || entry === null) fail(where, 'must be a mapping with exclusive and regex');
      const { exclusive, regex } = entry as Record<string, unknown>;
      if (typeof exclusive !== 'boolean') fail(`${where}.exclusive`, 'must be true or false');
      if (typeof regex !== 'string' || regex.length === 0) fail(`${where}.regex`, 'must be a non-empty regular expression');
      let pattern: RegExp;
      try {
        pattern = compileNamespaceRegex(regex as string);
      } catch (err) {
        return fail(`${where}.regex`, (err as Error).message);
      }
      namespaces[kind].push({ exclusive: exclusive as boolean, regex: regex as string, pattern });
    });
  }
  return {
    file,
    id,
    url: typeof url === 'string' ? url.replace(/\/+$/, '') : null,
    asToken,
    hsToken,
    senderLocalpart,
    namespaces,
    rateLimited: rateLimited as boolean,
    protocols: protocols as string[],
    receiveEphemeral: ephemeral as boolean,
  };
}
