import { afterEach, describe, expect, it } from 'vitest';
import { SERVER_NAME, startTestHomeserver, type TestHomeserver } from '../support/homeserver.js';
import { expectMatchesSpec, expectMatrixError } from '../support/spec-validator.js';

const V3 = '/_matrix/client/v3';

describe('open registration', () => {
  let hs: TestHomeserver;
  afterEach(() => hs.close());

  it('is off by default', async () => {
    hs = await startTestHomeserver();
    const res = await hs.http.post(`${V3}/register`).send({ username: 'alice', password: 'pw', auth: { type: 'm.login.dummy' } });
    expectMatrixError(res, 403, 'M_FORBIDDEN');
    expect(res.body.error).toBe('Registration has been disabled');
    expectMatrixError(await hs.http.get(`${V3}/register/available?username=alice`), 403, 'M_FORBIDDEN');
    expect(await hs.services.accounts.getUser(`@alice:${SERVER_NAME}`)).toBeUndefined();
  });

  it('runs the m.login.dummy flow: a 401 challenge, then the account and a session', async () => {
    hs = await startTestHomeserver({ enable_registration: true });
    const challenge = await hs.http.post(`${V3}/register`).send({ username: 'alice', password: 'pw' });
    expect(challenge.status).toBe(401);
    expectMatchesSpec('POST', `${V3}/register`, challenge);
    expect(challenge.body).toEqual({ session: expect.any(String), flows: [{ stages: ['m.login.dummy'] }], params: {} });

    const done = await hs.http.post(`${V3}/register`).send({
      username: 'Alice',
      password: 'pw',
      initial_device_display_name: 'test bot',
      auth: { type: 'm.login.dummy', session: challenge.body.session },
    });
    expect(done.status).toBe(200);
    expectMatchesSpec('POST', `${V3}/register`, done);
    expect(done.body.user_id).toBe(`@alice:${SERVER_NAME}`);
    expect(done.body.home_server).toBe(SERVER_NAME);
    const whoami = await hs.http.get(`${V3}/account/whoami`).auth(done.body.access_token, { type: 'bearer' });
    expect(whoami.body).toMatchObject({ user_id: `@alice:${SERVER_NAME}`, device_id: done.body.device_id });
    const login = await hs.http.post(`${V3}/login`).send({ type: 'm.login.password', user: 'alice', password: 'pw' });
    expect(login.status).toBe(200);

    // The session is complete: the same request again gets the same answer (user-interactive
    // auth, as Synapse), and no second account.
    const replay = await hs.http.post(`${V3}/register`).send({
      username: 'Alice',
      password: 'pw',
      initial_device_display_name: 'test bot',
      auth: { type: 'm.login.dummy', session: challenge.body.session },
    });
    expect(replay.status).toBe(200);
    expect(replay.body).toEqual(done.body);
    expectMatrixError(await hs.http.post(`${V3}/register`).send({ password: 'pw', auth: { type: 'm.login.dummy', session: 'nope' } }), 400, 'M_UNKNOWN');
  });

  it('remembers the first request\u2019s parameters: a second one may carry only auth', async () => {
    hs = await startTestHomeserver({ enable_registration: true });
    const challenge = await hs.http.post(`${V3}/register`).send({ username: 'bob', password: 'pw', device_id: 'BOBDEVICE', inhibit_login: false });
    expect(challenge.status).toBe(401);
    const done = await hs.http.post(`${V3}/register`).send({ auth: { type: 'm.login.dummy', session: challenge.body.session } });
    expect(done.status).toBe(200);
    expect(done.body).toMatchObject({ user_id: `@bob:${SERVER_NAME}`, device_id: 'BOBDEVICE' });
    const login = await hs.http.post(`${V3}/login`).send({ type: 'm.login.password', user: 'bob', password: 'pw' });
    expect(login.status).toBe(200);
  });

  it('refuses taken and invalid names, and says which', async () => {
    hs = await startTestHomeserver({ enable_registration: true });
    await hs.services.accounts.createUser({ localpart: 'taken', password: 'pw' });
    const register = (username: string) =>
      hs.http.post(`${V3}/register`).send({ username, password: 'pw', auth: { type: 'm.login.dummy' } });
    expectMatrixError(await register('taken'), 400, 'M_USER_IN_USE');
    expectMatrixError(await register('TAKEN'), 400, 'M_USER_IN_USE');
    for (const bad of ['with space', 'émile', '_private', '12345', 'x'.repeat(250)]) {
      expectMatrixError(await register(bad), 400, 'M_INVALID_USERNAME');
    }
    expectMatrixError(await hs.http.get(`${V3}/register/available?username=taken`), 400, 'M_USER_IN_USE');
    expectMatrixError(await hs.http.get(`${V3}/register/available?username=no%20way`), 400, 'M_INVALID_USERNAME');
    expectMatrixError(await hs.http.get(`${V3}/register/available`), 400, 'M_MISSING_PARAM');
    const free = await hs.http.get(`${V3}/register/available?username=free`);
    expect(free.status).toBe(200);
    expect(free.body).toEqual({ available: true });
    expectMatchesSpec('GET', `${V3}/register/available?username=free`, free);
  });

  it('honours inhibit_login, refuses guests and requires a password', async () => {
    hs = await startTestHomeserver({ enable_registration: true });
    const inhibited = await hs.http
      .post(`${V3}/register`)
      .send({ username: 'quiet', password: 'pw', inhibit_login: true, auth: { type: 'm.login.dummy' } });
    expect(inhibited.status).toBe(200);
    expect(inhibited.body).toEqual({ user_id: `@quiet:${SERVER_NAME}`, home_server: SERVER_NAME });
    expectMatrixError(await hs.http.post(`${V3}/register?kind=guest`).send({}), 403, 'M_GUEST_ACCESS_FORBIDDEN');
    expectMatrixError(
      await hs.http.post(`${V3}/register`).send({ username: 'nopw', auth: { type: 'm.login.dummy' } }),
      400,
      'M_MISSING_PARAM',
    );
    expectMatrixError(
      await hs.http.post(`${V3}/register`).send({ username: 'x1', password: 'pw', auth: { type: 'm.login.recaptcha' } }),
      400,
      'M_UNRECOGNIZED',
    );
  });

  it('is rate limited per address', async () => {
    hs = await startTestHomeserver({
      enable_registration: true,
      ratelimiting_enabled: true,
      rc_registration: { per_second: 0.01, burst_count: 2 },
    });
    const statuses: number[] = [];
    for (const name of ['r1', 'r2', 'r3']) {
      statuses.push((await hs.http.post(`${V3}/register`).send({ username: name, password: 'pw', auth: { type: 'm.login.dummy' } })).status);
    }
    expect(statuses).toEqual([200, 200, 429]);
  });
});
