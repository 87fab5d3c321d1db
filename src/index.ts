/** The package's public API, for embedding the homeserver in a process of your own. */
export { buildApp, CLIENT_PREFIXES, type App, type AppDependencies, type Homeserver } from './app.js';
export { startServer, type RunningServer } from './server.js';
export { loadConfig, finishConfig, ConfigError, type Config, type LoadConfigOptions } from './config/index.js';
export { MatrixError, type Errcode } from './core/errors.js';
export { systemClock, type Clock } from './core/clock.js';
export { VERSION } from './version.js';
