/**
 * Loads the configuration: YAML file, then environment overrides, then defaults and validation.
 * A bad value fails here, at start, with a message that names the key.
 */
import { existsSync, readFileSync } from 'node:fs';
import { resolve as resolvePath } from 'node:path';
import { Value } from '@sinclair/typebox/value';
import { Ajv, type ErrorObject } from 'ajv';
import { parse as parseYaml, YAMLParseError } from 'yaml';
import { ConfigSchema, EXPECTED, type AttributeRequirement, type Config, type PortalConfig, type RawConfig } from './schema.js';
import { parseDuration } from './duration.js';
import { loadAppServiceRegistrations, RegistrationFileError, type AppServiceRegistration } from './appservices.js';
import { DEFAULT_IP_RANGE_BLACKLIST, invalidRanges } from '../net/address-guard.js';
import { nearest } from '../core/edit-distance.js';
import { compileNamespaceRegex } from './namespace-regex.js';

/** Prefix of environment variables that override config keys; `__` separates nesting levels. */
export const ENV_PREFIX = 'BOT_HOMESERVER_';
/** Environment variable naming the config file when `--config` is not given. */
export const CONFIG_FILE_ENV = `${ENV_PREFIX}CONFIG`;

/** The config file an operator command uses when neither `--config` nor the variable names one. */
export const DEFAULT_CONFIG_FILE = 'homeserver.yaml';

/** Which config file a command uses, and why, in words for the operator. */
export interface ConfigSource {
  file: string | undefined;
  description: string;
}

/**
 * `--config`, else `$BOT_HOMESERVER_CONFIG`, else `./homeserver.yaml` when it exists, else the
 * built-in defaults. The server and the operator commands find their config the same way, so a
 * command run beside a server uses the server's database.
 */
export function findConfigFile(option: string | undefined, env: NodeJS.ProcessEnv = process.env, cwd = process.cwd()): ConfigSource {
  // Variables that set keys are named too: "built-in defaults" alone hid a database URL given so.
  const variables = overrideVariables(env);
  const withVariables = (source: ConfigSource): ConfigSource =>
    variables.length === 0 ? source : { ...source, description: `${source.description}, with ${variables.map((name) => `$${name}`).join(', ')} from the environment` };
  if (option) return withVariables({ file: option, description: `${option} (--config)` });
  const fromEnv = env[CONFIG_FILE_ENV];
  if (fromEnv) return withVariables({ file: fromEnv, description: `${fromEnv} ($${CONFIG_FILE_ENV})` });
  const local = resolvePath(cwd, DEFAULT_CONFIG_FILE);
  if (existsSync(local)) return withVariables({ file: local, description: `${local} (found in the working directory)` });
  return withVariables({
    file: undefined,
    description: `built-in defaults (no --config, no $${CONFIG_FILE_ENV}, no ./${DEFAULT_CONFIG_FILE})`,
  });
}

/** The environment variables that set config keys (their names only: values may be secrets). */
function overrideVariables(env: NodeJS.ProcessEnv): string[] {
  return Object.keys(env)
    .filter((name) => isOverride(name, env[name]))
    .sort();
}

function isOverride(name: string, value: string | undefined): boolean {
  // An empty variable is an unset one (`FOO= cmd` is how shells clear a value).
  return name.startsWith(ENV_PREFIX) && name !== CONFIG_FILE_ENV && value !== undefined && value !== '';
}

export class ConfigError extends Error {
  override name = 'ConfigError';
}

export interface LoadConfigOptions {
  /** Path of a YAML config file; no file means defaults plus environment. */
  file?: string | undefined;
  /** Environment to read overrides from (defaults to `process.env`). */
  env?: NodeJS.ProcessEnv;
  /** Values applied over the file and the environment (used by tests and the test double). */
  overrides?: Record<string, unknown>;
}

// Run once per start: ajv's code optimizer would cost more than it could ever save here, and
// checking our own schema against the JSON Schema meta-schema would take as long as compiling it.
const ajv = new Ajv({ useDefaults: true, allErrors: true, verbose: true, allowUnionTypes: true, strict: false, validateSchema: false, code: { optimize: false } });
const validateConfig = ajv.compile<RawConfig>(ConfigSchema);

export function loadConfig(options: LoadConfigOptions = {}): Config {
  const env = options.env ?? process.env;
  const file = options.file ?? env[CONFIG_FILE_ENV];
  const fromFile = file ? readConfigFile(file) : {};
  // Environment values arrive as text; converting them by the schema reads "8008" as a number
  // where a number is expected and leaves a digits-only secret a string where a string is.
  const envSources = new Map<string, string>();
  const fromEnv = Value.Convert(ConfigSchema, envOverrides(env, envSources)) as Record<string, unknown>;
  const merged = deepMerge(deepMerge(fromFile, fromEnv), options.overrides ?? {});
  return finishConfig(merged, envSources);
}

/** Validates a plain object as configuration, applying defaults. */
export function finishConfig(raw: Record<string, unknown>, envSources: ReadonlyMap<string, string> = new Map()): Config {
  const candidate = structuredClone(raw);
  if (!validateConfig(candidate)) {
    throw new ConfigError(`invalid configuration:\n${describeErrors(validateConfig.errors ?? [], envSources)}`);
  }
  const config = candidate as RawConfig;
  const finished: Config = {
    ...config,
    listen: { ...config.listen, request_timeout: durationOrNull('listen.request_timeout', config.listen.request_timeout) ?? 0 },
    database: { ...config.database, statement_timeout: durationOrNull('database.statement_timeout', config.database.statement_timeout) ?? 0 },
    refreshable_access_token_lifetime: durationOrNull(
      'refreshable_access_token_lifetime',
      config.refreshable_access_token_lifetime,
    ),
    nonrefreshable_access_token_lifetime: durationOrNull(
      'nonrefreshable_access_token_lifetime',
      config.nonrefreshable_access_token_lifetime,
    ),
    refresh_token_lifetime: durationOrNull('refresh_token_lifetime', config.refresh_token_lifetime),
    max_sync_timeout: durationOrNull('max_sync_timeout', config.max_sync_timeout) ?? 0,
    max_upload_size: parseSize(config.max_upload_size),
    media_retention: { remote_media_lifetime: durationOrNull('media_retention.remote_media_lifetime', config.media_retention.remote_media_lifetime) },
    media: {
      ...config.media,
      remote_fetch_queue_timeout: durationOrNull('media.remote_fetch_queue_timeout', config.media.remote_fetch_queue_timeout) ?? 0,
      max_remote_cache_size: config.media.max_remote_cache_size === null ? null : parseSize(config.media.max_remote_cache_size),
    },
    key_refresh_interval: durationOrNull('key_refresh_interval', config.key_refresh_interval) ?? 0,
    push: {
      ...config.push,
      request_timeout: durationOrNull('push.request_timeout', config.push.request_timeout) ?? 0,
      min_retry_interval: durationOrNull('push.min_retry_interval', config.push.min_retry_interval) ?? 0,
      max_retry_interval: durationOrNull('push.max_retry_interval', config.push.max_retry_interval) ?? 0,
      give_up_after: durationOrNull('push.give_up_after', config.push.give_up_after) ?? 0,
    },
    federation: {
      ...config.federation,
      request_timeout: durationOrNull('federation.request_timeout', config.federation.request_timeout) ?? 0,
      min_retry_interval: durationOrNull('federation.min_retry_interval', config.federation.min_retry_interval) ?? 0,
      max_retry_interval: durationOrNull('federation.max_retry_interval', config.federation.max_retry_interval) ?? 0,
      inbound_fetch: { ...config.federation.inbound_fetch, deadline: durationOrNull('federation.inbound_fetch.deadline', config.federation.inbound_fetch.deadline) ?? 0 },
      backfill: { ...config.federation.backfill, messages_wait: durationOrNull('federation.backfill.messages_wait', config.federation.backfill.messages_wait) ?? 0 },
    },
    ip_range_blacklist: checkedRanges('ip_range_blacklist', config.ip_range_blacklist ?? [...DEFAULT_IP_RANGE_BLACKLIST]),
    app_services: appServicesOf(config.app_service_config_files),
    portal: config.portal === undefined ? undefined : portalConfig(config.portal),
  };
  checkedRanges('ip_range_whitelist', finished.ip_range_whitelist);
  checkedRanges('metrics.allowed_addresses', finished.metrics.allowed_addresses);
  checkBridgeUser(finished);
  return finished;
}

/** The portal's durations in milliseconds, its pattern checked, client secrets read from their files. */
function portalConfig(portal: NonNullable<RawConfig['portal']>): PortalConfig {
  const ids = new Set<string>();
  const providers = portal.oidc_providers.map((provider, index) => {
    const key = `portal.oidc_providers[${index}]`;
    if (ids.has(provider.idp_id)) throw new ConfigError(`invalid configuration:\n  ${key}.idp_id: ${provider.idp_id} is used twice`);
    ids.add(provider.idp_id);
    for (const requirement of provider.attribute_requirements) checkRequirement(`${key}.attribute_requirements`, requirement);
    let clientSecret = provider.client_secret ?? null;
    if (provider.client_secret_path) {
      try {
        clientSecret = readFileSync(provider.client_secret_path, 'utf8').trim();
      } catch (err) {
        throw new ConfigError(`${key}.client_secret_path: cannot read ${provider.client_secret_path} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
      }
    }
    if (provider.client_auth_method !== 'none' && !clientSecret) {
      throw new ConfigError(`invalid configuration:\n  ${key}: client_secret (or client_secret_path) is needed unless client_auth_method is none`);
    }
    return { ...provider, client_secret: clientSecret };
  });
  for (const requirement of portal.creator_attribute_requirements ?? []) checkRequirement('portal.creator_attribute_requirements', requirement);
  if (!portal.bot_username_pattern.startsWith('^') || !portal.bot_username_pattern.endsWith('$')) {
    throw new ConfigError('invalid configuration:\n  portal.bot_username_pattern: must match the whole name (start with ^ and end with $)');
  }
  try {
    compileNamespaceRegex(portal.bot_username_pattern);
  } catch (err) {
    throw new ConfigError(`invalid configuration:\n  portal.bot_username_pattern: ${(err as Error).message}`);
  }
  return {
    ...portal,
    oidc_providers: providers,
    session_lifetime: durationOrNull('portal.session_lifetime', portal.session_lifetime) ?? 0,
    session_idle_timeout: durationOrNull('portal.session_idle_timeout', portal.session_idle_timeout) ?? 0,
  };
}

function checkRequirement(key: string, requirement: AttributeRequirement): void {
  if ((requirement.value === undefined) === (requirement.one_of === undefined)) {
    throw new ConfigError(`invalid configuration:\n  ${key}: each requirement has an attribute and either value or one_of`);
  }
}

/**
 * The bridge user belongs either to this server's own bridge or to an appservice (the bridge run
 * as `bot-homeserver bridge` for this server): both would answer every command.
 */
function checkBridgeUser(config: Config): void {
  if (!config.bridge.enabled) return;
  const bridgeUser = `@${config.bridge.localpart}:${config.server_name}`;
  const claimed = config.app_services.find(
    (registration) => registration.senderLocalpart === config.bridge.localpart || registration.namespaces.users.some((namespace) => namespace.exclusive && namespace.pattern.test(bridgeUser)),
  );
  if (claimed) {
    throw new ConfigError(
      `${claimed.file}: the appservice claims ${bridgeUser}, the user of this server's own bridge; to run the bridge as this appservice (bot-homeserver bridge), set bridge.enabled: false here`,
    );
  }
}

function appServicesOf(files: string[]): AppServiceRegistration[] {
  try {
    return loadAppServiceRegistrations(files);
  } catch (err) {
    if (err instanceof RegistrationFileError) throw new ConfigError(`invalid application service registration: ${err.message}`);
    throw err;
  }
}

/** Synapse-style sizes: bytes, or a number with K, M or G (powers of 1024, as Synapse reads them). */
export function parseSize(value: string | number): number {
  if (typeof value === 'number') return value;
  const match = /^([0-9]+)([KMG]?)$/.exec(value.trim());
  if (!match) throw new ConfigError(`not a size: ${value}`);
  const unit = { '': 1, K: 1024, M: 1024 ** 2, G: 1024 ** 3 }[match[2] as '' | 'K' | 'M' | 'G'];
  return Number(match[1]) * unit;
}

function checkedRanges(key: string, ranges: string[]): string[] {
  const invalid = invalidRanges(ranges);
  if (invalid.length > 0) throw new ConfigError(`invalid configuration:\n  ${key}: not IP ranges (CIDR): ${invalid.join(', ')}`);
  return ranges;
}

function durationOrNull(key: string, value: string | number | null): number | null {
  if (value === null) return null;
  const ms = parseDuration(value);
  if (ms <= 0) throw new ConfigError(`invalid configuration:\n  ${key}: must be longer than zero (or null for never)`);
  return ms;
}

function readConfigFile(file: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new ConfigError(`cannot read config file ${file}: ${(err as Error).message}`);
  }
  let parsed: unknown;
  try {
    parsed = parseYaml(text);
  } catch (err) {
    const where = err instanceof YAMLParseError && err.linePos ? ` (line ${err.linePos[0].line})` : '';
    throw new ConfigError(`config file ${file} is not valid YAML${where}: ${(err as Error).message}`);
  }
  if (parsed === null || parsed === undefined) return {};
  if (!isPlainObject(parsed)) throw new ConfigError(`config file ${file} must be a YAML mapping of keys`);
  return parsed;
}

/**
 * `BOT_HOMESERVER_LISTEN__PORT=0` sets `listen.port`. Values are text, converted to the key's type
 * by the caller; `null` sets a key to null. Unknown keys are reported like file keys.
 */
function envOverrides(env: NodeJS.ProcessEnv, sources: Map<string, string>): Record<string, unknown> {
  const result: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(env)) {
    if (!isOverride(name, value) || value === undefined) continue;
    const path = name.slice(ENV_PREFIX.length).toLowerCase().split('__');
    let target = result;
    for (const key of path.slice(0, -1)) {
      const next = target[key];
      target = isPlainObject(next) ? next : (target[key] = {});
    }
    target[path[path.length - 1]!] = value === 'null' ? null : value;
    sources.set(path.join('.'), name);
  }
  return result;
}

/**
 * One sentence per wrong key, in the words an operator reads: what the key must be (the schema's
 * `EXPECTED` text where it has one, never a regex or a list of union branches), the value given,
 * a "did you mean" for an unknown key, and the environment variable when one set it.
 */
function describeErrors(errors: ErrorObject[], envSources: ReadonlyMap<string, string>): string {
  const byKey = new Map<string, ErrorObject[]>();
  for (const error of errors) {
    const key = error.instancePath.slice(1).replaceAll('/', '.');
    const keyed = error.keyword === 'additionalProperties' ? joinKey(key, (error.params as { additionalProperty: string }).additionalProperty) : key;
    byKey.set(keyed, [...(byKey.get(keyed) ?? []), error]);
  }
  const lines: string[] = [];
  for (const [key, keyErrors] of byKey) {
    const variable = envSources.get(key);
    const where = variable ? `${variable} (${key})` : key || '(top level)';
    lines.push(`  ${where}: ${describeKeyErrors(keyErrors, key, variable !== undefined)}`);
  }
  return lines.join('\n');
}

function describeKeyErrors(errors: ErrorObject[], key: string, fromEnv: boolean): string {
  const unknown = errors.find((e) => e.keyword === 'additionalProperties');
  if (unknown) {
    const name = (unknown.params as { additionalProperty: string }).additionalProperty;
    const known = Object.keys((unknown.parentSchema as { properties?: Record<string, unknown> } | undefined)?.properties ?? {});
    const parents = key.split('.').slice(0, -1);
    // `BOT_HOMESERVER_LISTEN_PORT` is `listen_port`, one unknown key: the `__` that nests was meant.
    const nested = splitNested(name.toLowerCase(), unknown.parentSchema);
    if (nested) {
      const path = [...parents, ...nested];
      return fromEnv
        ? `unknown key; did you mean ${ENV_PREFIX + path.join('__').toUpperCase()}? (a double underscore, __, separates nesting levels)`
        : `unknown key; did you mean ${path.join('.')}?`;
    }
    const suggestion = nearest(name, known);
    if (!suggestion) return 'unknown key';
    const path = [...parents, suggestion];
    return `unknown key; did you mean ${fromEnv ? ENV_PREFIX + path.join('__').toUpperCase() : path.join('.')}?`;
  }
  // The outermost schema that says what it expects (a union's own text wins over its branches').
  const described = errors
    .filter((e) => typeof (e.parentSchema as Record<string, unknown> | undefined)?.[EXPECTED] === 'string')
    .sort((x, y) => x.schemaPath.length - y.schemaPath.length)[0];
  const given = errors[0]?.data;
  if (described) return `${shown(given)} is not ${(described.parentSchema as Record<string, string>)[EXPECTED]}`;
  const error = errors.find((e) => e.keyword !== 'anyOf') ?? errors[0]!;
  const params = error.params as Record<string, unknown>;
  switch (error.keyword) {
    case 'enum':
      return `${shown(given)} is not one of ${(params.allowedValues as unknown[]).map((v) => JSON.stringify(v)).join(', ')}`;
    case 'type':
      return `${shown(given)} is not ${TYPE_WORDS[String(params.type)] ?? String(params.type)}`;
    case 'minimum':
      return `${shown(given)} is less than the smallest allowed value, ${String(params.limit)}`;
    case 'maximum':
      return `${shown(given)} is more than the largest allowed value, ${String(params.limit)}`;
    case 'minLength':
      return 'must not be empty';
    case 'maxLength':
      return `is longer than ${String(params.limit)} characters`;
    case 'required':
      return `${String(params.missingProperty)} is missing`;
    default:
      return `${shown(given)} is not valid here (${error.message ?? 'invalid'})`;
  }
}

const TYPE_WORDS: Record<string, string> = {
  integer: 'a whole number',
  number: 'a number',
  boolean: 'true or false',
  string: 'text',
  array: 'a list',
  object: 'a mapping of keys',
  null: 'null',
};

function shown(value: unknown): string {
  if (value === undefined) return 'the value';
  const text = JSON.stringify(value);
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}

function joinKey(parent: string, child: string): string {
  return parent ? `${parent}.${child}` : child;
}

/** The keys a schema allows, looking into a union's branches (an object or null, say). */
function propertiesOf(schema: unknown): Record<string, unknown> | undefined {
  if (!isPlainObject(schema)) return undefined;
  if (isPlainObject(schema['properties'])) return schema['properties'];
  if (!Array.isArray(schema['anyOf'])) return undefined;
  const merged = Object.assign({}, ...schema['anyOf'].map((branch) => propertiesOf(branch) ?? {})) as Record<string, unknown>;
  return Object.keys(merged).length > 0 ? merged : undefined;
}

/** `listen_port` read as a path of known keys joined by `_` (`listen`, `port`), if it is one. */
function splitNested(name: string, schema: unknown): string[] | undefined {
  const properties = propertiesOf(schema);
  if (!properties) return undefined;
  for (let at = name.indexOf('_'); at !== -1; at = name.indexOf('_', at + 1)) {
    const head = name.slice(0, at);
    const tail = name.slice(at + 1);
    if (!Object.hasOwn(properties, head)) continue;
    const inner = propertiesOf(properties[head]);
    if (inner && Object.hasOwn(inner, tail)) return [head, tail];
    const deeper = splitNested(tail, properties[head]);
    if (deeper) return [head, ...deeper];
  }
  return undefined;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** `top` over `base`, object by object (config layers: file, environment, test overrides). */
export function deepMerge(base: Record<string, unknown>, top: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...base };
  for (const [key, value] of Object.entries(top)) {
    const existing = out[key];
    out[key] = isPlainObject(existing) && isPlainObject(value) ? deepMerge(existing, value) : value;
  }
  return out;
}
