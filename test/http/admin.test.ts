import { createHmac } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { sharedSecretMac } from '../../src/users/registration-service.js';
import { createUser, SERVER_NAME, startTestHomeserver, type TestHomeserver, type TestUser } from '../support/homeserver.js';
import { expectMatrixError } from '../support/spec-validator.js';

const V3 = '/_matrix/client/v3';
const SECRET = 'a shared secret';

/** The MAC as Synapse's register_new_matrix_user computes it, written out independently. */
function synapseMac(nonce: string, user: string, password: string, admin: boolean, userType?: string): string {
  const mac = createHmac('sha1', SECRET);
  mac.update(`${nonce}\x00${user}\x00${password}\x00${admin ? 'admin' : 'notadmin'}`);
  if (userType) mac.update(`\x00${userType}`);
  return mac.digest('hex');
}

describe('shared-secret registration', () => {
  let hs: TestHomeserver;
  beforeEach(async () => {
    hs = await startTestHomeserver({ registration_shared_secret: SECRET });
  });
  afterEach(() => hs.close());

  const nonce = async () => (await hs.http.get('/_synapse/admin/v1/register')).body.nonce as string;

  it('computes the MAC exactly as Synapse (checked against Python hmac)', () => {
    expect(sharedSecretMac('shhh', { nonce: 'abc', username: 'bob', password: 'hunter2', admin: false })).toBe(
      'dedc5e372d8d388fb89d9995749d17573b10be4a',
    );
    expect(sharedSecretMac('shhh', { nonce: 'abc', username: 'bob', password: 'hunter2', admin: true, userType: 'bot' })).toBe(
      '446324908988bf5b0a3e5bece9797f8bdc8f244d',
    );
  });

  it('registers an admin with a valid MAC, and the account can log in', async () => {
    const n = await nonce();
    expect(n).toMatch(/^[0-9a-f]{128}$/);
    const res = await hs.http.post('/_synapse/admin/v1/register').send({
      nonce: n,
      username: 'Operator',
      password: 'pw',
      admin: true,
      mac: synapseMac(n, 'Operator', 'pw', true),
    });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ user_id: `@operator:${SERVER_NAME}`, home_server: SERVER_NAME });
    expect(res.body.access_token).toEqual(expect.any(String));
    expect(res.body.device_id).toEqual(expect.any(String));
    expect((await hs.services.accounts.getUser(`@operator:${SERVER_NAME}`))?.admin).toBe(1);
    const login = await hs.http.post(`${V3}/login`).send({ type: 'm.login.password', user: 'operator', password: 'pw' });
    expect(login.status).toBe(200);
  });

  it('includes user_type in the MAC when given', async () => {
    const n = await nonce();
    const res = await hs.http.post('/_synapse/admin/v1/register').send({
      nonce: n,
      username: 'helper',
      password: 'pw',
      admin: false,
      user_type: 'bot',
      mac: synapseMac(n, 'helper', 'pw', false, 'bot'),
    });
    expect(res.status).toBe(200);
    expect((await hs.services.accounts.getUser(`@helper:${SERVER_NAME}`))?.user_type).toBe('bot');
  });

  it('refuses a wrong MAC with 403 and spends the nonce', async () => {
    const n = await nonce();
    const wrong = await hs.http.post('/_synapse/admin/v1/register').send({
      nonce: n,
      username: 'mallory',
      password: 'pw',
      admin: true,
      mac: synapseMac(n, 'mallory', 'pw', false),
    });
    expectMatrixError(wrong, 403, 'M_UNKNOWN');
    expect(wrong.body.error).toBe('HMAC incorrect');
    const retried = await hs.http.post('/_synapse/admin/v1/register').send({
      nonce: n,
      username: 'mallory',
      password: 'pw',
      admin: false,
      mac: synapseMac(n, 'mallory', 'pw', false),
    });
    expectMatrixError(retried, 400, 'M_UNKNOWN');
    expect(retried.body.error).toBe('unrecognised nonce');
    expect(await hs.services.accounts.getUser(`@mallory:${SERVER_NAME}`)).toBeUndefined();
  });

  it('refuses a reused nonce and an unknown one', async () => {
    const n = await nonce();
    const body = { nonce: n, username: 'once', password: 'pw', admin: false, mac: synapseMac(n, 'once', 'pw', false) };
    expect((await hs.http.post('/_synapse/admin/v1/register').send(body)).status).toBe(200);
    expectMatrixError(await hs.http.post('/_synapse/admin/v1/register').send(body), 400, 'M_UNKNOWN');
    expectMatrixError(
      await hs.http.post('/_synapse/admin/v1/register').send({ ...body, nonce: 'f'.repeat(128) }),
      400,
      'M_UNKNOWN',
    );
  });

  it('forgets nonces after a minute', async () => {
    const n = await nonce();
    hs.clock.advance(61_000);
    const res = await hs.http
      .post('/_synapse/admin/v1/register')
      .send({ nonce: n, username: 'late', password: 'pw', mac: synapseMac(n, 'late', 'pw', false) });
    expectMatrixError(res, 400, 'M_UNKNOWN');
  });

  it('says which field is missing, and that a taken name is taken', async () => {
    expectMatrixError(await hs.http.post('/_synapse/admin/v1/register').send({}), 400, 'M_BAD_JSON');
    let n = await nonce();
    expectMatrixError(await hs.http.post('/_synapse/admin/v1/register').send({ nonce: n, password: 'pw', mac: 'x' }), 400, 'M_BAD_JSON');
    await hs.services.accounts.createUser({ localpart: 'taken', password: 'pw' });
    n = await nonce();
    const taken = await hs.http
      .post('/_synapse/admin/v1/register')
      .send({ nonce: n, username: 'taken', password: 'pw', mac: synapseMac(n, 'taken', 'pw', false) });
    expectMatrixError(taken, 400, 'M_USER_IN_USE');
  });

  it('is refused when no shared secret is configured', async () => {
    await hs.close();
    hs = await startTestHomeserver();
    const n = await nonce();
    const res = await hs.http
      .post('/_synapse/admin/v1/register')
      .send({ nonce: n, username: 'x', password: 'pw', mac: synapseMac(n, 'x', 'pw', false) });
    expectMatrixError(res, 400, 'M_UNKNOWN');
    expect(res.body.error).toBe('Shared secret registration is not enabled');
  });
});

describe('admin users API', () => {
  let hs: TestHomeserver;
  let admin: TestUser;
  let plain: TestUser;
  beforeEach(async () => {
    hs = await startTestHomeserver();
    admin = await createUser(hs, 'admin', { admin: true });
    plain = await createUser(hs, 'plain');
  });
  afterEach(() => hs.close());

  const asAdmin = (req: { set(name: string, value: string): unknown }) => req.set('Authorization', `Bearer ${admin.accessToken}`);

  it('refuses non-admins with 403 and anonymous callers with 401 on every endpoint', async () => {
    const calls = [
      () => hs.http.get('/_synapse/admin/v2/users'),
      () => hs.http.get(`/_synapse/admin/v2/users/${plain.userId}`),
      () => hs.http.put(`/_synapse/admin/v2/users/@new:${SERVER_NAME}`).send({}),
      () => hs.http.post(`/_synapse/admin/v1/deactivate/${plain.userId}`).send({}),
      () => hs.http.get(`/_synapse/admin/v1/users/${plain.userId}/override_ratelimit`),
      () => hs.http.post(`/_synapse/admin/v1/users/${plain.userId}/override_ratelimit`).send({}),
      () => hs.http.delete(`/_synapse/admin/v1/users/${plain.userId}/override_ratelimit`),
      () => hs.http.post('/_bot_homeserver/admin/v1/bots').send({ name: 'b' }),
    ];
    for (const call of calls) {
      const forbidden = await call().set('Authorization', `Bearer ${plain.accessToken}`);
      expectMatrixError(forbidden, 403, 'M_FORBIDDEN');
      expect(forbidden.body.error).toBe('You are not a server admin');
      expectMatrixError(await call(), 401, 'M_MISSING_TOKEN');
    }
  });

  it('lists users with paging and filters', async () => {
    await hs.services.accounts.createOrRotateBot('robot');
    const all = await asAdmin(hs.http.get('/_synapse/admin/v2/users')) as { status: number; body: any };
    expect(all.status).toBe(200);
    expect(all.body.total).toBe(3);
    expect(all.body.users.map((u: { name: string }) => u.name)).toEqual([
      `@admin:${SERVER_NAME}`,
      `@plain:${SERVER_NAME}`,
      `@robot:${SERVER_NAME}`,
    ]);
    expect(all.body).not.toHaveProperty('next_token');
    expect(all.body.users[2]).toMatchObject({ user_type: 'bot', admin: false, deactivated: false, is_guest: false });
    const page = (await asAdmin(hs.http.get('/_synapse/admin/v2/users?from=0&limit=2'))) as { body: any };
    expect(page.body.users).toHaveLength(2);
    expect(page.body.next_token).toBe('2');
    const admins = (await asAdmin(hs.http.get('/_synapse/admin/v2/users?admins=true'))) as { body: any };
    expect(admins.body.users.map((u: { name: string }) => u.name)).toEqual([admin.userId]);
    const byName = (await asAdmin(hs.http.get('/_synapse/admin/v2/users?name=rob'))) as { body: any };
    expect(byName.body.total).toBe(1);
    const literal = (await asAdmin(hs.http.get('/_synapse/admin/v2/users?name=%25'))) as { body: any };
    expect(literal.body.total).toBe(0);
    const bad = (await asAdmin(hs.http.get('/_synapse/admin/v2/users?limit=-1'))) as never;
    expectMatrixError(bad, 400, 'M_INVALID_PARAM');
  });

  it('creates (201), reads and modifies (200) a user with PUT', async () => {
    const userId = `@carol:${SERVER_NAME}`;
    const created = (await asAdmin(hs.http.put(`/_synapse/admin/v2/users/${userId}`).send({ password: 'pw1', displayname: 'Carol' }))) as { status: number; body: any };
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({ name: userId, displayname: 'Carol', admin: false, deactivated: false });
    const fetched = (await asAdmin(hs.http.get(`/_synapse/admin/v2/users/${encodeURIComponent(userId)}`))) as { status: number; body: any };
    expect(fetched.status).toBe(200);
    expect(fetched.body).toEqual(created.body);
    expect(fetched.body.creation_ts).toBe(Math.floor(hs.clock.now() / 1000));

    const carolToken = (await hs.http.post(`${V3}/login`).send({ type: 'm.login.password', user: 'carol', password: 'pw1' })).body.access_token;
    const modified = (await asAdmin(hs.http.put(`/_synapse/admin/v2/users/${userId}`).send({ password: 'pw2', admin: true }))) as { status: number; body: any };
    expect(modified.status).toBe(200);
    expect(modified.body.admin).toBe(true);
    // A new password ends the user's sessions unless logout_devices is false.
    expectMatrixError(await hs.http.get(`${V3}/account/whoami`).auth(carolToken, { type: 'bearer' }), 401, 'M_UNKNOWN_TOKEN');
    const relogin = await hs.http.post(`${V3}/login`).send({ type: 'm.login.password', user: 'carol', password: 'pw2' });
    expect(relogin.status).toBe(200);
  });

  it('explains bad admin requests', async () => {
    expectMatrixError((await asAdmin(hs.http.get(`/_synapse/admin/v2/users/@ghost:${SERVER_NAME}`))) as never, 404, 'M_NOT_FOUND');
    expectMatrixError((await asAdmin(hs.http.get('/_synapse/admin/v2/users/@x:elsewhere.example'))) as never, 400, 'M_UNKNOWN');
    expectMatrixError((await asAdmin(hs.http.put('/_synapse/admin/v2/users/@x:elsewhere.example').send({}))) as never, 400, 'M_UNKNOWN');
    expectMatrixError((await asAdmin(hs.http.put(`/_synapse/admin/v2/users/${plain.userId}`).send({ admin: 'yes' }))) as never, 400, 'M_BAD_JSON');
    expectMatrixError((await asAdmin(hs.http.put(`/_synapse/admin/v2/users/${admin.userId}`).send({ admin: false }))) as never, 400, 'M_UNKNOWN');
    expectMatrixError((await asAdmin(hs.http.put(`/_synapse/admin/v2/users/@Bad%20Name:${SERVER_NAME}`).send({}))) as never, 400, 'M_INVALID_USERNAME');
  });

  it('deactivation stops login and every token', async () => {
    const res = (await asAdmin(hs.http.post(`/_synapse/admin/v1/deactivate/${plain.userId}`).send({ erase: true }))) as { status: number; body: any };
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ id_server_unbind_result: 'success' });
    expectMatrixError(await hs.http.get(`${V3}/account/whoami`).auth(plain.accessToken, { type: 'bearer' }), 401, 'M_UNKNOWN_TOKEN');
    const login = await hs.http.post(`${V3}/login`).send({ type: 'm.login.password', user: 'plain', password: plain.password });
    expectMatrixError(login, 403, 'M_FORBIDDEN');
    const details = (await asAdmin(hs.http.get(`/_synapse/admin/v2/users/${plain.userId}`))) as { body: any };
    expect(details.body).toMatchObject({ deactivated: true, displayname: null });
    // Deactivated users are hidden from the list unless asked for.
    const list = (await asAdmin(hs.http.get('/_synapse/admin/v2/users'))) as { body: any };
    expect(list.body.total).toBe(1);
    const withDeactivated = (await asAdmin(hs.http.get('/_synapse/admin/v2/users?deactivated=true'))) as { body: any };
    expect(withDeactivated.body.total).toBe(2);
    // The empty body form works too.
    expect(((await asAdmin(hs.http.post(`/_synapse/admin/v1/deactivate/${admin.userId}`))) as { status: number }).status).toBe(200);
  });

  it('a deactivated user whose password an admin sets is told the account is deactivated', async () => {
    await hs.services.accounts.deactivate(plain.userId);
    await hs.services.accounts.setPassword(plain.userId, 'again', { logoutDevices: true });
    const login = await hs.http.post(`${V3}/login`).send({ type: 'm.login.password', user: 'plain', password: 'again' });
    expectMatrixError(login, 403, 'M_USER_DEACTIVATED');
  });

  it('sets, reads and removes a rate-limit override; 0 exempts the user from rc_message', async () => {
    const path = `/_synapse/admin/v1/users/${plain.userId}/override_ratelimit`;
    expect(((await asAdmin(hs.http.get(path))) as { body: unknown }).body).toEqual({});
    const set = (await asAdmin(hs.http.post(path).send({ messages_per_second: 0, burst_count: 0 }))) as { status: number; body: unknown };
    expect(set.status).toBe(200);
    expect(set.body).toEqual({ messages_per_second: 0, burst_count: 0 });
    expect(((await asAdmin(hs.http.get(path))) as { body: unknown }).body).toEqual({ messages_per_second: 0, burst_count: 0 });
    expectMatrixError((await asAdmin(hs.http.post(path).send({ messages_per_second: -1 }))) as never, 400, 'M_BAD_JSON');
    expectMatrixError(
      (await asAdmin(hs.http.get(`/_synapse/admin/v1/users/@ghost:${SERVER_NAME}/override_ratelimit`))) as never,
      404,
      'M_NOT_FOUND',
    );
    const removed = (await asAdmin(hs.http.delete(path))) as { status: number; body: unknown };
    expect(removed.body).toEqual({});
    expect(((await asAdmin(hs.http.get(path))) as { body: unknown }).body).toEqual({});
  });

  it('applies overrides to the message limiter the send path uses', async () => {
    await hs.close();
    hs = await startTestHomeserver({ ratelimiting_enabled: true, rc_message: { per_second: 0.001, burst_count: 2 } });
    admin = await createUser(hs, 'admin', { admin: true });
    const exempt = await createUser(hs, 'exempt');
    const limited = await createUser(hs, 'limited');
    const generous = await createUser(hs, 'generous');
    const override = (user: TestUser, body: object) =>
      asAdmin(hs.http.post(`/_synapse/admin/v1/users/${user.userId}/override_ratelimit`).send(body));
    await override(exempt, { messages_per_second: 0 });
    await override(generous, { messages_per_second: 1, burst_count: 5 });
    const sendable = async (user: TestUser, times: number) => {
      let sent = 0;
      for (let i = 0; i < times; i++) {
        try {
          await hs.services.limiters.checkMessage(user.userId);
          sent++;
        } catch (err) {
          expect((err as { errcode?: string }).errcode).toBe('M_LIMIT_EXCEEDED');
        }
      }
      return sent;
    };
    expect(await sendable(limited, 10)).toBe(2);
    expect(await sendable(generous, 10)).toBe(5);
    expect(await sendable(exempt, 100)).toBe(100);
    // Removing the override puts the user back under rc_message.
    await asAdmin(hs.http.delete(`/_synapse/admin/v1/users/${exempt.userId}/override_ratelimit`));
    expect(await sendable(exempt, 10)).toBe(2);
  });

  it('creates a bot (201) and rotates its secret (200); the old secret and sessions stop working', async () => {
    const created = (await asAdmin(hs.http.post('/_bot_homeserver/admin/v1/bots').send({ name: 'helper' }))) as { status: number; body: any };
    expect(created.status).toBe(201);
    expect(created.body.user_id).toBe(`@helper:${SERVER_NAME}`);
    expect(created.body.password.length).toBeGreaterThanOrEqual(22); // at least 128 bits in base64url
    const loginWith = (password: string) =>
      hs.http.post(`${V3}/login`).send({ type: 'm.login.password', identifier: { type: 'm.id.user', user: 'helper' }, password });
    const session = await loginWith(created.body.password);
    expect(session.status).toBe(200);

    const rotated = (await asAdmin(hs.http.post('/_bot_homeserver/admin/v1/bots').send({ name: `@helper:${SERVER_NAME}` }))) as { status: number; body: any };
    expect(rotated.status).toBe(200);
    expect(rotated.body.password).not.toBe(created.body.password);
    expectMatrixError(await loginWith(created.body.password), 403, 'M_FORBIDDEN');
    expectMatrixError(await hs.http.get(`${V3}/account/whoami`).auth(session.body.access_token, { type: 'bearer' }), 401, 'M_UNKNOWN_TOKEN');
    expect((await loginWith(rotated.body.password)).status).toBe(200);

    // A person's account is not turned into a bot.
    expectMatrixError((await asAdmin(hs.http.post('/_bot_homeserver/admin/v1/bots').send({ name: 'plain' }))) as never, 400, 'M_USER_IN_USE');
  });

  it('reports its version', async () => {
    const res = await hs.http.get('/_synapse/admin/v1/server_version');
    expect(res.body.server_version).toMatch(/^bot-homeserver \d+\.\d+\.\d+/);
  });
});
