/** Devices and the account: /devices, /delete_devices, /account/password, /account/deactivate, with password UIA. */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createUser, login, startTestHomeserver, type TestHomeserver, type TestUser } from '../support/homeserver.js';
import { expectMatchesSpec, expectMatrixError } from '../support/spec-validator.js';

let hs: TestHomeserver;
let alice: TestUser;
beforeEach(async () => {
  hs = await startTestHomeserver();
  alice = await createUser(hs, 'alice');
});
afterEach(() => hs.close());

const bearer = { type: 'bearer' } as const;
const passwordAuth = (session: string, password: string, user = 'alice') => ({ type: 'm.login.password', session, identifier: { type: 'm.id.user', user }, password });

async function loginDevice(user: string, password: string, deviceId: string): Promise<string> {
  const res = await hs.http.post('/_matrix/client/v3/login').send({ type: 'm.login.password', identifier: { type: 'm.id.user', user }, password, device_id: deviceId, initial_device_display_name: `${deviceId} phone` });
  expect(res.status).toBe(200);
  return res.body.access_token as string;
}

describe('devices', () => {
  it('lists, reads and renames the user’s own devices, and answers 404 for others', async () => {
    await loginDevice('alice', alice.password, 'PHONE');
    const list = await hs.http.get('/_matrix/client/v3/devices').auth(alice.accessToken, bearer);
    expectMatchesSpec('GET', '/_matrix/client/v3/devices', list);
    expect(list.body.devices.map((d: { device_id: string }) => d.device_id).sort()).toEqual([alice.deviceId, 'PHONE'].sort());

    const phone = await hs.http.get('/_matrix/client/v3/devices/PHONE').auth(alice.accessToken, bearer);
    expectMatchesSpec('GET', '/_matrix/client/v3/devices/PHONE', phone);
    expect(phone.body).toEqual({ device_id: 'PHONE', display_name: 'PHONE phone' });

    const renamed = await hs.http.put('/_matrix/client/v3/devices/PHONE').auth(alice.accessToken, bearer).send({ display_name: 'Work phone' });
    expectMatchesSpec('PUT', '/_matrix/client/v3/devices/PHONE', renamed);
    expect((await hs.http.get('/_matrix/client/v3/devices/PHONE').auth(alice.accessToken, bearer)).body.display_name).toBe('Work phone');

    const bob = await createUser(hs, 'bob');
    expectMatrixError(await hs.http.get('/_matrix/client/v3/devices/PHONE').auth(bob.accessToken, bearer), 404, 'M_NOT_FOUND');
    expectMatrixError(await hs.http.put('/_matrix/client/v3/devices/PHONE').auth(bob.accessToken, bearer).send({ display_name: 'mine now' }), 404, 'M_NOT_FOUND');
    expectMatrixError(await hs.http.put('/_matrix/client/v3/devices/PHONE').auth(alice.accessToken, bearer).send({ display_name: 'x'.repeat(101) }), 400, 'M_INVALID_PARAM');
  });

  it('deletes a device only after the password is given again, and logs it out', async () => {
    const phoneToken = await loginDevice('alice', alice.password, 'PHONE');
    const first = await hs.http.delete('/_matrix/client/v3/devices/PHONE').auth(alice.accessToken, bearer).send({});
    expect(first.status).toBe(401);
    expectMatchesSpec('DELETE', '/_matrix/client/v3/devices/PHONE', first);
    expect(first.body).toEqual({ session: expect.any(String), flows: [{ stages: ['m.login.password'] }], params: {} });
    const session = first.body.session as string;

    const wrong = await hs.http.delete('/_matrix/client/v3/devices/PHONE').auth(alice.accessToken, bearer).send({ auth: passwordAuth(session, 'wrong') });
    expect(wrong.status).toBe(401);
    expect(wrong.body).toMatchObject({ errcode: 'M_FORBIDDEN', session, completed: [], flows: [{ stages: ['m.login.password'] }] });
    expect((await hs.http.get('/_matrix/client/v3/account/whoami').auth(phoneToken, bearer)).status).toBe(200);

    // The session belongs to this one request: it cannot delete another device.
    const otherOperation = await hs.http.delete(`/_matrix/client/v3/devices/${alice.deviceId}`).auth(alice.accessToken, bearer).send({ auth: passwordAuth(session, alice.password) });
    expectMatrixError(otherOperation, 403, 'M_FORBIDDEN');

    const done = await hs.http.delete('/_matrix/client/v3/devices/PHONE').auth(alice.accessToken, bearer).send({ auth: passwordAuth(session, alice.password) });
    expect(done.status).toBe(200);
    expectMatchesSpec('DELETE', '/_matrix/client/v3/devices/PHONE', done);
    expectMatrixError(await hs.http.get('/_matrix/client/v3/account/whoami').auth(phoneToken, bearer), 401, 'M_UNKNOWN_TOKEN');
    expectMatrixError(await hs.http.get('/_matrix/client/v3/devices/PHONE').auth(alice.accessToken, bearer), 404, 'M_NOT_FOUND');
    // Someone else's password never completes alice's session.
    await createUser(hs, 'mallory', { password: 'mallory-pw' });
    const start = await hs.http.post('/_matrix/client/v3/delete_devices').auth(alice.accessToken, bearer).send({ devices: ['X'] });
    const foreign = await hs.http.post('/_matrix/client/v3/delete_devices').auth(alice.accessToken, bearer).send({ devices: ['X'], auth: passwordAuth(start.body.session, 'mallory-pw', 'mallory') });
    expectMatrixError(foreign, 403, 'M_FORBIDDEN');
  });

  it('deletes several devices at once, unknown ones skipped', async () => {
    const a = await loginDevice('alice', alice.password, 'A');
    const b = await loginDevice('alice', alice.password, 'B');
    const start = await hs.http.post('/_matrix/client/v3/delete_devices').auth(alice.accessToken, bearer).send({ devices: ['A', 'B', 'NOPE'] });
    expect(start.status).toBe(401);
    expectMatchesSpec('POST', '/_matrix/client/v3/delete_devices', start);
    // The device list is part of the operation: a session started for [A, B, NOPE] cannot delete alice's own.
    const changed = await hs.http.post('/_matrix/client/v3/delete_devices').auth(alice.accessToken, bearer).send({ devices: [alice.deviceId], auth: passwordAuth(start.body.session, alice.password) });
    expectMatrixError(changed, 403, 'M_FORBIDDEN');
    const done = await hs.http.post('/_matrix/client/v3/delete_devices').auth(alice.accessToken, bearer).send({ devices: ['B', 'A', 'NOPE'], auth: passwordAuth(start.body.session, alice.password) });
    expect(done.status).toBe(200);
    expectMatchesSpec('POST', '/_matrix/client/v3/delete_devices', done);
    for (const token of [a, b]) expect((await hs.http.get('/_matrix/client/v3/account/whoami').auth(token, bearer)).status).toBe(401);
    expect((await hs.http.get('/_matrix/client/v3/account/whoami').auth(alice.accessToken, bearer)).status).toBe(200);
  });
});

describe('where devices were last seen', () => {
  it('/devices shows the last address and time; admin whois adds the user agent, to admins and the user themself', async () => {
    const phone = await loginDevice('alice', alice.password, 'PHONE');
    await hs.http.get('/_matrix/client/v3/account/whoami').auth(phone, bearer).set('User-Agent', 'PhoneBot/1.0');
    const seen = await hs.http.get('/_matrix/client/v3/devices/PHONE').auth(alice.accessToken, bearer);
    expectMatchesSpec('GET', '/_matrix/client/v3/devices/PHONE', seen);
    expect(seen.body).toMatchObject({ device_id: 'PHONE', last_seen_ip: expect.stringContaining('127.0.0.1'), last_seen_ts: expect.any(Number) });

    const own = await hs.http.get(`/_matrix/client/v3/admin/whois/${encodeURIComponent(alice.userId)}`).auth(alice.accessToken, bearer);
    expect(own.status).toBe(200);
    expect(own.body.user_id).toBe(alice.userId);
    expect(own.body.devices.PHONE).toEqual({ sessions: [{ connections: [{ ip: expect.stringContaining('127.0.0.1'), last_seen: expect.any(Number), user_agent: 'PhoneBot/1.0' }] }] });
    // A device never used since it was made has a session and no connection yet.
    await loginDevice('alice', alice.password, 'TABLET');
    const again = await hs.http.get(`/_matrix/client/r0/admin/whois/${encodeURIComponent(alice.userId)}`).auth(alice.accessToken, bearer);
    expect(again.body.devices.TABLET).toEqual({ sessions: [{ connections: [] }] });

    const bob = await createUser(hs, 'bob');
    expectMatrixError(await hs.http.get(`/_matrix/client/v3/admin/whois/${encodeURIComponent(alice.userId)}`).auth(bob.accessToken, bearer), 403, 'M_FORBIDDEN');
    const admin = await createUser(hs, 'admin', { admin: true });
    const asAdmin = await hs.http.get(`/_matrix/client/v3/admin/whois/${encodeURIComponent(alice.userId)}`).auth(admin.accessToken, bearer);
    expect(Object.keys(asAdmin.body.devices).sort()).toEqual([alice.deviceId, 'PHONE', 'TABLET'].sort());
  });

  it('stores what it saw with the device, not only in memory', async () => {
    const phone = await loginDevice('alice', alice.password, 'PHONE');
    await hs.http.get('/_matrix/client/v3/account/whoami').auth(phone, bearer).set('User-Agent', 'PhoneBot/2.0');
    const row = await hs.services.storage.sessions.getDevice(alice.userId, 'PHONE');
    expect(row).toMatchObject({ last_seen_user_agent: 'PhoneBot/2.0' });
  });

  it('costs a write every few seconds at most, however often a client changes its user agent', async () => {
    const phone = await loginDevice('alice', alice.password, 'PHONE');
    const writes = hs.services.storage.sessions;
    const recordDeviceSeen = writes.recordDeviceSeen.bind(writes);
    let written = 0;
    writes.recordDeviceSeen = async (...args) => {
      written++;
      return recordDeviceSeen(...args);
    };
    for (let i = 0; i < 20; i++) await hs.http.get('/_matrix/client/v3/account/whoami').auth(phone, bearer).set('User-Agent', `Changing/${i}`);
    // The test clock stands still: only the device's first sighting is written.
    expect(written).toBe(1);
    expect(await hs.services.storage.sessions.getDevice(alice.userId, 'PHONE')).toMatchObject({ last_seen_user_agent: 'Changing/0' });
  });
});

describe('the account', () => {
  it('changes a person’s password with UIA, ending the other sessions but not this one', async () => {
    const other = await loginDevice('alice', alice.password, 'OTHER');
    const start = await hs.http.post('/_matrix/client/v3/account/password').auth(alice.accessToken, bearer).send({ new_password: 'new-secret' });
    expect(start.status).toBe(401);
    expectMatchesSpec('POST', '/_matrix/client/v3/account/password', start);
    const done = await hs.http
      .post('/_matrix/client/v3/account/password')
      .auth(alice.accessToken, bearer)
      .send({ new_password: 'new-secret', auth: passwordAuth(start.body.session, alice.password) });
    expect(done.status).toBe(200);
    expectMatchesSpec('POST', '/_matrix/client/v3/account/password', done);
    expect((await hs.http.get('/_matrix/client/v3/account/whoami').auth(other, bearer)).status).toBe(401);
    expect((await hs.http.get('/_matrix/client/v3/account/whoami').auth(alice.accessToken, bearer)).status).toBe(200);
    await expect(login(hs, 'alice', alice.password)).rejects.toThrow(/403/);
    expect(await login(hs, 'alice', 'new-secret')).toEqual(expect.any(String));
  });

  it('keeps the other sessions with logout_devices: false', async () => {
    const other = await loginDevice('alice', alice.password, 'OTHER');
    const start = await hs.http.post('/_matrix/client/v3/account/password').auth(alice.accessToken, bearer).send({ new_password: 'n2', logout_devices: false });
    await hs.http.post('/_matrix/client/v3/account/password').auth(alice.accessToken, bearer).send({ new_password: 'n2', logout_devices: false, auth: passwordAuth(start.body.session, alice.password) });
    expect((await hs.http.get('/_matrix/client/v3/account/whoami').auth(other, bearer)).status).toBe(200);
  });

  it('refuses a bot’s own password change: the operator rotates its secret', async () => {
    const bot = await hs.services.accounts.createOrRotateBot('helper');
    const token = await login(hs, 'helper', bot.password);
    const refused = await hs.http.post('/_matrix/client/v3/account/password').auth(token, bearer).send({ new_password: 'mine' });
    expectMatrixError(refused, 403, 'M_FORBIDDEN');
    expect(refused.body.error).toContain('bot-homeserver bots create');
    // And /capabilities says so to each: people may, bots may not.
    const capability = async (accessToken: string) =>
      (await hs.http.get('/_matrix/client/v3/capabilities').auth(accessToken, bearer)).body.capabilities['m.change_password'];
    expect(await capability(token)).toEqual({ enabled: false });
    expect(await capability(alice.accessToken)).toEqual({ enabled: true });
  });

  it('deactivates the account with UIA: sessions end, rooms are left, the name stays taken', async () => {
    const room = (await hs.http.post('/_matrix/client/v3/createRoom').auth(alice.accessToken, bearer).send({ preset: 'public_chat' })).body.room_id as string;
    const bob = await createUser(hs, 'bob');
    await hs.http.post(`/_matrix/client/v3/rooms/${room}/join`).auth(bob.accessToken, bearer).send({});
    const start = await hs.http.post('/_matrix/client/v3/account/deactivate').auth(bob.accessToken, bearer).send({});
    expect(start.status).toBe(401);
    expectMatchesSpec('POST', '/_matrix/client/v3/account/deactivate', start);
    const done = await hs.http.post('/_matrix/client/v3/account/deactivate').auth(bob.accessToken, bearer).send({ auth: passwordAuth(start.body.session, bob.password, 'bob') });
    expect(done.status).toBe(200);
    expectMatchesSpec('POST', '/_matrix/client/v3/account/deactivate', done);
    expect(done.body).toEqual({ id_server_unbind_result: 'no-support' });
    expect((await hs.http.get('/_matrix/client/v3/account/whoami').auth(bob.accessToken, bearer)).status).toBe(401);
    const members = await hs.http.get(`/_matrix/client/v3/rooms/${room}/members`).auth(alice.accessToken, bearer);
    expect(members.body.chunk.find((e: { state_key: string }) => e.state_key === bob.userId).content.membership).toBe('leave');
    await expect(login(hs, 'bob', bob.password)).rejects.toThrow(/403/);
    expectMatrixError(await hs.http.post('/_matrix/client/v3/account/deactivate').auth(alice.accessToken, bearer).send({ auth: passwordAuth('no-such-session', alice.password) }), 400, 'M_UNKNOWN');
  });
});

describe('erasure', () => {
  it('with erase: true, a deactivated user’s messages stay for those who were in the room, and are redacted for newcomers', async () => {
    const room = (await hs.http.post('/_matrix/client/v3/createRoom').auth(alice.accessToken, bearer).send({ preset: 'public_chat' })).body.room_id as string;
    const member = await createUser(hs, 'member');
    const joiner = await createUser(hs, 'joiner');
    await hs.http.post(`/_matrix/client/v3/rooms/${room}/join`).auth(member.accessToken, bearer).send({});
    const sent = (await hs.http.put(`/_matrix/client/v3/rooms/${room}/send/m.room.message/t1`).auth(alice.accessToken, bearer).send({ msgtype: 'm.text', body: 'body1' })).body.event_id as string;
    await hs.http.post(`/_matrix/client/v3/rooms/${room}/join`).auth(joiner.accessToken, bearer).send({});
    const messageFor = async (user: TestUser) => {
      const sync = await hs.http.get('/_matrix/client/v3/sync').auth(user.accessToken, bearer);
      return (sync.body.rooms.join[room].timeline.events as Array<{ event_id: string; type: string; content: unknown }>).find((e) => e.event_id === sent);
    };
    expect((await messageFor(joiner))?.content).toEqual({ msgtype: 'm.text', body: 'body1' });

    const start = await hs.http.post('/_matrix/client/v3/account/deactivate').auth(alice.accessToken, bearer).send({ erase: true });
    const done = await hs.http.post('/_matrix/client/v3/account/deactivate').auth(alice.accessToken, bearer).send({ erase: true, auth: passwordAuth(start.body.session, alice.password) });
    expect(done.status).toBe(200);
    expect(await messageFor(member)).toMatchObject({ type: 'm.room.message', content: { msgtype: 'm.text', body: 'body1' } });
    expect(await messageFor(joiner)).toMatchObject({ type: 'm.room.message', content: {} });
    // /event and /messages too.
    expect((await hs.http.get(`/_matrix/client/v3/rooms/${room}/event/${encodeURIComponent(sent)}`).auth(joiner.accessToken, bearer)).body.content).toEqual({});
    expect((await hs.http.get(`/_matrix/client/v3/rooms/${room}/event/${encodeURIComponent(sent)}`).auth(member.accessToken, bearer)).body.content).toEqual({ msgtype: 'm.text', body: 'body1' });
  });
});
