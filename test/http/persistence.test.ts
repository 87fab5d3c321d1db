import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SqliteDriver as Database } from '../../src/storage/database.js';
import { createUser, login, startTestHomeserver } from '../support/homeserver.js';

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

  it('indexes for search at start what was committed and not yet indexed when the server died', async () => {
    const path = join(dir, 'homeserver.db');
    let hs = await startTestHomeserver({ database: { path } });
    const auth = { Authorization: `Bearer ${(await createUser(hs, 'searcher')).accessToken}` };
    const roomId = (await hs.http.post('/_matrix/client/v3/createRoom').set(auth).send({})).body.room_id as string;
    await hs.http.put(`/_matrix/client/v3/rooms/${encodeURIComponent(roomId)}/send/m.room.message/t1`).set(auth).send({ msgtype: 'm.text', body: 'porcupine on the lawn' });
    await hs.close();
    // As if the process had died between the send's commit and the indexing that follows it.
    const sqlite = new Database(path);
    sqlite.exec("DELETE FROM event_search; UPDATE server_meta SET value = '0' WHERE key = 'search_indexed_upto'");
    sqlite.close();
    hs = await startTestHomeserver({ database: { path } });
    const found = await hs.http.post('/_matrix/client/v3/search').set(auth).send({ search_categories: { room_events: { search_term: 'porcupine' } } });
    expect(found.status).toBe(200);
    expect(found.body.search_categories.room_events.results.map((result: { result: { content: { body: string } } }) => result.result.content.body)).toEqual(['porcupine on the lawn']);
    await hs.close();
  });

  it('belongs to one server name: another is refused, also for a database from before the name was recorded', async () => {
    const path = join(dir, 'homeserver.db');
    const hs = await startTestHomeserver({ database: { path } });
    await hs.services.accounts.createOrRotateBot('hello');
    await hs.close();
    await expect(startTestHomeserver({ database: { path }, server_name: 'other.test' })).rejects.toThrow(
      'this database belongs to server_name "test.local", but the configuration says "other.test"',
    );

    // A database made before 0013 has no record: its users' ids say whose it is.
    const sqlite = new Database(path);
    sqlite.prepare('DELETE FROM server_meta').run();
    sqlite.close();
    await expect(startTestHomeserver({ database: { path }, server_name: 'other.test' })).rejects.toThrow('belongs to server_name "test.local"');
    const again = await startTestHomeserver({ database: { path } });
    await again.close();
    const recorded = new Database(path);
    expect(recorded.prepare("SELECT value FROM server_meta WHERE key = 'server_name'").pluck().get()).toBe('test.local');
    recorded.close();
  });

  it('takes an account deactivated behind its back (the CLI) out of its rooms, at start and while running', async () => {
    const path = join(dir, 'homeserver.db');
    let hs = await startTestHomeserver({ database: { path } });
    const owner = await createUser(hs, 'owner');
    const bot = await createUser(hs, 'leaver');
    const late = await createUser(hs, 'late-leaver');
    const room = (await hs.http.post('/_matrix/client/v3/createRoom').auth(owner.accessToken, { type: 'bearer' }).send({ preset: 'public_chat' })).body.room_id as string;
    for (const user of [bot, late]) {
      expect((await hs.http.post(`/_matrix/client/v3/rooms/${room}/join`).auth(user.accessToken, { type: 'bearer' }).send({})).status).toBe(200);
    }
    await hs.close();

    // As `bot-homeserver users deactivate` does it: the account only, no room events.
    const sqlite = new Database(path);
    sqlite.prepare('UPDATE users SET deactivated = 1, password_hash = NULL WHERE user_id = ?').run(bot.userId);
    sqlite.close();
    hs = await startTestHomeserver({ database: { path } });
    const token = await login(hs, 'owner', owner.password);
    const memberships = async () => {
      const members = await hs.http.get(`/_matrix/client/v3/rooms/${room}/members`).auth(token, { type: 'bearer' });
      return Object.fromEntries((members.body.chunk as Array<{ state_key: string; content: { membership: string } }>).map((e) => [e.state_key, e.content.membership]));
    };
    expect(await memberships()).toMatchObject({ [bot.userId]: 'leave', [late.userId]: 'join' });

    // While running, the periodic sweep does the same.
    await hs.services.accounts.deactivate(late.userId);
    expect(await hs.services.rooms.leaveRoomsOfDeactivatedUsers()).toEqual([late.userId]);
    expect(await memberships()).toMatchObject({ [late.userId]: 'leave' });
    expect(await hs.services.rooms.leaveRoomsOfDeactivatedUsers()).toEqual([]);
    await hs.close();
  });
});
