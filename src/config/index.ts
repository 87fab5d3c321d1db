export { loadConfig, finishConfig, findConfigFile, ConfigError, ENV_PREFIX, CONFIG_FILE_ENV, DEFAULT_CONFIG_FILE, type LoadConfigOptions, type ConfigSource } from './load.js';
export type { Config, RateLimitConfig, PortalConfig, OidcProviderConfig, AttributeRequirement } from './schema.js';
export type { AppServiceRegistration, Namespace } from './appservices.js';
export { describeDatabase, withoutPassword } from './describe-database.js';
