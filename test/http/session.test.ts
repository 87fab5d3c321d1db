import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createUser, login, SERVER_NAME, startTestHomeserver, type TestHomeserver } from '../support/homeserver.js';
import { expectMatchesSpec, expectMatrixError } from '../support/spec-validator.js';

const V3 = '/_matrix/client/v3';
const R0 = '/_matrix/client/r0';

describe('login', () => {
  let hs: TestHomeserver;
  beforeEach(async () => {
    hs = await startTestHomeserver();
    await hs.services.accounts.createUser({ localpart: 'alice', password: 'wonderland' });
  });
  afterEach(() => hs.close());

  it('lists password login as its flow', async () => {
    const res = await hs.http.get(`${V3}/login`);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ flows: [{ type: 'm.login.password' }, { type: 'm.login.application_service' }] });
    expectMatchesSpec('GET', `${V3}/login`, res);
  });

  it('logs in with an m.id.user identifier and answers the full session', async () => {
    const res = await hs.http
      .post(`${V3}/login`)
      .send({ type: 'm.login.password', identifier: { type: 'm.id.user', user: 'alice' }, password: 'wonderland' });
    expect(res.status).toBe(200);
    expectMatchesSpec('POST', `${V3}/login`, res);
    expect(res.body.user_id).toBe(`@alice:${SERVER_NAME}`);
    expect(res.body.home_server).toBe(SERVER_NAME);
    expect(res.body.device_id).toMatch(/^[A-Z]{10}$/);
    expect(res.body.access_token).toEqual(expect.any(String));
    expect(res.body.well_known).toEqual({ 'm.homeserver': { base_url: 'https://matrix.test.local/' } });
    expect(res.body).not.toHaveProperty('refresh_token');
    expect(res.body).not.toHaveProperty('expires_in_ms');
  });

  it.each([
    ['legacy top-level user, localpart', { user: 'alice' }],
    ['legacy top-level user, full id', { user: `@alice:${SERVER_NAME}` }],
    ['identifier with a full user id', { identifier: { type: 'm.id.user', user: `@alice:${SERVER_NAME}` } }],
    ['identifier in other case', { identifier: { type: 'm.id.user', user: 'ALICE' } }],
  ])('accepts %s', async (_name, who) => {
    const res = await hs.http.post(`${R0}/login`).send({ type: 'm.login.password', password: 'wonderland', ...who });
    expect(res.status).toBe(200);
    expect(res.body.user_id).toBe(`@alice:${SERVER_NAME}`);
  });

  it('refuses a wrong password, an unknown user and a user of another server alike', async () => {
    for (const [user, password] of [
      ['alice', 'wrong'],
      ['nobody', 'wonderland'],
      ['@alice:elsewhere.example', 'wonderland'],
    ]) {
      const res = await hs.http.post(`${V3}/login`).send({ type: 'm.login.password', user, password });
      expectMatrixError(res, 403, 'M_FORBIDDEN');
      expect(res.body.error).toBe('Invalid username or password');
    }
  });

  it('explains bad login requests', async () => {
    const post = (body: unknown) => hs.http.post(`${V3}/login`).set('Content-Type', 'application/json').send(JSON.stringify(body));
    expectMatrixError(await post({ type: 'm.login.token', token: 'x' }), 400, 'M_UNKNOWN');
    expectMatrixError(await post({ password: 'x', user: 'alice' }), 400, 'M_BAD_JSON');
    expectMatrixError(await post({ type: 'm.login.password', user: 'alice', password: 5 }), 400, 'M_BAD_JSON');
    expectMatrixError(await post({ type: 'm.login.password', password: 'x' }), 400, 'M_INVALID_PARAM');
    expectMatrixError(
      await post({ type: 'm.login.password', identifier: { type: 'm.id.phone', phone: '1' }, password: 'x' }),
      400,
      'M_UNKNOWN',
    );
    expectMatrixError(await post([1, 2]), 400, 'M_BAD_JSON');
    const notJson = await hs.http.post(`${V3}/login`).set('Content-Type', 'application/json').send('{"type":');
    expectMatrixError(notJson, 400, 'M_NOT_JSON');
    const empty = await hs.http.post(`${V3}/login`);
    expectMatrixError(empty, 400, 'M_NOT_JSON');
  });

  it('reads JSON bodies sent without a JSON content type', async () => {
    const res = await hs.http
      .post(`${V3}/login`)
      .set('Content-Type', 'text/plain')
      .send(JSON.stringify({ type: 'm.login.password', user: 'alice', password: 'wonderland' }));
    expect(res.status).toBe(200);
  });

  it('reuses a supplied device id and honours the initial display name', async () => {
    const body = { type: 'm.login.password', user: 'alice', password: 'wonderland', device_id: 'BOTDEVICE' };
    const first = await hs.http.post(`${V3}/login`).send({ ...body, initial_device_display_name: 'my bot' });
    const second = await hs.http.post(`${V3}/login`).send(body);
    expect(first.body.device_id).toBe('BOTDEVICE');
    expect(second.body.device_id).toBe('BOTDEVICE');
    expect(second.body.access_token).not.toBe(first.body.access_token);
    const device = await hs.services.storage.sessions.getDevice(`@alice:${SERVER_NAME}`, 'BOTDEVICE');
    expect(device?.display_name).toBe('my bot');
    // Both tokens of the device work, as in Synapse.
    for (const token of [first.body.access_token, second.body.access_token]) {
      const whoami = await hs.http.get(`${V3}/account/whoami`).auth(token, { type: 'bearer' });
      expect(whoami.body).toEqual({ user_id: `@alice:${SERVER_NAME}`, device_id: 'BOTDEVICE', is_guest: false });
    }
  });

  it('refuses a device id longer than 512 characters', async () => {
    const res = await hs.http
      .post(`${V3}/login`)
      .send({ type: 'm.login.password', user: 'alice', password: 'wonderland', device_id: 'D'.repeat(513) });
    expectMatrixError(res, 400, 'M_INVALID_PARAM');
  });
});

describe('access tokens', () => {
  let hs: TestHomeserver;
  beforeEach(async () => {
    hs = await startTestHomeserver();
  });
  afterEach(() => hs.close());

  it('whoami accepts the token as a Bearer header and as ?access_token=', async () => {
    const alice = await createUser(hs, 'alice');
    const viaHeader = await hs.http.get(`${V3}/account/whoami`).set('Authorization', `Bearer ${alice.accessToken}`);
    expect(viaHeader.status).toBe(200);
    expectMatchesSpec('GET', `${V3}/account/whoami`, viaHeader);
    const viaQuery = await hs.http.get(`${R0}/account/whoami?access_token=${encodeURIComponent(alice.accessToken)}`);
    expect(viaQuery.status).toBe(200);
    expect(viaQuery.body).toEqual(viaHeader.body);
    expect(viaQuery.body.user_id).toBe(alice.userId);
  });

  it('answers 401 M_MISSING_TOKEN without a token and M_UNKNOWN_TOKEN for a bad one', async () => {
    expectMatrixError(await hs.http.get(`${V3}/account/whoami`), 401, 'M_MISSING_TOKEN');
    expectMatrixError(await hs.http.get(`${V3}/account/whoami`).set('Authorization', 'Basic abc'), 401, 'M_MISSING_TOKEN');
    const bad = await hs.http.get(`${V3}/account/whoami`).set('Authorization', 'Bearer nope');
    expectMatrixError(bad, 401, 'M_UNKNOWN_TOKEN');
    expect(bad.body.soft_logout).toBe(false);
  });

  it('logout ends the device; other devices keep working', async () => {
    const alice = await createUser(hs, 'alice');
    const other = await login(hs, 'alice', alice.password);
    const res = await hs.http.post(`${V3}/logout`).auth(alice.accessToken, { type: 'bearer' });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({});
    expectMatchesSpec('POST', `${V3}/logout`, res);
    expectMatrixError(await hs.http.get(`${V3}/account/whoami`).auth(alice.accessToken, { type: 'bearer' }), 401, 'M_UNKNOWN_TOKEN');
    expect((await hs.http.get(`${V3}/account/whoami`).auth(other, { type: 'bearer' })).status).toBe(200);
    expect(await hs.services.storage.sessions.getDevice(alice.userId, alice.deviceId)).toBeUndefined();
  });

  it('logout/all ends every session of the user, and only that user', async () => {
    const alice = await createUser(hs, 'alice');
    const bob = await createUser(hs, 'bob');
    const other = await login(hs, 'alice', alice.password);
    const res = await hs.http.post(`${V3}/logout/all`).auth(alice.accessToken, { type: 'bearer' });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({});
    for (const token of [alice.accessToken, other]) {
      expectMatrixError(await hs.http.get(`${V3}/account/whoami`).auth(token, { type: 'bearer' }), 401, 'M_UNKNOWN_TOKEN');
    }
    expect((await hs.http.get(`${V3}/account/whoami`).auth(bob.accessToken, { type: 'bearer' })).status).toBe(200);
  });

  it('capabilities require a token and say room version 10 is the default', async () => {
    const alice = await createUser(hs, 'alice');
    expectMatrixError(await hs.http.get(`${V3}/capabilities`), 401, 'M_MISSING_TOKEN');
    const res = await hs.http.get(`${V3}/capabilities`).auth(alice.accessToken, { type: 'bearer' });
    expect(res.status).toBe(200);
    expectMatchesSpec('GET', `${V3}/capabilities`, res);
    expect(res.body.capabilities['m.room_versions'].default).toBe('10');
  });
});

describe('expiring tokens and refresh', () => {
  let hs: TestHomeserver;
  beforeEach(async () => {
    hs = await startTestHomeserver({ refreshable_access_token_lifetime: '5m', refresh_token_lifetime: '1d' });
    await hs.services.accounts.createUser({ localpart: 'bot', password: 'secret' });
  });
  afterEach(() => hs.close());

  const loginRefreshable = () =>
    hs.http.post(`${V3}/login`).send({ type: 'm.login.password', user: 'bot', password: 'secret', refresh_token: true });
  const whoami = (token: string) => hs.http.get(`${V3}/account/whoami`).auth(token, { type: 'bearer' });

  it('gives refresh_token and expires_in_ms when asked, and an expired token soft-logs out', async () => {
    const res = await loginRefreshable();
    expect(res.status).toBe(200);
    expectMatchesSpec('POST', `${V3}/login`, res);
    expect(res.body.expires_in_ms).toBe(300_000);
    expect(res.body.refresh_token).toEqual(expect.any(String));
    expect((await whoami(res.body.access_token)).status).toBe(200);
    hs.clock.advance(300_000);
    const expired = await whoami(res.body.access_token);
    expectMatrixError(expired, 401, 'M_UNKNOWN_TOKEN');
    expect(expired.body.soft_logout).toBe(true);
  });

  it('refreshes; the old pair works until the new pair is used, then not', async () => {
    const first = (await loginRefreshable()).body;
    hs.clock.advance(290_000);
    const refreshed = await hs.http.post(`${V3}/refresh`).send({ refresh_token: first.refresh_token });
    expect(refreshed.status).toBe(200);
    expectMatchesSpec('POST', `${V3}/refresh`, refreshed);
    expect(refreshed.body.expires_in_ms).toBe(300_000);
    expect(refreshed.body.refresh_token).not.toBe(first.refresh_token);
    // A retry with the old refresh token (the answer was lost) still works...
    const retried = await hs.http.post(`${V3}/refresh`).send({ refresh_token: first.refresh_token });
    expect(retried.status).toBe(200);
    expect((await whoami(first.access_token)).status).toBe(200);
    // ...until the newest access token is used: then the old tokens are gone.
    hs.clock.advance(20_000);
    expect((await whoami(retried.body.access_token)).status).toBe(200);
    expectMatrixError(await whoami(first.access_token), 401, 'M_UNKNOWN_TOKEN');
    expectMatrixError(await hs.http.post(`${V3}/refresh`).send({ refresh_token: first.refresh_token }), 401, 'M_UNKNOWN_TOKEN');
    // The superseded answer of the first refresh is void too.
    expectMatrixError(await whoami(refreshed.body.access_token), 401, 'M_UNKNOWN_TOKEN');
  });

  it('refuses unknown and expired refresh tokens', async () => {
    expectMatrixError(await hs.http.post(`${V3}/refresh`).send({ refresh_token: 'nope' }), 401, 'M_UNKNOWN_TOKEN');
    expectMatrixError(await hs.http.post(`${V3}/refresh`).send({}), 400, 'M_BAD_JSON');
    const first = (await loginRefreshable()).body;
    hs.clock.advance(86_400_000);
    expectMatrixError(await hs.http.post(`${V3}/refresh`).send({ refresh_token: first.refresh_token }), 403, 'M_FORBIDDEN');
  });

  it('a non-refreshable login follows nonrefreshable_access_token_lifetime', async () => {
    await hs.close();
    hs = await startTestHomeserver({ nonrefreshable_access_token_lifetime: '1h' });
    await hs.services.accounts.createUser({ localpart: 'bot', password: 'secret' });
    const res = await hs.http.post(`${V3}/login`).send({ type: 'm.login.password', user: 'bot', password: 'secret' });
    expect(res.body.expires_in_ms).toBe(3_600_000);
    expect(res.body).not.toHaveProperty('refresh_token');
  });
});

describe('login rate limits', () => {
  let hs: TestHomeserver;
  afterEach(() => hs.close());

  it('limits failed attempts per account with 429, retry_after_ms and Retry-After', async () => {
    hs = await startTestHomeserver({
      ratelimiting_enabled: true,
      rc_login: { failed_attempts: { per_second: 0.1, burst_count: 2 } },
    });
    await hs.services.accounts.createUser({ localpart: 'alice', password: 'right' });
    const attempt = (password: string) =>
      hs.http.post(`${V3}/login`).send({ type: 'm.login.password', user: 'alice', password });
    expectMatrixError(await attempt('wrong'), 403, 'M_FORBIDDEN');
    expectMatrixError(await attempt('wrong'), 403, 'M_FORBIDDEN');
    const limited = await attempt('right');
    expectMatrixError(limited, 429, 'M_LIMIT_EXCEEDED');
    expect(limited.body.retry_after_ms).toBeGreaterThan(0);
    expect(Number(limited.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    hs.clock.advance(limited.body.retry_after_ms);
    expect((await attempt('right')).status).toBe(200);
  });

  it('limits logins per address', async () => {
    hs = await startTestHomeserver({
      ratelimiting_enabled: true,
      rc_login: { address: { per_second: 0.01, burst_count: 3 } },
    });
    await hs.services.accounts.createUser({ localpart: 'alice', password: 'right' });
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) {
      statuses.push((await hs.http.post(`${V3}/login`).send({ type: 'm.login.password', user: 'alice', password: 'right' })).status);
    }
    expect(statuses).toEqual([200, 200, 200, 429]);
  });

  it('behind a reverse proxy (listen.x_forwarded) limits each client address, not the proxy', async () => {
    hs = await startTestHomeserver({
      ratelimiting_enabled: true,
      listen: { x_forwarded: true },
      rc_login: { address: { per_second: 0.01, burst_count: 1 } },
    });
    await hs.services.accounts.createUser({ localpart: 'alice', password: 'right' });
    const from = (address: string) =>
      hs.http
        .post(`${V3}/login`)
        .set('X-Forwarded-For', address)
        .send({ type: 'm.login.password', user: 'alice', password: 'right' });
    expect((await from('203.0.113.1')).status).toBe(200);
    expect((await from('203.0.113.2')).status).toBe(200);
    expect((await from('203.0.113.1')).status).toBe(429);
  });
});
