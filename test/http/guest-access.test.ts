/**
 * Guest access (`allow_guest_access`, off by default as in Synapse): guest registration, the
 * routes open to guests, `m.room.guest_access`, world-readable rooms, and the upgrade of a guest
 * to a full account.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createUser, SERVER_NAME, startTestHomeserver, type TestHomeserver, type TestUser } from '../support/homeserver.js';
import { expectMatchesSpec, expectMatrixError } from '../support/spec-validator.js';

const V3 = '/_matrix/client/v3';
const bearer = { type: 'bearer' } as const;

let hs: TestHomeserver;
afterEach(() => hs.close());

async function registerGuest(body: Record<string, unknown> = {}): Promise<TestUser> {
  const res = await hs.http.post(`${V3}/register?kind=guest`).send(body);
  expect(res.status).toBe(200);
  expectMatchesSpec('POST', `${V3}/register`, res);
  return { userId: res.body.user_id, password: '', accessToken: res.body.access_token, deviceId: res.body.device_id };
}

async function createRoom(user: TestUser, body: Record<string, unknown> = {}): Promise<string> {
  const res = await hs.http.post(`${V3}/createRoom`).auth(user.accessToken, bearer).send(body);
  expect(res.status).toBe(200);
  return res.body.room_id as string;
}

const setState = (user: TestUser, roomId: string, type: string, content: Record<string, unknown>) =>
  hs.http.put(`${V3}/rooms/${encodeURIComponent(roomId)}/state/${type}/`).auth(user.accessToken, bearer).send(content);

const membershipOf = async (user: TestUser, roomId: string, target: string) => {
  const res = await hs.http.get(`${V3}/rooms/${encodeURIComponent(roomId)}/state/m.room.member/${encodeURIComponent(target)}`).auth(user.accessToken, bearer);
  return res.status === 200 ? (res.body as { membership: string; kind?: string }) : undefined;
};

describe('guest registration', () => {
  it('is refused while allow_guest_access is off (the default), even with open registration', async () => {
    hs = await startTestHomeserver({ enable_registration: true });
    expectMatrixError(await hs.http.post(`${V3}/register?kind=guest`).send({}), 403, 'M_GUEST_ACCESS_FORBIDDEN');
  });

  it('makes numbered guests with the device guest_device, whoami says is_guest, and they persist', async () => {
    // Guests do not need open registration (as in Synapse).
    hs = await startTestHomeserver({ allow_guest_access: true });
    const first = await registerGuest({ initial_device_display_name: 'a browser', username: 'ignored', password: 'ignored' });
    const second = await registerGuest();
    expect(first.userId).toBe(`@1:${SERVER_NAME}`);
    expect(second.userId).toBe(`@2:${SERVER_NAME}`);
    expect(first.deviceId).toBe('guest_device');
    const whoami = await hs.http.get(`${V3}/account/whoami`).auth(first.accessToken, bearer);
    expect(whoami.body).toEqual({ user_id: first.userId, device_id: 'guest_device', is_guest: true });
    const device = await hs.http.get(`${V3}/devices/guest_device`).auth(first.accessToken, bearer);
    expect(device.body.display_name).toBe('a browser');
    expect((await hs.services.accounts.getUser(first.userId))?.is_guest).toBe(1);
    // A guest has no password: nobody logs in as one.
    expectMatrixError(await hs.http.post(`${V3}/login`).send({ type: 'm.login.password', user: '1', password: 'x' }), 403, 'M_FORBIDDEN');
    const admin = await createUser(hs, 'alice', { admin: true });
    expect((await hs.http.get(`${V3}/account/whoami`).auth(admin.accessToken, bearer)).body.is_guest).toBe(false);
    // The admin API says who is a guest, and leaves guests out with guests=false (as Synapse).
    const all = await hs.http.get('/_synapse/admin/v2/users').auth(admin.accessToken, bearer);
    expect((all.body.users as { name: string; is_guest: boolean }[]).map((u) => [u.name, u.is_guest])).toEqual([
      [first.userId, true],
      [second.userId, true],
      [admin.userId, false],
    ]);
    const noGuests = await hs.http.get('/_synapse/admin/v2/users?guests=false').auth(admin.accessToken, bearer);
    expect((noGuests.body.users as { name: string }[]).map((u) => u.name)).toEqual([admin.userId]);
    expect((await hs.http.get(`/_synapse/admin/v2/users/${encodeURIComponent(first.userId)}`).auth(admin.accessToken, bearer)).body.is_guest).toBe(true);
  });
});

describe('what guests may do', () => {
  it('answers 403 M_GUEST_ACCESS_FORBIDDEN on routes not open to guests, and serves the open ones', async () => {
    hs = await startTestHomeserver({ allow_guest_access: true });
    const guest = await registerGuest();
    for (const [method, path, body] of [
      ['post', `${V3}/createRoom`, {}],
      ['get', `${V3}/pushrules/`, undefined],
      ['post', `${V3}/user/${encodeURIComponent(guest.userId)}/filter`, {}],
      ['put', `${V3}/profile/${encodeURIComponent(guest.userId)}/avatar_url`, { avatar_url: 'mxc://x/y' }],
      ['post', `${V3}/account/password`, { new_password: 'x' }],
      ['post', `${V3}/logout`, undefined],
      ['get', `${V3}/initialSync`, undefined],
      ['post', '/_matrix/media/v3/upload', undefined],
    ] as const) {
      const request = hs.http[method](path).auth(guest.accessToken, bearer);
      const res = body === undefined ? await request : await request.send(body);
      expectMatrixError(res, 403, 'M_GUEST_ACCESS_FORBIDDEN');
      expect(res.body.error).toBe('Guest access not allowed');
    }
    for (const path of [`${V3}/sync?timeout=0`, `${V3}/capabilities`, `${V3}/devices`, `${V3}/joined_rooms`, `${V3}/publicRooms`]) {
      const res = await hs.http.get(path).auth(guest.accessToken, bearer);
      expect(res.status, path).toBe(200);
    }
    const displayname = await hs.http.put(`${V3}/profile/${encodeURIComponent(guest.userId)}/displayname`).auth(guest.accessToken, bearer).send({ displayname: 'creeper' });
    expect(displayname.status).toBe(200);
    // The global event stream is not for guests: one room's only.
    expectMatrixError(await hs.http.get(`${V3}/events?timeout=0`).auth(guest.accessToken, bearer), 400, 'M_UNKNOWN');
  });

  it('joins only rooms with guest_access can_join, sends there, and is not a member of the directory', async () => {
    hs = await startTestHomeserver({ allow_guest_access: true });
    const alice = await createUser(hs, 'alice');
    const guest = await registerGuest();
    const room = await createRoom(alice, { preset: 'public_chat' });
    const join = () => hs.http.post(`${V3}/join/${encodeURIComponent(room)}`).auth(guest.accessToken, bearer).send({});
    const refused = await join();
    expectMatrixError(refused, 403, 'M_FORBIDDEN');
    expect(refused.body.error).toBe('Guest access not allowed');
    expect((await setState(alice, room, 'm.room.guest_access', { guest_access: 'can_join' })).status).toBe(200);
    expect((await join()).status).toBe(200);
    expect(await membershipOf(alice, room, guest.userId)).toMatchObject({ membership: 'join', kind: 'guest' });
    const sent = await hs.http.put(`${V3}/rooms/${encodeURIComponent(room)}/send/m.room.message/t1`).auth(guest.accessToken, bearer).send({ msgtype: 'm.text', body: 'sup' });
    expect(sent.status).toBe(200);
    const messages = await hs.http.get(`${V3}/rooms/${encodeURIComponent(room)}/messages?dir=b&limit=1`).auth(alice.accessToken, bearer);
    expect(messages.body.chunk[0]).toMatchObject({ sender: guest.userId, content: { body: 'sup' } });
    // Other membership changes are not for guests.
    expectMatrixError(await hs.http.post(`${V3}/rooms/${encodeURIComponent(room)}/invite`).auth(guest.accessToken, bearer).send({ user_id: alice.userId }), 403, 'M_GUEST_ACCESS_FORBIDDEN');
    // A guest never shows in the user directory, even sharing a public room.
    const search = await hs.http.post(`${V3}/user_directory/search`).auth(alice.accessToken, bearer).send({ search_term: guest.userId.slice(1, 2) });
    expect(search.status).toBe(200);
    expect((search.body.results as { user_id: string }[]).map((r) => r.user_id)).not.toContain(guest.userId);
  });

  it('makes guests leave when guest access is revoked, and a kind the client sends is not kept', async () => {
    hs = await startTestHomeserver({ allow_guest_access: true });
    const alice = await createUser(hs, 'alice');
    const bob = await createUser(hs, 'bob');
    const guest = await registerGuest();
    const room = await createRoom(alice, { preset: 'public_chat', initial_state: [{ type: 'm.room.guest_access', state_key: '', content: { guest_access: 'can_join' } }] });
    expect((await hs.http.post(`${V3}/join/${encodeURIComponent(room)}`).auth(guest.accessToken, bearer).send({})).status).toBe(200);
    // A full user claiming to be a guest is not one.
    expect((await hs.http.post(`${V3}/join/${encodeURIComponent(room)}`).auth(bob.accessToken, bearer).send({ kind: 'guest' })).status).toBe(200);
    expect((await membershipOf(alice, room, bob.userId))?.kind).toBeUndefined();
    expect((await setState(alice, room, 'm.room.guest_access', { guest_access: 'forbidden' })).status).toBe(200);
    await expect.poll(async () => (await membershipOf(alice, room, guest.userId))?.membership, { timeout: 5_000 }).toBe('leave');
    expect((await membershipOf(alice, room, bob.userId))?.membership).toBe('join');
    expectMatrixError(await hs.http.post(`${V3}/rooms/${encodeURIComponent(room)}/join`).auth(guest.accessToken, bearer).send({}), 403, 'M_FORBIDDEN');
  });

  it('reads world-readable rooms it is not in (messages, state, initialSync), and no others', async () => {
    hs = await startTestHomeserver({ allow_guest_access: true });
    const alice = await createUser(hs, 'alice');
    const guest = await registerGuest();
    const open = await createRoom(alice, { preset: 'public_chat' });
    const shut = await createRoom(alice, { preset: 'public_chat' });
    expect((await setState(alice, open, 'm.room.history_visibility', { history_visibility: 'world_readable' })).status).toBe(200);
    for (const roomId of [open, shut]) {
      await hs.http.put(`${V3}/rooms/${encodeURIComponent(roomId)}/send/m.room.message/t-${roomId}`).auth(alice.accessToken, bearer).send({ msgtype: 'm.text', body: 'mice' });
    }
    const messages = await hs.http.get(`${V3}/rooms/${encodeURIComponent(open)}/messages?dir=b&limit=5`).auth(guest.accessToken, bearer);
    expect(messages.status).toBe(200);
    expect((messages.body.chunk as { content: { body?: string } }[]).some((e) => e.content.body === 'mice')).toBe(true);
    expect((await hs.http.get(`${V3}/rooms/${encodeURIComponent(open)}/state`).auth(guest.accessToken, bearer)).status).toBe(200);
    // What was said before the room became world-readable stays hidden; the change itself is seen
    // (judged by the visibility it sets as well as the one before it, as the spec says).
    const initial = await hs.http.get(`${V3}/rooms/${encodeURIComponent(open)}/initialSync`).auth(guest.accessToken, bearer);
    expect(initial.status).toBe(200);
    expect((initial.body.messages.chunk as { type: string; content: { body?: string } }[]).map((e) => e.content.body ?? e.type)).toEqual(['m.room.history_visibility', 'mice']);
    expectMatrixError(await hs.http.get(`${V3}/rooms/${encodeURIComponent(shut)}/messages?dir=b`).auth(guest.accessToken, bearer), 403, 'M_FORBIDDEN');
  });
});

describe('upgrading a guest', () => {
  it('turns the guest into a full account under the same user id, through user-interactive auth', async () => {
    hs = await startTestHomeserver({ allow_guest_access: true, enable_registration: true });
    const guest = await registerGuest();
    const localpart = guest.userId.slice(1, guest.userId.indexOf(':'));
    const body = { username: localpart, password: 'SIR_Arthur_David', guest_access_token: guest.accessToken };
    const challenge = await hs.http.post(`${V3}/register`).send(body);
    expect(challenge.status).toBe(401);
    const done = await hs.http.post(`${V3}/register`).send({ ...body, auth: { type: 'm.login.dummy', session: challenge.body.session } });
    expect(done.status).toBe(200);
    expect(done.body.user_id).toBe(guest.userId);
    const whoami = await hs.http.get(`${V3}/account/whoami`).auth(done.body.access_token, bearer);
    expect(whoami.body).toMatchObject({ user_id: guest.userId, is_guest: false });
    // The guest's own token now acts for a full account too, and the password logs in.
    expect((await hs.http.get(`${V3}/account/whoami`).auth(guest.accessToken, bearer)).body.is_guest).toBe(false);
    expect((await hs.http.post(`${V3}/createRoom`).auth(guest.accessToken, bearer).send({})).status).toBe(200);
    const login = await hs.http.post(`${V3}/login`).send({ type: 'm.login.password', user: localpart, password: 'SIR_Arthur_David' });
    expect(login.status).toBe(200);
    expect((await hs.services.accounts.getUser(guest.userId))?.is_guest).toBe(0);
  });

  it('refuses another guest\u2019s token, a full user\u2019s token and a name that is not the guest\u2019s', async () => {
    hs = await startTestHomeserver({ allow_guest_access: true, enable_registration: true });
    const one = await registerGuest();
    const two = await registerGuest();
    const alice = await createUser(hs, 'alice');
    const localpart = one.userId.slice(1, one.userId.indexOf(':'));
    const attempt = (token: string, username: string) =>
      hs.http.post(`${V3}/register`).send({ username, password: 'pw', guest_access_token: token, auth: { type: 'm.login.dummy' } });
    expectMatrixError(await attempt(two.accessToken, localpart), 403, 'M_FORBIDDEN');
    expectMatrixError(await attempt(alice.accessToken, localpart), 403, 'M_FORBIDDEN');
    expectMatrixError(await attempt('not-a-token', localpart), 403, 'M_FORBIDDEN');
    expectMatrixError(await attempt(one.accessToken, 'someone-else'), 403, 'M_FORBIDDEN');
    expect((await hs.services.accounts.getUser(one.userId))?.is_guest).toBe(1);
    // Without a guest token a numeric name stays reserved.
    expectMatrixError(await hs.http.post(`${V3}/register`).send({ username: '77', password: 'pw', auth: { type: 'm.login.dummy' } }), 400, 'M_INVALID_USERNAME');
  });
});

describe('across a restart', () => {
  it('keeps the guest flag, the guest\u2019s session and the numbering', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'bhs-guest-'));
    try {
      const overrides = { allow_guest_access: true, database: { path: join(dir, 'homeserver.db') } };
      hs = await startTestHomeserver(overrides);
      const guest = await registerGuest();
      await hs.close();
      hs = await startTestHomeserver(overrides);
      const whoami = await hs.http.get(`${V3}/account/whoami`).auth(guest.accessToken, bearer);
      expect(whoami.body).toEqual({ user_id: guest.userId, device_id: 'guest_device', is_guest: true });
      expectMatrixError(await hs.http.post(`${V3}/createRoom`).auth(guest.accessToken, bearer).send({}), 403, 'M_GUEST_ACCESS_FORBIDDEN');
      expect((await registerGuest()).userId).toBe(`@2:${SERVER_NAME}`);
      await hs.close();
      // Guest access turned off: existing guests keep their (restricted) sessions, as in Synapse;
      // no new guest is made.
      hs = await startTestHomeserver({ ...overrides, allow_guest_access: false });
      expect((await hs.http.get(`${V3}/account/whoami`).auth(guest.accessToken, bearer)).body.is_guest).toBe(true);
      expectMatrixError(await hs.http.post(`${V3}/register?kind=guest`).send({}), 403, 'M_GUEST_ACCESS_FORBIDDEN');
    } finally {
      // The last server is closed by afterEach; its files may go first (Linux keeps them open).
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
