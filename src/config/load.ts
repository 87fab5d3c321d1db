/**
 * Loads the configuration: YAML file, then environment overrides, then defaults and validation.
 * A bad value fails here, at start, with a message that names the key.
 */
import { existsSync, readFileSync } from 'node:fs';
import { resolve as resolvePath } from 'node:path';
import { Value } from '@sinclair/typebox/value';
import { Ajv, type ErrorObject } from 'ajv';
import { parse as parseYaml, YAMLParseError } from 'yaml';
import { ConfigSchema, type Config, type RawConfig } from './schema.js';
import { parseDuration } from './duration.js';
import { DEFAULT_IP_RANGE_BLACKLIST, invalidRanges } from '../net/address-guard.js';

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
  if (option) return { file: option, description: `${option} (--config)` };
  const fromEnv = env[CONFIG_FILE_ENV];
  if (fromEnv) return { file: fromEnv, description: `${fromEnv} ($${CONFIG_FILE_ENV})` };
  const local = resolvePath(cwd, DEFAULT_CONFIG_FILE);
  if (existsSync(local)) return { file: local, description: `${local} (found in the working directory)` };
  return {
    file: undefined,
    description: `built-in defaults (no --config, no $${CONFIG_FILE_ENV}, no ./${DEFAULT_CONFIG_FILE})`,
  };
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
const ajv = new Ajv({ useDefaults: true, allErrors: true, allowUnionTypes: true, strict: false, validateSchema: false, code: { optimize: false } });
const validateConfig = ajv.compile<RawConfig>(ConfigSchema);

export function loadConfig(options: LoadConfigOptions = {}): Config {
  const env = options.env ?? process.env;
  const file = options.file ?? env[CONFIG_FILE_ENV];
  const fromFile = file ? readConfigFile(file) : {};
  // Environment values arrive as text; converting them by the schema reads "8008" as a number
  // where a number is expected and leaves a digits-only secret a string where a string is.
  const fromEnv = Value.Convert(ConfigSchema, envOverrides(env)) as Record<string, unknown>;
  const merged = deepMerge(deepMerge(fromFile, fromEnv), options.overrides ?? {});
  return finishConfig(merged);
}

/** Validates a plain object as configuration, applying defaults. */
export function finishConfig(raw: Record<string, unknown>): Config {
  const candidate = structuredClone(raw);
  if (!validateConfig(candidate)) {
    throw new ConfigError(`invalid configuration:\n${describeErrors(validateConfig.errors ?? [])}`);
  }
  const config = candidate as RawConfig;
  const finished: Config = {
    ...config,
    listen: { ...config.listen, request_timeout: durationOrNull('listen.request_timeout', config.listen.request_timeout) ?? 0 },
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
    key_refresh_interval: durationOrNull('key_refresh_interval', config.key_refresh_interval) ?? 0,
    federation: {
      ...config.federation,
      request_timeout: durationOrNull('federation.request_timeout', config.federation.request_timeout) ?? 0,
      min_retry_interval: durationOrNull('federation.min_retry_interval', config.federation.min_retry_interval) ?? 0,
      max_retry_interval: durationOrNull('federation.max_retry_interval', config.federation.max_retry_interval) ?? 0,
    },
    ip_range_blacklist: checkedRanges('ip_range_blacklist', config.ip_range_blacklist ?? [...DEFAULT_IP_RANGE_BLACKLIST]),
  };
  checkedRanges('ip_range_whitelist', finished.ip_range_whitelist);
  return finished;
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
function envOverrides(env: NodeJS.ProcessEnv): Record<string, unknown> {
  const result: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(env)) {
    // An empty variable is an unset one (`FOO= cmd` is how shells clear a value).
    if (!name.startsWith(ENV_PREFIX) || name === CONFIG_FILE_ENV || value === undefined || value === '') continue;
    const path = name.slice(ENV_PREFIX.length).toLowerCase().split('__');
    let target = result;
    for (const key of path.slice(0, -1)) {
      const next = target[key];
      target = isPlainObject(next) ? next : (target[key] = {});
    }
    target[path[path.length - 1]!] = value === 'null' ? null : value;
  }
  return result;
}

function describeErrors(errors: ErrorObject[]): string {
  const lines = new Set<string>();
  for (const error of errors) {
    const key = error.instancePath.slice(1).replaceAll('/', '.');
    if (error.keyword === 'additionalProperties') {
      const extra = (error.params as { additionalProperty: string }).additionalProperty;
      lines.add(`  ${key ? `${key}.` : ''}${extra}: unknown key`);
    } else if (error.keyword === 'enum') {
      const allowed = (error.params as { allowedValues: unknown[] }).allowedValues;
      lines.add(`  ${key}: must be one of ${allowed.map((v) => JSON.stringify(v)).join(', ')}`);
    } else if (error.keyword === 'anyOf') {
      // The branches of a union already said what was wrong; keep their messages.
      continue;
    } else {
      lines.add(`  ${key || '(top level)'}: ${error.message ?? 'is invalid'}`);
    }
  }
  return [...lines].join('\n');
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
