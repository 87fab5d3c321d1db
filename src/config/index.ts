export { loadConfig, finishConfig, ConfigError, ENV_PREFIX, CONFIG_FILE_ENV, type LoadConfigOptions } from './load.js';
export type { Config, RateLimitConfig } from './schema.js';
