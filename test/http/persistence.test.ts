import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { login, startTestHomeserver } from '../support/homeserver.js';

describe('a file database', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'bhs-persist-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('keeps accounts and sessions across a restart, and stores no usable secret', async () => {
    const overrides = { database: { path: join(dir, 'homeserver.db') } };
    let hs = await startTestHomeserver(overrides);
    const bot = await hs.services.accounts.createOrRotateBot('hello');
    const loginRes = await hs.http
      .post('/_matrix/client/v3/login')
      .send({ type: 'm.login.password', user: 'hello', password: bot.password, refresh_token: true });
    const { access_token: accessToken, refresh_token: refreshToken } = loginRes.body;
    expect(refreshToken).toEqual(expect.any(String));

    // What is on disk while the server runs (database and WAL) holds hashes only.
    const onDisk = () => readdirSync(dir).map((file) => readFileSync(join(dir, file)).toString('latin1')).join('');
    for (const secret of [bot.password, accessToken, refreshToken]) expect(onDisk()).not.toContain(secret);
    expect(onDisk()).toContain('$argon2id$');
    await hs.close();

    hs = await startTestHomeserver(overrides);
    const whoami = await hs.http.get('/_matrix/client/v3/account/whoami').auth(accessToken, { type: 'bearer' });
    expect(whoami.status).toBe(200);
    expect(whoami.body.user_id).toBe(bot.user_id);
    expect((await hs.http.post('/_matrix/client/v3/refresh').send({ refresh_token: refreshToken })).status).toBe(200);
    expect(await login(hs, 'hello', bot.password)).toEqual(expect.any(String));
    await hs.close();
  });
});
