/** Regression tests for races and resource limits found in review. */
import { afterEach, describe, expect, it } from 'vitest';
import { RateLimiter } from '../../src/ratelimit/rate-limiter.js';
import { createUser, FakeClock, login, SERVER_NAME, startTestHomeserver, type TestHomeserver } from '../support/homeserver.js';
import { expectMatrixError } from '../support/spec-validator.js';

const V3 = '/_matrix/client/v3';

/**
 * Holds password verification until released, to line up a race deterministically: `checked`
 * resolves once a login has verified the password and is waiting to go on.
 */
function holdPasswordChecks(hs: TestHomeserver): { checked: Promise<void>; release: () => void } {
  const hasher = (hs.services.sessions as unknown as { hasher: { verify: (...args: unknown[]) => Promise<boolean> } }).hasher;
  const original = hasher.verify.bind(hasher);
  let release!: () => void;
  let reached!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  const checked = new Promise<void>((resolve) => (reached = resolve));
  hasher.verify = async (...args: unknown[]) => {
    const result = await original(...args);
    reached();
    await gate;
    return result;
  };
  return { checked, release };
}

describe('races', () => {
  let hs: TestHomeserver;
  afterEach(() => hs.close());

  it('a login racing deactivation gets no token that outlives it', async () => {
    hs = await startTestHomeserver();
    const bob = await createUser(hs, 'bob');
    const { checked, release } = holdPasswordChecks(hs);
    const pending = hs.http.post(`${V3}/login`).send({ type: 'm.login.password', user: 'bob', password: bob.password }).then((res) => res);
    await checked;
    await hs.services.accounts.deactivate(bob.userId);
    release();
    expectMatrixError(await pending, 403, 'M_FORBIDDEN');
  });

  it('a login with the old secret racing a rotation gets no token', async () => {
    hs = await startTestHomeserver();
    const bot = await hs.services.accounts.createOrRotateBot('robot');
    const { checked, release } = holdPasswordChecks(hs);
    const pending = hs.http.post(`${V3}/login`).send({ type: 'm.login.password', user: 'robot', password: bot.password }).then((res) => res);
    await checked;
    await hs.services.accounts.createOrRotateBot('robot');
    release();
    expectMatrixError(await pending, 403, 'M_FORBIDDEN');
  });

  it('a refreshed token revoked between lookup and first use is refused', async () => {
    hs = await startTestHomeserver();
    await hs.services.accounts.createUser({ localpart: 'bot', password: 'pw' });
    const session = await hs.services.sessions.createSession(`@bot:${SERVER_NAME}`, { refreshable: true });
    const store = hs.services.storage.sessions;
    const find = store.findAccessToken.bind(store);
    store.findAccessToken = async (hash: string) => {
      const row = await find(hash);
      if (row) await hs.services.sessions.logoutAll(row.user_id); // revoked right after the lookup
      return row;
    };
    await expect(hs.services.sessions.authenticate(session.access_token)).rejects.toMatchObject({ errcode: 'M_UNKNOWN_TOKEN' });
  });
});

describe('limits on what a client can make the server hold', () => {
  let hs: TestHomeserver;
  afterEach(() => hs.close());

  it('counts failed logins sent in parallel', async () => {
    hs = await startTestHomeserver({ ratelimiting_enabled: true, rc_login: { failed_attempts: { per_second: 0.01, burst_count: 5 } } });
    await hs.services.accounts.createUser({ localpart: 'alice', password: 'right' });
    const attempts = await Promise.all(
      Array.from({ length: 20 }, () => hs.http.post(`${V3}/login`).send({ type: 'm.login.password', user: 'alice', password: 'wrong' })),
    );
    const statuses = attempts.map((res) => res.status);
    expect(statuses.filter((s) => s === 403)).toHaveLength(5);
    expect(statuses.filter((s) => s === 429)).toHaveLength(15);
  });

  it('refuses overlong user names and display names before doing anything with them', async () => {
    hs = await startTestHomeserver({ enable_registration: true });
    const long = 'a'.repeat(256);
    expectMatrixError(await hs.http.post(`${V3}/login`).send({ type: 'm.login.password', user: long, password: 'x' }), 400, 'M_BAD_JSON');
    expectMatrixError(
      await hs.http.post(`${V3}/login`).send({ type: 'm.login.password', identifier: { type: 'm.id.user', user: long }, password: 'x' }),
      400,
      'M_BAD_JSON',
    );
    expectMatrixError(
      await hs.http.post(`${V3}/login`).send({ type: 'm.login.password', user: 'a', password: 'x', initial_device_display_name: 'd'.repeat(101) }),
      400,
      'M_BAD_JSON',
    );
  });

  it('checks the device id before registering, so a refused registration leaves no account', async () => {
    hs = await startTestHomeserver({ enable_registration: true });
    const res = await hs.http
      .post(`${V3}/register`)
      .send({ username: 'dev', password: 'pw', device_id: 'D'.repeat(600), auth: { type: 'm.login.dummy' } });
    expectMatrixError(res, 400, 'M_INVALID_PARAM');
    expect(await hs.services.accounts.getUser(`@dev:${SERVER_NAME}`)).toBeUndefined();
  });

  it('hands out no nonces without a shared secret, and caps outstanding ones', async () => {
    hs = await startTestHomeserver();
    expectMatrixError(await hs.http.get('/_synapse/admin/v1/register'), 400, 'M_UNKNOWN');
    await hs.close();
    hs = await startTestHomeserver({ registration_shared_secret: 's' });
    const first = hs.services.registration.issueNonce();
    for (let i = 0; i < 10_000; i++) hs.services.registration.issueNonce();
    const res = await hs.http.post('/_synapse/admin/v1/register').send({ nonce: first, username: 'x', password: 'y', mac: 'z' });
    expectMatrixError(res, 400, 'M_UNKNOWN');
    expect(res.body.error).toBe('unrecognised nonce');
    const objectNonce = await hs.http.post('/_synapse/admin/v1/register').send({ nonce: { toString: 1 } });
    expectMatrixError(objectNonce, 400, 'M_BAD_JSON');
  });

  it('refuses an absurd paging offset with 400', async () => {
    hs = await startTestHomeserver();
    const admin = await createUser(hs, 'admin', { admin: true });
    for (const from of ['1e300', '99999999999999999999']) {
      const res = await hs.http.get(`/_synapse/admin/v2/users?from=${from}`).auth(admin.accessToken, { type: 'bearer' });
      expectMatrixError(res, 400, 'M_INVALID_PARAM');
    }
  });

  it('prunes tokens a day after they expired', async () => {
    const clock = new FakeClock();
    hs = await startTestHomeserver({ refresh_token_lifetime: '1h' }, { clock });
    await hs.services.accounts.createUser({ localpart: 'bot', password: 'pw' });
    const session = await hs.services.sessions.createSession(`@bot:${SERVER_NAME}`, { refreshable: true });
    const keeper = await login(hs, 'bot', 'pw');
    expect(await hs.services.sessions.pruneExpiredTokens()).toBe(0);
    clock.advance(3_600_000 + 86_400_001);
    expect(await hs.services.sessions.pruneExpiredTokens()).toBe(2);
    expectMatrixError(await hs.http.post(`${V3}/refresh`).send({ refresh_token: session.refresh_token }), 401, 'M_UNKNOWN_TOKEN');
    expect((await hs.http.get(`${V3}/account/whoami`).auth(keeper, { type: 'bearer' })).status).toBe(200);
  });
});

describe('RateLimiter memory', () => {
  it('forgets the least recently used buckets past its cap', () => {
    const clock = new FakeClock(0);
    const limiter = new RateLimiter({ per_second: 0, burst_count: 1 }, clock, true, 3);
    for (const key of ['a', 'b', 'c']) expect(limiter.check(key).allowed).toBe(true);
    expect(limiter.check('a').allowed).toBe(false);
    limiter.check('d');
    expect(limiter.size).toBe(3);
    // A refused check records nothing, so 'a' was the least recently recorded and was forgotten.
    expect(limiter.check('a').allowed).toBe(true);
    expect(limiter.check('c', { record: false }).allowed).toBe(false);
  });
});
