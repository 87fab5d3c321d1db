/**
 * The `bot-homeserver` command: start the server, apply migrations, create bots and users.
 * Operator commands work on the database directly, so they need no running server and no token.
 */
import { Command, Option } from 'commander';
import { randomBytes } from 'node:crypto';
import { userInfo } from 'node:os';
import { fstatSync, realpathSync } from 'node:fs';
import { describeDatabase, findConfigFile, loadConfig, ConfigError, type Config, type ConfigSource } from './config/index.js';
import { MatrixError } from './core/errors.js';
import { CommandError } from './ops/command-error.js';
import { startServer } from './server.js';
import { createServices, type Services } from './services.js';
import { systemClock } from './core/clock.js';
import { BOT_USER_TYPE } from './users/account-service.js';
import { assertPersonId, personIdNamedBy } from './portal/bot-ownership.js';
import { bindServerName, migrateToLatest, MigrationError, openDatabase, ServerNameMismatchError, Storage } from './storage/index.js';
import { VERSION } from './version.js';
import { pino } from 'pino';
import { loggerOptions } from './http/logging.js';

function parsePort(value: string): number {
  const port = Number(value);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new ConfigError(`--port must be 0-65535, not ${value}`);
  return port;
}

const configOption = () =>
  new Option('-c, --config <file>', 'YAML config file (default: $BOT_HOMESERVER_CONFIG, else ./homeserver.yaml, else built-in defaults)');

/**
 * The config an operator command runs with, and the database it works on, said on stderr so that
 * nobody guesses (after a move to PostgreSQL, a command run without the new settings would work on
 * the old SQLite file). `quiet`: the server's own log says it instead.
 */
function operatorConfig(option: string | undefined, say: { quiet?: boolean; database?: boolean } = {}): { config: Config; source: ConfigSource } {
  const source = findConfigFile(option);
  if (!say.quiet) console.error(`bot-homeserver: config: ${source.description}`);
  const config = loadConfig({ file: source.file });
  if (!say.quiet && say.database !== false) console.error(`bot-homeserver: database: ${describeDatabase(config.database)}`);
  return { config, source };
}

/** Set by `--verbose`: a failure prints its stack too. */
let verbose = false;

/** Opens, migrates and claims the database for the configured server name, or says why not. */
async function openStorage(config: Config, source: ConfigSource): Promise<{ storage: Storage; applied: string[] }> {
  const storage = new Storage(openDatabase(config.database), { searchIndex: config.enable_search });
  try {
    const applied = await migrateToLatest(storage.db);
    await bindServerName(storage.db, config.server_name);
    return { storage, applied };
  } catch (err) {
    await storage.close();
    throw explained(err, config, source);
  }
}

/** A database of another server name is the operator's mistake: one sentence naming both. */
function explained(err: unknown, config: Config, source: ConfigSource): unknown {
  if (!(err instanceof ServerNameMismatchError)) return err;
  return new ConfigError(`${config.database.path}: ${err.message}\n  configuration used: ${source.description}`);
}

export async function main(argv: string[]): Promise<void> {
  const program = new Command()
    .name('bot-homeserver')
    .description('A Matrix homeserver for bot accounts')
    .version(VERSION)
    .option('--verbose', 'when a command fails, also print where (the stack trace)')
    .showHelpAfterError()
    .hook('preAction', () => {
      verbose = program.opts<{ verbose?: boolean }>().verbose === true;
    });

  program
    .command('start')
    .description('start the homeserver (applies pending migrations first)')
    .addOption(configOption())
    .action(async (options: { config?: string }) => {
      const { config, source } = operatorConfig(options.config, { quiet: true });
      // The server opens, migrates and claims the database itself; a wrong name is one clear line.
      const server = await startServer(config).catch((err: unknown) => {
        throw explained(err, config, source);
      });
      server.app.log.info({ config: source.description, database: describeDatabase(config.database), server_name: config.server_name }, 'configuration');
      if (config.server_name === 'localhost') {
        server.app.log.warn(
          'server_name is still "localhost": user ids end in :localhost and no other server can reach this one. ' +
            'Set server_name before creating accounts; it cannot change later.',
        );
      }
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
    .command('dev-federation')
    .description('write two homeservers that federate on this machine (a throwaway CA, certificates, configs) and how to try them')
    .argument('<dir>', 'a new or empty folder for the files')
    .option('--main-port <port>', 'port of the "main" server on 127.0.0.1 (its server name is 127.0.0.1:PORT)', parsePort, 18448)
    .option('--bots-port <port>', 'port of the bot server on 127.0.0.1', parsePort, 18449)
    .action(async (dir: string, options: { mainPort: number; botsPort: number }) => {
      const { shellQuote, writeDevFederation } = await import('./ops/dev-federation.js');
      // The recipe and the script run this same CLI, wherever it is installed.
      const command = `node ${shellQuote(realpathSync(process.argv[1] ?? 'bot-homeserver'))}`;
      const { recipe } = writeDevFederation({ dir, mainPort: options.mainPort, botsPort: options.botsPort, command });
      console.log(recipe);
    });

  program
    .command('migrate')
    .description('apply pending database migrations and exit')
    .addOption(configOption())
    .action(async (options: { config?: string }) => {
      const { config, source } = operatorConfig(options.config);
      const { storage, applied } = await openStorage(config, source);
      await storage.close();
      console.log(applied.length ? `applied: ${applied.join(', ')}` : 'database is up to date');
    });

  defineCreateBot(program.command('create-bot'));
  defineCreateUser(program.command('create-user'));

  const bridge = program
    .command('bridge')
    .description('run the bridge alone, as an application service of another homeserver (bridge.appservice in the config)')
    .addOption(configOption())
    .action(async (options: { config?: string }) => {
      const { config, source } = operatorConfig(options.config, { quiet: true });
      const { startBridgeApp } = await import('./bridge-app.js');
      const running = await startBridgeApp(config);
      running.app.log.info({ config: source.description, database: describeDatabase(config.database) }, 'configuration');
      let closing = false;
      const stop = (signal: string) => {
        if (closing) return;
        closing = true;
        running.app.log.info({ signal }, 'shutting down');
        running.close().then(
          () => process.exit(0),
          (err: unknown) => {
            running.app.log.error({ err }, 'error while shutting down');
            process.exit(1);
          },
        );
      };
      process.once('SIGINT', () => stop('SIGINT'));
      process.once('SIGTERM', () => stop('SIGTERM'));
    });
  bridge
    .command('registration')
    .description('print the registration file to install in the main homeserver (app_service_config_files)')
    // --config is the bridge command's: `bridge registration --config FILE` and `bridge --config FILE registration` both work.
    .action(async (_options: object, command: Command) => {
      // Written from the config alone: no database is opened, so none is named.
      const { config } = operatorConfig((command.optsWithGlobals() as { config?: string }).config, { database: false });
      const { bridgeRegistration } = await import('./bridge-app.js');
      process.stdout.write(bridgeRegistration(config));
    });

  program
    .command('migrate-to-postgres')
    .description('copy a SQLite database into an empty PostgreSQL one, then compare the counts (docs/scaling.md)')
    .requiredOption('--from <file>', 'the SQLite database (the server must be stopped)')
    .requiredOption('--to <url>', 'postgres://user:password@host:port/database')
    .option('--schema <name>', 'the PostgreSQL schema to fill', 'public')
    .addOption(configOption())
    .action(async (options: { from: string; to: string; schema: string; config?: string }) => {
      // The server's config says where its signing key and media store are (the closing advice
      // names them); the databases are --from and --to, named by the migration itself.
      const { config } = operatorConfig(options.config, { database: false });
      const { migrateToPostgres } = await import('./ops/migrate-to-postgres.js');
      const ok = await migrateToPostgres(options, (line) => console.error(line), config);
      if (!ok) process.exitCode = 1;
    });

  program
    .command('backup')
    .description('copy the database (online, safe while the server runs), the media store and the signing key')
    .argument('<file>', 'where the database copy goes; the media store goes to <file>.media, the key to <file>.signing.key')
    .addOption(configOption())
    .action(async (file: string, options: { config?: string }) => {
      await withServices(options.config, async (services) => {
        const { backup } = await import('./ops/backup.js');
        const result = await backup(services.config, services.storage, file);
        console.log(`Database: ${result.database}`);
        console.log(result.media ? `Media store: ${result.media.path} (${result.media.files} files, ${result.media.bytes} bytes)` : 'Media store: none yet');
        console.log(result.signingKey ? `Signing key: ${result.signingKey}` : 'Signing key: none yet');
      });
    });

  for (const kind of ['users', 'bots'] as const) {
    const bots = kind === 'bots';
    const group = program.command(kind).description(bots ? 'list, create and deactivate bot accounts' : 'list, create and deactivate accounts (people and bots)');
    // `bots create` is `create-bot` and `users create` is `create-user`, under their group.
    (bots ? defineCreateBot : defineCreateUser)(group.command('create'));
    group
      .command('list')
      .description(bots ? 'list bot accounts' : 'list accounts, people and bots')
      .addOption(configOption())
      .option('--deactivated', 'include deactivated accounts')
      .option('--json', 'print one JSON object per line')
      .action(async (options: { config?: string; deactivated?: boolean; json?: boolean }) => {
        await withServices(options.config, async (services) => {
          for await (const page of allUsers(services, { bots, includeDeactivated: options.deactivated === true })) {
          const owners = await services.bots.ownersOf(page.filter((user) => user.user_type === BOT_USER_TYPE).map((user) => user.user_id));
          for (const user of page) {
            const entry = {
              user_id: user.user_id,
              type: user.user_type === BOT_USER_TYPE ? 'bot' : 'user',
              admin: user.admin === 1,
              deactivated: user.deactivated === 1,
              created: new Date(user.created_ts).toISOString(),
              displayname: user.displayname,
              ...(user.user_type === BOT_USER_TYPE ? { owner: owners.get(user.user_id) ?? null } : {}),
            };
            if (options.json) console.log(JSON.stringify(entry));
            else console.log([entry.user_id, entry.type + (entry.admin ? ' admin' : ''), entry.deactivated ? 'deactivated' : 'active', entry.created, ...(entry.type === 'bot' ? [`owner: ${entry.owner ?? '-'}`] : [])].join('\t'));
          }
          }
        });
      });
    group
      .command('deactivate')
      .description(
        bots
          ? 'deactivate a bot: its secret and sessions stop working at once, and it leaves its rooms'
          : 'deactivate an account: its password and sessions stop working at once, and it leaves its rooms',
      )
      .argument('<name>', 'localpart or full user id')
      .addOption(configOption())
      .option('--erase', 'also forget its display name and avatar')
      .action(async (name: string, options: { config?: string; erase?: boolean }) => {
        await withServices(options.config, async (services) => {
          const localpart = services.accounts.localpartNamedBy(name);
          const userId = services.accounts.userIdFor(localpart);
          if (services.accounts.isReserved(localpart)) throw new ConfigError(`${userId} is a service user of this server; turn it off in the configuration instead`);
          const user = await services.accounts.getUser(userId);
          if (!user) throw new ConfigError(`there is no account ${userId}`);
          if (bots && user.user_type !== BOT_USER_TYPE) throw new ConfigError(`${userId} is not a bot account (use \`users deactivate\`)`);
          if (user.deactivated === 1) {
            console.log(`${userId} was already deactivated.`);
            return;
          }
          // A bot's deactivation goes to the bot audit log; its rooms are left by the server (see above).
          const audited = user.user_type === BOT_USER_TYPE ? services.bots.audited(cliActor(), 'deactivate', userId) : undefined;
          await services.accounts.deactivate(userId, { erase: options.erase === true, also: audited });
          console.log(
            `Deactivated ${userId}: it can no longer log in and its sessions have ended. ` +
              'The server takes it out of its rooms within a minute (at its next start if it is not running).',
          );
        });
      });
  }
  defineOwnerCommands(program);
  await program.parseAsync(argv);
}

/** Who the audit log names for what the CLI did: the system user running it. */
function cliActor(): string {
  let name = 'unknown';
  try {
    name = userInfo().username;
  } catch {
    // No entry for this uid (a container): the log still says it was the CLI.
  }
  return `cli:${name}`;
}

/** `owners grant|revoke|list`, `bots set-owner`, `audit`: the bot portal's operator side. */
function defineOwnerCommands(program: Command): void {
  const owners = program.command('owners').description('who may create bots in the bot portal (docs/portal.md)');
  owners
    .command('grant')
    .description('give a person the right to create bots (alice, or @alice:example.org)')
    .argument('<person>', 'localpart on portal.people_server_name, or a full user id')
    .addOption(configOption())
    .option('--note <text>', 'why, e.g. the ticket that asked for it')
    .action(async (person: string, options: { config?: string; note?: string }) => {
      await withServices(options.config, async (services) => {
        const userId = personIdNamedBy(person, services.config.portal?.people_server_name);
        await services.bots.grant(userId, cliActor(), options.note ?? null);
        console.log(`${userId} may now create bots.`);
      });
    });
  owners
    .command('revoke')
    .description('take back the right to create bots (their bots stay theirs)')
    .argument('<person>', 'localpart on portal.people_server_name, or a full user id')
    .addOption(configOption())
    .action(async (person: string, options: { config?: string }) => {
      await withServices(options.config, async (services) => {
        const userId = personIdNamedBy(person, services.config.portal?.people_server_name);
        const revoked = await services.bots.revoke(userId, cliActor());
        console.log(revoked ? `${userId} may no longer create bots (unless the sign-in provider's attributes allow it).` : `${userId} had no grant.`);
      });
    });
  owners
    .command('unbind')
    .description("release the tie between a person and their account at the sign-in provider (their account was made again, or the name was given to someone else); ends their portal sessions")
    .argument('<person>', 'localpart on portal.people_server_name, or a full user id')
    .addOption(configOption())
    .action(async (person: string, options: { config?: string }) => {
      await withServices(options.config, async (services) => {
        const userId = personIdNamedBy(person, services.config.portal?.people_server_name);
        const identity = await services.bots.identityOf(userId);
        const released = await services.bots.unbindIdentity(userId, cliActor());
        console.log(
          released && identity
            ? `${userId} was ${identity.subject} at ${identity.idp}; the next account to sign in as ${userId} will be bound instead.`
            : `${userId} has not signed in to the portal.`,
        );
      });
    });
  owners
    .command('sign-out')
    .description('sign a person out of the bot portal everywhere, now (their next sign-in reads the provider again)')
    .argument('<person>', 'localpart on portal.people_server_name, or a full user id')
    .addOption(configOption())
    .action(async (person: string, options: { config?: string }) => {
      await withServices(options.config, async (services) => {
        const userId = personIdNamedBy(person, services.config.portal?.people_server_name);
        const ended = await services.bots.endSessionsOf(userId, cliActor());
        console.log(`${userId} is signed out of the portal (${ended} ${ended === 1 ? 'session' : 'sessions'} ended).`);
      });
    });
  owners
    .command('list')
    .description('list the grants of the right to create bots')
    .addOption(configOption())
    .option('--json', 'print one JSON object per line')
    .action(async (options: { config?: string; json?: boolean }) => {
      await withServices(options.config, async (services) => {
        for (const grant of await services.bots.listGrants()) {
          const entry = { user_id: grant.user_id, granted_by: grant.granted_by, granted: new Date(grant.granted_ts).toISOString(), note: grant.note };
          console.log(options.json ? JSON.stringify(entry) : [entry.user_id, entry.granted, `by ${entry.granted_by}`, entry.note ?? ''].join('\t'));
        }
      });
    });

  const bots = program.commands.find((command) => command.name() === 'bots');
  bots
    ?.command('set-owner')
    .description('give a bot to another owner (or its first, for a bot made before the portal)')
    .argument('<bot>', 'localpart or full user id of the bot')
    .argument('<person>', 'the new owner: localpart on portal.people_server_name, or a full user id')
    .addOption(configOption())
    .action(async (bot: string, person: string, options: { config?: string }) => {
      await withServices(options.config, async (services) => {
        const botId = services.accounts.userIdFor(services.accounts.localpartNamedBy(bot));
        const owner = personIdNamedBy(person, services.config.portal?.people_server_name);
        const moved = await services.bots.move(botId, owner, cliActor());
        console.log(`${botId} now belongs to ${moved.to}${moved.from ? ` (before: ${moved.from})` : ''}.`);
      });
    });

  program
    .command('audit')
    .description('the bot audit log, newest first: every create, rotate, deactivate, move, grant and revoke')
    .addOption(configOption())
    .option('--limit <n>', 'how many entries', (value: string) => Number(value), 50)
    .option('--target <id>', 'only entries about this bot or person')
    .option('--json', 'print one JSON object per line')
    .action(async (options: { config?: string; limit: number; target?: string; json?: boolean }) => {
      if (!Number.isInteger(options.limit) || options.limit < 1 || options.limit > 100_000) throw new ConfigError('--limit must be a whole number from 1 to 100000');
      await withServices(options.config, async (services) => {
        for (const entry of await services.bots.auditLog({ limit: options.limit, target: options.target })) {
          const when = new Date(entry.ts).toISOString();
          console.log(options.json ? JSON.stringify({ ...entry, time: when }) : [when, entry.actor, entry.action, entry.target, entry.detail ? JSON.stringify(entry.detail) : ''].join('\t'));
        }
      });
    });
}

function defineCreateBot(command: Command): Command {
  return command
    .description('create a bot account with a fresh secret, or rotate the secret of an existing bot')
    .argument('<name>', 'localpart or full user id of the bot')
    .addOption(configOption())
    .option('--json', 'print one line of JSON: {"user_id": ..., "password": ...}')
    .option('--owner <person>', "a new bot's owner, as the bot portal shows it (alice, or @alice:example.org)")
    .action(async (name: string, options: { config?: string; json?: boolean; owner?: string }) => {
      await withServices(options.config, async (services) => {
        const owner = options.owner === undefined ? undefined : personIdNamedBy(options.owner, services.config.portal?.people_server_name);
        if (owner !== undefined) assertPersonId(owner);
        const bot = await services.bots.createOrRotate(name, cliActor(), owner);
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
}

function defineCreateUser(command: Command): Command {
  return command
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
}

/** Every account, in pages, in user id order. */
async function* allUsers(services: Services, options: { bots: boolean; includeDeactivated: boolean }) {
  const page = 500;
  for (let from = 0; ; from += page) {
    const { users } = await services.accounts.listUsers({
      from,
      limit: page,
      includeDeactivated: options.includeDeactivated,
      ...(options.bots ? { userType: BOT_USER_TYPE } : {}),
      orderBy: 'name',
      direction: 'asc',
    });
    yield users;
    if (users.length < page) return;
  }
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
  const { config, source } = operatorConfig(configFile);
  const { storage } = await openStorage(config, source);
  try {
    await work(await createServices(config, storage, systemClock));
  } finally {
    await storage.close();
  }
}

/**
 * The one place that words a failed command for the terminal: a human sentence, never an errcode
 * (a Matrix error's code is for clients, not operators) and never stack frames, unless `--verbose`
 * asks for them. Errors nobody planned for say so, and how to see more.
 */
export function describeFailure(err: unknown, withStack = verbose): string {
  const sentence = failureSentence(err, !withStack);
  if (!withStack || !(err instanceof Error) || err.stack === undefined) return sentence;
  // The stack's first line repeats the message; the frames follow it (through the source map).
  const frames = err.stack.split('\n').filter((line) => /^\s+at /.test(line));
  const cause = err.cause instanceof Error && err.cause.stack ? `\ncaused by: ${err.cause.stack}` : '';
  return [sentence, ...frames].join('\n') + cause;
}

function failureSentence(err: unknown, hint: boolean): string {
  // These are matched by name: their modules load with what uses them.
  const byName = ['FixturesError', 'SigningKeyError', 'BridgeHomeserverError', 'DatabaseInUseError', 'CopyRefused'];
  if (err instanceof ConfigError || err instanceof MigrationError || err instanceof CommandError || err instanceof MatrixError) return err.message;
  if (err instanceof Error && byName.includes(err.name)) return err.message;
  if (err instanceof Error && 'code' in err && err.code === 'EADDRINUSE') return err.message;
  // PostgreSQL is not there (database.url): where it was looked for.
  if (err instanceof Error && 'code' in err && err.code === 'ECONNREFUSED' && 'port' in err) return `cannot reach the database: ${err.message}`;
  // The database refused something (a locked or read-only file, a full disk): its words.
  if (err instanceof Error && err.name === 'SqliteError') return `the database refused: ${err.message}`;
  if (err instanceof Error) return hint ? `${err.message} (unexpected: run again with --verbose to see where it happened)` : err.message;
  return String(err);
}
