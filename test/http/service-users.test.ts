/**
 * Nobody can become the bridge. Its DMs hold webhook URLs and signing secrets, so a password on it
 * would be a key to all of them: anyone with admin rights could once give it one with
 * `create-bot bridge` or the bots API and then log in as it.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { sharedSecretMac } from '../../src/users/registration-service.js';
import { createUser, startTestHomeserver, type TestHomeserver } from '../support/homeserver.js';
import { withBridge } from '../support/bridge.js';
import { expectMatrixError } from '../support/spec-validator.js';
import { persistentDatabase } from '../support/test-schemas.js';

const V3 = '/_matrix/client/v3';
const BRIDGE = '@bridge:test.local';

let hs: TestHomeserver | undefined;
const dirs: string[] = [];
afterEach(async () => {
  await hs?.close();
  hs = undefined;
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

const loginAs = (server: TestHomeserver, user: string, password: string) =>
  server.http.post(`${V3}/login`).send({ type: 'm.login.password', identifier: { type: 'm.id.user', user }, password });

describe('the bridge user', () => {
  for (const enabled of [true, false]) {
    it(`cannot be created, given a password or registered (bridge ${enabled ? 'enabled' : 'disabled'})`, async () => {
      hs = await startTestHomeserver({ ...withBridge({ enabled }), enable_registration: true, registration_shared_secret: 'shh' });
      const server = hs;
      const admin = await createUser(server, 'admin', { admin: true });
      const asAdmin = (request: ReturnType<typeof server.http.post>) => request.set('Authorization', `Bearer ${admin.accessToken}`);

      for (const name of ['bridge', BRIDGE, 'BRIDGE']) {
        expectMatrixError(await asAdmin(server.http.post('/_bot_homeserver/admin/v1/bots')).send({ name }), 400, 'M_EXCLUSIVE');
      }
      const put = await asAdmin(server.http.put(`/_synapse/admin/v2/users/${encodeURIComponent(BRIDGE)}`)).send({ password: 'mine now' });
      expectMatrixError(put, enabled ? 403 : 400, enabled ? 'M_FORBIDDEN' : 'M_EXCLUSIVE');
      expectMatrixError(await server.http.get(`${V3}/register/available?username=bridge`), 400, 'M_EXCLUSIVE');
      expectMatrixError(await server.http.post(`${V3}/register`).send({ username: 'bridge', password: 'x', auth: { type: 'm.login.dummy' } }), 400, 'M_EXCLUSIVE');
      const { nonce } = (await server.http.get('/_synapse/admin/v1/register')).body as { nonce: string };
      const mac = sharedSecretMac('shh', { nonce, username: 'bridge', password: 'x', admin: false });
      expectMatrixError(await server.http.post('/_synapse/admin/v1/register').send({ nonce, username: 'bridge', password: 'x', mac }), 400, 'M_EXCLUSIVE');
      await expect(server.services.accounts.createUser({ localpart: 'bridge', password: 'x' })).rejects.toMatchObject({ errcode: 'M_EXCLUSIVE' });

      expectMatrixError(await loginAs(server, 'bridge', 'mine now'), 403, 'M_FORBIDDEN');
      if (enabled) {
        // What an admin may still change: the bridge's display name.
        const renamed = await asAdmin(server.http.put(`/_synapse/admin/v2/users/${encodeURIComponent(BRIDGE)}`)).send({ displayname: 'Hooks' });
        expect(renamed.status).toBe(200);
        expect(renamed.body.displayname).toBe('Hooks');
      }
    });
  }

  it('loses a password it was given before, with every session opened with it, and no login works', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'bhs-service-'));
    dirs.push(dir);
    const config = { ...persistentDatabase(join(dir, 'hs.db')), ...withBridge() };
    hs = await startTestHomeserver(config);
    // As an older version allowed: a password on the bridge, and a session opened with it.
    const hash = await (hs.services.accounts as unknown as { hasher: { hash(p: string): Promise<string> } }).hasher.hash('stolen');
    await hs.services.storage.users.update(BRIDGE, { password_hash: hash });
    const session = await hs.services.sessions.createSession(BRIDGE);
    expect((await hs.http.get(`${V3}/account/whoami`).auth(session.access_token, { type: 'bearer' })).status).toBe(200);
    // Even now, the password does not log in.
    expectMatrixError(await loginAs(hs, 'bridge', 'stolen'), 403, 'M_FORBIDDEN');

    await hs.close();
    hs = await startTestHomeserver(config);
    expect((await hs.services.accounts.getUser(BRIDGE))?.password_hash).toBeNull();
    expectMatrixError(await hs.http.get(`${V3}/account/whoami`).auth(session.access_token, { type: 'bearer' }), 401, 'M_UNKNOWN_TOKEN');
    expectMatrixError(await loginAs(hs, 'bridge', 'stolen'), 403, 'M_FORBIDDEN');
  });
});
