/**
 * `startTestHomeserver()`: the real server inside a bot's test process. It listens on 127.0.0.1
 * (port 0 by default), keeps everything in memory, hashes passwords cheaply and has no rate limits
 * unless asked, and has helpers to set up users and rooms and to wait for what a bot says.
 *
 * The listening socket belongs to a plain `http.Server` that hands each request to the current
 * app, so `reset()` can swap in a fresh app on a fresh in-memory database while the port, and so
 * `baseUrl`, stay the same for the whole test file.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { Faults, type FaultAction } from './faults.js';
import type { AddressInfo } from 'node:net';
import { buildApp, type App } from '../app.js';
import type { FastifyBaseLogger } from 'fastify';
import type { Clock } from '../core/clock.js';
import { finishConfig, type Config } from '../config/index.js';
import { deepMerge } from '../config/load.js';
import { eventFromRow, type ClientEvent } from '../rooms/events.js';
import type { Services } from '../services.js';
import { MatrixError } from '../core/errors.js';

export interface StartTestHomeserverOptions {
  /** Domain of user ids. Default `localhost`. */
  serverName?: string;
  /** Port on 127.0.0.1. Default 0: a free port. */
  port?: number;
  /** Turn Synapse-style rate limiting on (it is off by default, so tests are not throttled). */
  rateLimits?: boolean;
  /** Log level of the server's own log (pino on stdout). Default `silent`. */
  logLevel?: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
  /** A clock to run on instead of the system clock (token expiry, timestamps). */
  clock?: Clock;
  /** A pino logger for the server's log, instead of pino on stdout at `logLevel`. */
  logger?: FastifyBaseLogger;
  /**
   * Any configuration keys (as in the YAML file), applied over the test defaults: for example
   * `{ max_upload_size: '1M' }`. Keys that name files (`database.path`) are honoured too.
   */
  config?: Record<string, unknown>;
}

/** An account on the test server, logged in once. */
export interface TestAccount {
  userId: string;
  localpart: string;
  /** The password (for a bot, its secret). */
  password: string;
  accessToken: string;
  deviceId: string;
}

export interface TestBot extends TestAccount {
  /** Same as `password`: a bot logs in with its secret as the password. */
  secret: string;
}

/** Who acts: an account from `createUser` / `createBot` (anything with a user id and a token). */
export type Actor = Pick<TestAccount, 'userId' | 'accessToken'>;

export interface CreateUserOptions {
  password?: string;
  admin?: boolean;
  displayName?: string;
}

export interface CreateRoomOptions {
  name?: string;
  topic?: string;
  preset?: 'private_chat' | 'public_chat' | 'trusted_private_chat';
  visibility?: 'public' | 'private';
  /** Local part only, e.g. `alerts` for `#alerts:<serverName>`. */
  alias?: string;
  /** Users invited at creation (they still have to join). */
  invite?: Array<Actor | string>;
  /** Users invited and then joined, so they are members when `createRoom` resolves. */
  members?: Actor[];
  /** Marks the invites as a direct chat. */
  isDirect?: boolean;
  /** Any other `/createRoom` body fields (`initial_state`, `power_level_content_override`, ...). */
  extra?: Record<string, unknown>;
}

export interface WaitForOptions {
  /** Milliseconds before giving up (the promise rejects). Default 10 000. */
  timeout?: number;
  /** Only events after this event id; default: every event of the room, past and future. */
  after?: string;
}

/**
 * Every failure of a helper. `status` and `errcode` are the Matrix error's when the server refused
 * (as a client would have got them); both are undefined for a helper misused (`reset()` on a file
 * database, `waitFor` timing out, ...).
 */
export class TestHomeserverError extends Error {
  override name = 'TestHomeserverError';
  constructor(
    message: string,
    readonly status?: number,
    readonly errcode?: string,
  ) {
    super(message);
  }
}

/** Runs a helper's work on the services, giving a refusal the helper's name and its arguments. */
async function asHelper<T>(what: string, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    if (err instanceof MatrixError) throw new TestHomeserverError(`${what}: ${err.message} (${err.errcode})`, err.status, err.errcode);
    throw err;
  }
}

export interface TestHomeserver {
  /** `http://127.0.0.1:<port>`: give it to your SDK as the homeserver URL. */
  readonly baseUrl: string;
  readonly serverName: string;
  readonly port: number;
  createUser(name: string, options?: CreateUserOptions): Promise<TestAccount>;
  createBot(name: string): Promise<TestBot>;
  createRoom(owner: Actor, options?: CreateRoomOptions): Promise<string>;
  /** Joins a room by id or alias; resolves with the room id (an alias resolved). */
  join(user: Actor, roomIdOrAlias: string): Promise<string>;
  /** Invites someone (an account or a user id); resolves with nothing once the invite is committed. */
  invite(inviter: Actor, roomId: string, invitee: Actor | string): Promise<void>;
  /** Leaves (or rejects an invite); resolves with nothing once the leave is committed. */
  leave(user: Actor, roomId: string): Promise<void>;
  /** Sends a message (a string is an `m.text` body); resolves with the event id. */
  send(user: Actor, roomId: string, content: string | Record<string, unknown>, type?: string): Promise<string>;
  /** Sets a state event; resolves with the event id. */
  setState(user: Actor, roomId: string, type: string, stateKey: string, content: Record<string, unknown>): Promise<string>;
  /**
   * Resolves with the first event of the room (oldest first) that `predicate` accepts, as soon as
   * it is committed: woken by the server, no polling.
   */
  waitFor(roomId: string, predicate: (event: ClientEvent) => boolean, options?: WaitForOptions): Promise<ClientEvent>;
  /** Every event of the room, oldest first, as clients see them. */
  timeline(roomId: string): Promise<ClientEvent[]>;
  /** The bridge user's id (`@bridge:<serverName>`), or undefined with `bridge.enabled: false`. */
  readonly bridgeUserId: string | undefined;
  /**
   * Fetches every feed some room follows now, whatever its schedule, and resolves once new items
   * are posted: tests need not wait for the poll interval.
   */
  pollFeeds(): Promise<void>;
  /**
   * Forgets everything (users, rooms, media): a fresh server on the same port. Only with the
   * in-memory database. A `waitFor` still pending keeps watching the old server: stop waiting
   * (and stop your bot clients) first.
   */
  reset(): Promise<void>;
  close(): Promise<void>;
  /** The running app's services, for what the helpers do not cover. Replaced by `reset()`. */
  readonly services: Services;
  /**
   * Fault injection: make the next matching requests answer 429 or 500, hang, drop their
   * connection, or wait (`hs.faults.serverError('GET /_matrix/client/v3/sync', { times: 2 })`).
   * `reset()` removes every fault.
   */
  readonly faults: Faults;
  /** The last 1,000 requests received, oldest first (method, path, status, user, fault). `reset()` empties it. */
  readonly requests: readonly RecordedRequest[];
  /** What a user (a bot) sent, oldest first: in one room, or in every room it is in. */
  sentBy(user: Actor | string, roomId?: string): Promise<ClientEvent[]>;
}

const WAIT_FOR_DEFAULT_TIMEOUT_MS = 10_000;

export async function startTestHomeserver(options: StartTestHomeserverOptions = {}): Promise<TestHomeserver> {
  let app: App | undefined;
  // Requests being answered, so reset() can cut off the old app's long-polls (and only those:
  // idle keep-alive connections stay usable by the client's connection pool).
  const inFlight = new Set<ServerResponse>();
  const faults = new Faults();
  const requests = new RequestLog();
  const server: Server = createServer((req, res) => {
    if (!app) {
      res.writeHead(503).end();
      return;
    }
    inFlight.add(res);
    res.once('close', () => inFlight.delete(res));
    const method = req.method ?? 'GET';
    const url = req.url ?? '/';
    const path = url.split('?', 1)[0]!;
    const action = faults.take(method, path);
    requests.track(req, res, method, path, action);
    if (action === undefined) {
      app.routing(req, res);
    } else if ('status' in action) {
      const body: Record<string, unknown> = { errcode: action.errcode ?? 'M_UNKNOWN', error: action.error ?? 'Injected fault' };
      const headers: Record<string, string> = { 'Content-Type': 'application/json' };
      if (action.retryAfterMs !== undefined) {
        body.retry_after_ms = action.retryAfterMs;
        headers['Retry-After'] = String(Math.ceil(action.retryAfterMs / 1000));
      }
      res.writeHead(action.status, headers).end(JSON.stringify(body));
    } else if ('drop' in action) {
      req.socket.destroy();
    } else if ('delayMs' in action) {
      // Served by whichever app is current then (a reset() in between answers from the new one).
      setTimeout(() => {
        if (!res.destroyed && app) app.routing(req, res);
      }, action.delayMs);
    }
    // hang: nothing; reset() and close() end it with the other requests in flight.
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, '127.0.0.1', () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  const baseUrl = `http://127.0.0.1:${port}`;
  const config = testHomeserverConfig(options, baseUrl);
  try {
    app = await startApp(config, options);
  } catch (err) {
    await closeServer(server);
    throw err;
  }
  return new RunningTestHomeserver(server, inFlight, config, baseUrl, port, app, options, (next) => (app = next), faults, requests);
}

/** The test defaults: in memory, cheap argon2, no rate limits, silent, public URL = the socket. */
export function testHomeserverConfig(options: StartTestHomeserverOptions, baseUrl: string): Config {
  const overrides = options.config ?? {};
  return finishConfig(
    deepMerge(
      {
        server_name: options.serverName ?? 'localhost',
        public_baseurl: `${baseUrl}/`,
        listen: { host: '127.0.0.1', port: Number(new URL(baseUrl).port) },
        database: { path: ':memory:' },
        password_hashing: { memory_cost_kib: 64, time_cost: 1, parallelism: 1 },
        ratelimiting_enabled: options.rateLimits ?? false,
        logging: { level: options.logLevel ?? 'silent' },
        // Feeds in tests are served by the test itself, on loopback.
        // The bridge's crypto device costs a few hundred milliseconds per start and reset(): on
        // when a test asks (`config: { bridge: { encryption: { enabled: true } } }`).
        bridge: { feeds: { allow_private_addresses: true }, encryption: { enabled: false } },
        // A bot's test process builds many servers; each metrics registry would watch the event loop.
        metrics: { enabled: false },
      },
      overrides,
    ),
  );
}

async function startApp(config: Config, options: StartTestHomeserverOptions): Promise<App> {
  const app = await buildApp(config, {
    ...(options.clock ? { clock: options.clock } : {}),
    ...(options.logger ? { logger: options.logger } : {}),
  });
  // The request log names who made each request: the app knows once it has authenticated it.
  app.addHook('onSend', (request, _reply, payload, done) => {
    if (request.requester) (request.raw as RequestWithUser)[REQUESTER] = request.requester.userId;
    done(null, payload);
  });
  await app.ready();
  return app;
}

const REQUESTER = Symbol('bot-homeserver.requester');
type RequestWithUser = IncomingMessage & { [REQUESTER]?: string };

/** One request the test double received. */
export interface RecordedRequest {
  method: string;
  /** The path as sent (percent-encoded), without the query string. */
  path: string;
  /** The query string, tokens cut out. */
  query: string;
  /** The status answered; 0 when there was none (a dropped or hung request, or a client that left). */
  status: number;
  /** Who made it, once authenticated. */
  userId: string | undefined;
  /** The fault that answered it, if one did: `429`, `500`, `drop`, `hang`, `delay`. */
  fault: string | undefined;
}

/** The last requests received, oldest first; bounded, as everything the double keeps. */
class RequestLog {
  static readonly MAX = 1000;
  entries: RecordedRequest[] = [];

  track(req: IncomingMessage, res: ServerResponse, method: string, path: string, action: FaultAction | undefined): void {
    const url = req.url ?? '';
    const queryAt = url.indexOf('?');
    const query = queryAt < 0 ? '' : url.slice(queryAt + 1).replace(/((?:^|&)(?:access_token|refresh_token)=)[^&]*/g, '$1<redacted>');
    const entry: RecordedRequest = { method, path, query, status: 0, userId: undefined, fault: action === undefined ? undefined : faultName(action) };
    this.entries.push(entry);
    if (this.entries.length > RequestLog.MAX) this.entries.splice(0, this.entries.length - RequestLog.MAX);
    res.once('close', () => {
      entry.status = res.headersSent && res.writableFinished ? res.statusCode : 0;
      entry.userId = (req as RequestWithUser)[REQUESTER];
    });
  }

  clear(): void {
    this.entries = [];
  }
}

function faultName(action: FaultAction): string {
  if ('status' in action) return String(action.status);
  if ('drop' in action) return 'drop';
  if ('hang' in action) return 'hang';
  return 'delay';
}

class RunningTestHomeserver implements TestHomeserver {
  readonly serverName: string;
  private closed = false;

  constructor(
    private readonly server: Server,
    private readonly inFlight: Set<ServerResponse>,
    private readonly config: Config,
    readonly baseUrl: string,
    readonly port: number,
    private app: App,
    private readonly options: StartTestHomeserverOptions,
    private readonly setApp: (app: App) => void,
    readonly faults: Faults,
    private readonly requestLog: RequestLog,
  ) {
    this.serverName = config.server_name;
  }

  get services(): Services {
    return this.app.homeserver.services;
  }

  get requests(): readonly RecordedRequest[] {
    return this.requestLog.entries;
  }

  async sentBy(user: Actor | string, roomId?: string): Promise<ClientEvent[]> {
    const userId = userIdOf(user);
    const rooms = roomId !== undefined ? [roomId] : [...(await this.services.roomCache.roomsOf(userId)).keys()];
    const events: ClientEvent[] = [];
    for (const room of rooms) events.push(...(await this.timeline(room)).filter((event) => event.sender === userId));
    return events.sort((a, b) => a.origin_server_ts - b.origin_server_ts);
  }

  get bridgeUserId(): string | undefined {
    return this.app.homeserver.bridge?.userId;
  }

  async pollFeeds(): Promise<void> {
    const bridge = this.app.homeserver.bridge;
    if (!bridge) throw new TestHomeserverError('pollFeeds: the bridge is disabled (bridge.enabled: false)');
    await bridge.feeds.pollDue(Number.MAX_SAFE_INTEGER);
  }

  async createUser(name: string, options: CreateUserOptions = {}): Promise<TestAccount> {
    const password = options.password ?? `password-of-${name}`;
    const row = await asHelper(`createUser(${JSON.stringify(name)})`, () =>
      this.services.accounts.createUser({
        localpart: name,
        password,
        admin: options.admin ?? false,
        ...(options.displayName !== undefined ? { displayname: options.displayName } : {}),
      }),
    );
    return this.login(row.user_id, row.localpart, password);
  }

  async createBot(name: string): Promise<TestBot> {
    const bot = await asHelper(`createBot(${JSON.stringify(name)})`, () => this.services.accounts.createOrRotateBot(name));
    const account = await this.login(bot.user_id, this.services.accounts.localpartNamedBy(name), bot.password);
    return { ...account, secret: bot.password };
  }

  private async login(userId: string, localpart: string, password: string): Promise<TestAccount> {
    const answer = await this.call(undefined, 'POST', '/login', {
      type: 'm.login.password',
      identifier: { type: 'm.id.user', user: localpart },
      password,
      initial_device_display_name: 'startTestHomeserver',
    });
    return { userId, localpart, password, accessToken: String(answer.access_token), deviceId: String(answer.device_id) };
  }

  async createRoom(owner: Actor, options: CreateRoomOptions = {}): Promise<string> {
    const members = options.members ?? [];
    const invite = [...(options.invite ?? []), ...members].map(userIdOf);
    const body: Record<string, unknown> = { ...options.extra };
    if (options.name !== undefined) body.name = options.name;
    if (options.topic !== undefined) body.topic = options.topic;
    if (options.preset !== undefined) body.preset = options.preset;
    if (options.visibility !== undefined) body.visibility = options.visibility;
    if (options.alias !== undefined) body.room_alias_name = options.alias;
    if (options.isDirect !== undefined) body.is_direct = options.isDirect;
    if (invite.length > 0) body.invite = invite;
    const roomId = String((await this.call(owner, 'POST', '/createRoom', body)).room_id);
    for (const member of members) await this.join(member, roomId);
    return roomId;
  }

  async join(user: Actor, roomIdOrAlias: string): Promise<string> {
    return String((await this.call(user, 'POST', `/join/${encodeURIComponent(roomIdOrAlias)}`, {})).room_id);
  }

  async invite(inviter: Actor, roomId: string, invitee: Actor | string): Promise<void> {
    await this.call(inviter, 'POST', `/rooms/${encodeURIComponent(roomId)}/invite`, { user_id: userIdOf(invitee) });
  }

  async leave(user: Actor, roomId: string): Promise<void> {
    await this.call(user, 'POST', `/rooms/${encodeURIComponent(roomId)}/leave`, {});
  }

  private txnCounter = 0;

  async send(user: Actor, roomId: string, content: string | Record<string, unknown>, type = 'm.room.message'): Promise<string> {
    const body = typeof content === 'string' ? { msgtype: 'm.text', body: content } : content;
    const txnId = `test-${Date.now()}-${++this.txnCounter}`;
    const path = `/rooms/${encodeURIComponent(roomId)}/send/${encodeURIComponent(type)}/${txnId}`;
    return String((await this.call(user, 'PUT', path, body)).event_id);
  }

  async setState(user: Actor, roomId: string, type: string, stateKey: string, content: Record<string, unknown>): Promise<string> {
    const path = `/rooms/${encodeURIComponent(roomId)}/state/${encodeURIComponent(type)}/${encodeURIComponent(stateKey)}`;
    return String((await this.call(user, 'PUT', path, content)).event_id);
  }

  async timeline(roomId: string): Promise<ClientEvent[]> {
    return this.eventsAfter(roomId, -1);
  }

  async waitFor(roomId: string, predicate: (event: ClientEvent) => boolean, options: WaitForOptions = {}): Promise<ClientEvent> {
    const timeout = options.timeout ?? WAIT_FOR_DEFAULT_TIMEOUT_MS;
    const services = this.services;
    let position = -1;
    if (options.after !== undefined) {
      const row = await services.storage.rooms.getEvent(options.after);
      if (!row || row.room_id !== roomId) throw new TestHomeserverError(`waitFor: ${options.after} is not an event of ${roomId}`);
      position = row.stream_ordering;
    }
    // Watch before reading, so a commit between the read and the wait still wakes us.
    let changed!: () => void;
    let change = new Promise<void>((resolve) => (changed = resolve));
    const stopObserving = services.notifier.observe(() => changed());
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), timeout)));
    const seen: ClientEvent[] = [];
    try {
      for (;;) {
        const upTo = services.stream.current;
        const events = await this.eventsAfter(roomId, position, upTo);
        position = Math.max(position, upTo);
        for (const event of events) {
          seen.push(event);
          if (predicate(event)) return event;
        }
        if ((await Promise.race([change, timedOut])) === 'timeout') {
          const summary = seen.slice(-10).map((e) => `${e.sender} ${e.type} ${JSON.stringify(e.content).slice(0, 80)}`);
          throw new TestHomeserverError(`waitFor: no matching event in ${roomId} within ${timeout} ms; the last events were:\n  ${summary.join('\n  ') || '(none)'}`);
        }
        change = new Promise<void>((resolve) => (changed = resolve));
      }
    } finally {
      clearTimeout(timer);
      stopObserving();
    }
  }

  /** Events of the room with a position in (after, upTo], oldest first, as someone who sent none of them sees them. */
  private async eventsAfter(roomId: string, after: number, upTo = this.services.stream.current): Promise<ClientEvent[]> {
    const services = this.services;
    const rows = await services.storage.rooms.eventsOldestFirst(roomId, after + 1, upTo + 1, Number.MAX_SAFE_INTEGER);
    return services.roomReader.render(rows.map(eventFromRow), { userId: '', deviceId: '' });
  }

  async reset(): Promise<void> {
    if (this.closed) throw new TestHomeserverError('reset(): the test homeserver is closed');
    if (this.config.database.path !== ':memory:') {
      throw new TestHomeserverError('reset() needs the in-memory database: a database file would keep its data');
    }
    // One reset at a time, and close() waits for it: otherwise an app could outlive the server.
    const previous = this.resetting;
    const next = (async () => {
      await previous;
      if (this.closed) return;
      const old = this.app;
      const fresh = await startApp(this.config, this.options);
      if (this.closed) {
        await fresh.close();
        return;
      }
      this.app = fresh;
      this.setApp(fresh);
      this.faults.clear();
      this.requestLog.clear();
      // Requests still with the old app (parked syncs, mostly) would answer from the old state.
      for (const res of this.inFlight) res.destroy();
      await old.close();
    })();
    this.resetting = next.catch(() => undefined);
    await next;
  }

  private resetting: Promise<void> = Promise.resolve();

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.resetting;
    this.server.closeAllConnections();
    await closeServer(this.server);
    await this.app.close();
  }

  private async call(user: Actor | undefined, method: string, path: string, body?: unknown): Promise<Record<string, unknown>> {
    const headers: Record<string, string> = { 'Content-Type': 'application/json' };
    if (user) headers.Authorization = `Bearer ${user.accessToken}`;
    const response = await fetch(`${this.baseUrl}/_matrix/client/v3${path}`, {
      method,
      headers,
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const answer = (await response.json().catch(() => ({}))) as Record<string, unknown>;
    if (!response.ok) {
      const errcode = typeof answer.errcode === 'string' ? answer.errcode : undefined;
      const as = user ? ` as ${user.userId}` : '';
      throw new TestHomeserverError(`${method} ${path}${as} → ${response.status} ${errcode ?? ''}: ${String(answer.error ?? '')}`, response.status, errcode);
    }
    return answer;
  }
}

function userIdOf(user: Actor | string): string {
  return typeof user === 'string' ? user : user.userId;
}

function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => server.close(() => resolve()));
}

