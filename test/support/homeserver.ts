/**
 * Test helpers: a homeserver built in-process on an in-memory database, with cheap password
 * hashing, no rate limits (unless a test asks) and a clock the test can move.
 */
import supertest from 'supertest';
import { buildApp, type App, type AppDependencies } from '../../src/app.js';
import type { Clock } from '../../src/core/clock.js';
import { finishConfig, type Config } from '../../src/config/index.js';
import type { Services } from '../../src/services.js';
import { releaseSchema, testDatabase } from './test-schemas.js';

export const SERVER_NAME = 'test.local';

/** A clock that only moves when told to. */
export class FakeClock implements Clock {
  constructor(private current = Date.parse('2026-01-01T00:00:00Z')) {}
  now(): number {
    return this.current;
  }
  advance(ms: number): void {
    this.current += ms;
  }
}

export function testConfig(overrides: Record<string, unknown> = {}): Config {
  return finishConfig({
    server_name: SERVER_NAME,
    public_baseurl: 'https://matrix.test.local/',
    database: testDatabase(),
    password_hashing: { memory_cost_kib: 64, time_cost: 1, parallelism: 1 },
    ratelimiting_enabled: false,
    logging: { level: 'silent' },
    // Each app's metrics start an event-loop monitor; tests of metrics turn them on.
    metrics: { enabled: false },
    // The bridge user is a room member with a parked sync of its own; tests that want it say so
    // (see test/support/bridge.ts).
    bridge: { enabled: false },
    ...overrides,
  });
}

export interface TestHomeserver {
  app: App;
  services: Services;
  config: Config;
  clock: FakeClock;
  /** supertest bound to the app (a real socket on loopback). */
  http: ReturnType<typeof supertest>;
  close(): Promise<void>;
}

export async function startTestHomeserver(
  overrides: Record<string, unknown> = {},
  options: { clock?: FakeClock; logger?: AppDependencies['logger']; bridge?: AppDependencies['bridge'] } = {},
): Promise<TestHomeserver> {
  const config = testConfig(overrides);
  const clock = options.clock ?? new FakeClock();
  const app = await buildApp(config, { clock, logger: options.logger, bridge: options.bridge });
  await app.ready();
  return {
    app,
    services: app.homeserver.services,
    config,
    clock,
    http: supertest(app.server),
    close: async () => {
      await app.close();
      await releaseSchema(config.database);
    },
  };
}

export interface TestUser {
  userId: string;
  password: string;
  accessToken: string;
  deviceId: string;
}

/** Creates an account directly and logs it in through HTTP. */
export async function createUser(
  hs: TestHomeserver,
  localpart: string,
  options: { admin?: boolean; password?: string } = {},
): Promise<TestUser> {
  const password = options.password ?? `pw-${localpart}`;
  const user = await hs.services.accounts.createUser({ localpart, password, admin: options.admin });
  const accessToken = await login(hs, localpart, password);
  const whoami = await hs.http.get('/_matrix/client/v3/account/whoami').auth(accessToken, { type: 'bearer' });
  return { userId: user.user_id, password, accessToken, deviceId: whoami.body.device_id as string };
}

export async function login(hs: TestHomeserver, user: string, password: string): Promise<string> {
  const res = await hs.http
    .post('/_matrix/client/v3/login')
    .send({ type: 'm.login.password', identifier: { type: 'm.id.user', user }, password });
  if (res.status !== 200) throw new Error(`login failed: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body.access_token as string;
}
