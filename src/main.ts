/**
 * The `bot-homeserver` command: start the server, apply migrations, create bots and users.
 * Operator commands work on the database directly, so they need no running server and no token.
 */
import { Command, Option } from 'commander';
import { randomBytes } from 'node:crypto';
import { fstatSync } from 'node:fs';
import { loadConfig, ConfigError, type Config } from './config/index.js';
import { MatrixError } from './core/errors.js';
import { startServer } from './server.js';
import { createServices, type Services } from './services.js';
import { systemClock } from './core/clock.js';
import { migrateToLatest, MigrationError, openDatabase, Storage } from './storage/index.js';
import { VERSION } from './version.js';
import { pino } from 'pino';
import { loggerOptions } from './http/logging.js';

function parsePort(value: string): number {
  const port = Number(value);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new ConfigError(`--port must be 0-65535, not ${value}`);
  return port;
}

const configOption = () =>
  new Option('-c, --config <file>', 'YAML config file (default: $BOT_HOMESERVER_CONFIG, else built-in defaults)');

export async function main(argv: string[]): Promise<void> {
  const program = new Command()
    .name('bot-homeserver')
    .description('A Matrix homeserver for bot accounts')
    .version(VERSION)
    .showHelpAfterError();

  program
    .command('start')
    .description('start the homeserver (applies pending migrations first)')
    .addOption(configOption())
    .action(async (options: { config?: string }) => {
      const config = loadConfig({ file: options.config });
      const server = await startServer(config);
      let closing = false;
      const stop = (signal: string) => {
        if (closing) return;
        closing = true;
        server.app.log.info({ signal }, 'shutting down');
        server.close().then(
          () => process.exit(0),
          (err: unknown) => {
            server.app.log.error({ err }, 'error while shutting down');
            process.exit(1);
          },
        );
      };
      process.once('SIGINT', () => stop('SIGINT'));
      process.once('SIGTERM', () => stop('SIGTERM'));
    });

  program
    .command('dev')
    .description('start an in-memory server for bot tests; print users, bots and rooms as one JSON line')
    .option('-p, --port <port>', 'port on 127.0.0.1 (default: a free one)', parsePort)
    .option('-f, --fixtures <file>', 'YAML file of users, bots and rooms to create')
    .option('--server-name <name>', 'domain of user ids', 'localhost')
    .option('--log-level <level>', 'server log level, on stderr', 'silent')
    .action(async (options: { port?: number; fixtures?: string; serverName: string; logLevel: string }) => {
      // Loaded here, not at the top: `start` should not pay for what only `dev` uses.
      const { applyFixtures, readFixtures } = await import('./testing/fixtures.js');
      const { startTestHomeserver } = await import('./testing/test-homeserver.js');
      // Read the fixtures before starting, so a bad file fails without a server to clean up.
      const fixtures = options.fixtures ? readFixtures(options.fixtures) : {};
      const hs = await startTestHomeserver({
        serverName: options.serverName,
        ...(options.port !== undefined ? { port: options.port } : {}),
        // stdout carries only the JSON line; the log goes to stderr.
        logger: pino({ ...(loggerOptions(options.logLevel) as object) }, pino.destination(2)),
      });
      try {
        console.log(JSON.stringify(await applyFixtures(hs, fixtures)));
      } catch (err) {
        await hs.close();
        throw err;
      }
      let stopping = false;
      const stop = () => {
        if (stopping) return;
        stopping = true;
        void hs.close().then(() => process.exit(0));
      };
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
      stopWhenOrphaned(stop);
    });

  program
    .command('migrate')
    .description('apply pending database migrations and exit')
    .addOption(configOption())
    .action(async (options: { config?: string }) => {
      const config = loadConfig({ file: options.config });
      const storage = new Storage(openDatabase(config.database));
      try {
        const applied = await migrateToLatest(storage.db);
        console.log(applied.length ? `applied: ${applied.join(', ')}` : 'database is up to date');
      } finally {
        await storage.close();
      }
    });

  program
    .command('create-bot')
    .description('create a bot account with a fresh secret, or rotate the secret of an existing bot')
    .argument('<name>', 'localpart or full user id of the bot')
    .addOption(configOption())
    .option('--json', 'print one line of JSON: {"user_id": ..., "password": ...}')
    .action(async (name: string, options: { config?: string; json?: boolean }) => {
      await withServices(options.config, async (services) => {
        const bot = await services.accounts.createOrRotateBot(name);
        if (options.json) {
          console.log(JSON.stringify({ user_id: bot.user_id, password: bot.password }));
          return;
        }
        console.log(
          bot.created
            ? `Created bot ${bot.user_id}.`
            : `Rotated the secret of ${bot.user_id}; its old secret and sessions no longer work.`,
        );
        console.log(`Password (the bot's secret; shown only now): ${bot.password}`);
      });
    });

  program
    .command('create-user')
    .description('create an account for a person (a generated password unless --password is given)')
    .argument('<name>', 'localpart or full user id')
    .addOption(configOption())
    .option('--admin', 'make the user a server admin (may use the admin API)')
    .option('--password <password>', 'the password to set (default: a generated one, printed once)')
    .option('--json', 'print one line of JSON: {"user_id": ..., "password": ..., "admin": ...}')
    .action(async (name: string, options: { config?: string; admin?: boolean; password?: string; json?: boolean }) => {
      await withServices(options.config, async (services) => {
        const localpart = services.accounts.localpartNamedBy(name);
        const password = options.password ?? randomBytes(18).toString('base64url');
        const user = await services.accounts.createUser({ localpart, password, admin: options.admin === true });
        const admin = user.admin === 1;
        if (options.json) {
          console.log(JSON.stringify({ user_id: user.user_id, password, admin }));
          return;
        }
        console.log(`Created ${admin ? 'admin ' : ''}user ${user.user_id}.`);
        if (!options.password) console.log(`Password (shown only now): ${password}`);
      });
    });

  await program.parseAsync(argv);
}

/**
 * A test double must not outlive the test that started it. Runners and wrappers (npx, a pytest
 * fixture's Popen) often kill only their direct child, which leaves this process re-parented and
 * serving. So `dev` also stops when its stdin is a pipe and that pipe closes (the parent closed it
 * or died), and when its parent process goes away (its parent id changes).
 */
function stopWhenOrphaned(stop: () => void): void {
  let stdinIsPipe = false;
  try {
    const stat = fstatSync(0);
    stdinIsPipe = stat.isFIFO() || stat.isSocket();
  } catch {
    // No stdin at all: nothing to watch there.
  }
  if (stdinIsPipe) {
    process.stdin.on('data', () => {}); // what the parent writes is not read, only the end of it
    process.stdin.once('end', stop);
    process.stdin.once('error', stop);
    process.stdin.once('close', stop);
  }
  const parent = process.ppid;
  const watch = setInterval(() => {
    if (process.ppid !== parent) stop();
  }, 500);
  watch.unref();
}

async function withServices(configFile: string | undefined, work: (services: Services) => Promise<void>) {
  const config: Config = loadConfig({ file: configFile });
  const storage = new Storage(openDatabase(config.database));
  try {
    await migrateToLatest(storage.db);
    await work(await createServices(config, storage, systemClock));
  } finally {
    await storage.close();
  }
}

/** Errors an operator can act on get one clear line; anything else keeps its stack. */
export function describeFailure(err: unknown): string {
  // FixturesError is matched by name: its module is loaded only by `dev`.
  if (err instanceof ConfigError || err instanceof MigrationError || (err instanceof Error && err.name === 'FixturesError')) return err.message;
  if (err instanceof MatrixError) return `${err.message} (${err.errcode})`;
  if (err instanceof Error && 'code' in err && err.code === 'EADDRINUSE') return err.message;
  return err instanceof Error ? (err.stack ?? err.message) : String(err);
}
