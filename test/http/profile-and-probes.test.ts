/** Profiles, push rules, presence and other endpoints SDKs call around the core. */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createUser, startTestHomeserver, type TestHomeserver } from '../support/homeserver.js';
import { client, clientsFor, type Json, type TestClient } from '../support/client.js';
import { expectMatrixError } from '../support/spec-validator.js';

let hs: TestHomeserver;
let alice: TestClient;
let bob: TestClient;

beforeEach(async () => {
  hs = await startTestHomeserver();
  [alice, bob] = await clientsFor(hs, 'alice', 'bob');
});
afterEach(() => hs.close());

const enc = encodeURIComponent;

describe('profiles', () => {
  it('set and get display name and avatar; changes reach member events in joined rooms', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    const since = (await bob.sync()).next_batch;
    expect((await alice.request('PUT', `/profile/${enc(alice.userId)}/displayname`, { displayname: 'Alice Bot' })).body).toEqual({});
    await alice.ok('PUT', `/profile/${enc(alice.userId)}/avatar_url`, { avatar_url: 'mxc://test.local/abc' });
    expect(await bob.ok('GET', `/profile/${enc(alice.userId)}`)).toEqual({ displayname: 'Alice Bot', avatar_url: 'mxc://test.local/abc' });
    expect(await bob.ok('GET', `/profile/${enc(alice.userId)}/displayname`)).toEqual({ displayname: 'Alice Bot' });
    expect(await bob.ok('GET', `/profile/${enc(alice.userId)}/avatar_url`)).toEqual({ avatar_url: 'mxc://test.local/abc' });
    const seen = await bob.sync({ since });
    const members = seen.rooms.join[roomId].timeline.events.filter((e: Json) => e.type === 'm.room.member');
    expect(members.at(-1)).toMatchObject({
      state_key: alice.userId,
      content: { membership: 'join', displayname: 'Alice Bot', avatar_url: 'mxc://test.local/abc' },
      unsigned: { prev_content: { membership: 'join', displayname: 'Alice Bot' } },
    });
    const joined = await bob.ok('GET', `/rooms/${enc(roomId)}/joined_members`);
    expect(joined.joined[alice.userId]).toEqual({ display_name: 'Alice Bot', avatar_url: 'mxc://test.local/abc' });

    // Setting the same name again changes nothing: no member event (a bot that sets its name at each start).
    await alice.ok('PUT', `/profile/${enc(alice.userId)}/displayname`, { displayname: 'Alice Bot' });
    const again = await bob.sync({ since: seen.next_batch, timeout: 0 });
    expect(again.rooms?.join?.[roomId]?.timeline?.events ?? []).toEqual([]);
  });

  it('profiles are public (no token needed) unless require_auth_for_profile_requests says otherwise', async () => {
    await alice.ok('PUT', `/profile/${enc(alice.userId)}/displayname`, { displayname: 'Public Alice' });
    for (const path of ['', '/displayname']) {
      const res = await hs.http.get(`/_matrix/client/v3/profile/${enc(alice.userId)}${path}`);
      expect(res.status).toBe(200);
      expect(res.body.displayname).toBe('Public Alice');
    }
    expect((await hs.http.get(`/_matrix/client/v3/profile/${enc(alice.userId)}/avatar_url`)).status).toBe(200);
    const closed = await startTestHomeserver({ require_auth_for_profile_requests: true });
    try {
      const carol = await createUser(closed, 'carol');
      expectMatrixError(await closed.http.get(`/_matrix/client/v3/profile/${enc(carol.userId)}`), 401, 'M_MISSING_TOKEN');
      expect((await closed.http.get(`/_matrix/client/v3/profile/${enc(carol.userId)}`).auth(carol.accessToken, { type: 'bearer' })).status).toBe(200);
    } finally {
      await closed.close();
    }
  });

  it('refuses changing someone else, unknown users and too-long names', async () => {
    expectMatrixError(await bob.request('PUT', `/profile/${enc(alice.userId)}/displayname`, { displayname: 'x' }), 403, 'M_FORBIDDEN');
    expectMatrixError(await bob.request('GET', `/profile/${enc('@ghost:test.local')}`), 404, 'M_NOT_FOUND');
    expectMatrixError(await alice.request('PUT', `/profile/${enc(alice.userId)}/displayname`, { displayname: 'x'.repeat(300) }), 400, 'M_INVALID_PARAM');
    expectMatrixError(await alice.request('PUT', `/profile/${enc(alice.userId)}/displayname`, { displayname: 5 }), 400, 'M_BAD_JSON');
  });
});

describe('endpoints SDKs probe', () => {
  it('GET /pushrules/ (with and without the slash) returns the default rules for the user', async () => {
    const rules = await alice.ok('GET', '/pushrules/');
    expect(rules.global.override.map((r: Json) => r.rule_id)).toContain('.m.rule.master');
    const invite = rules.global.override.find((r: Json) => r.rule_id === '.m.rule.invite_for_me');
    expect(JSON.stringify(invite.conditions)).toContain(alice.userId);
    const noSlash = await hs.http.get('/_matrix/client/v3/pushrules').auth(alice.user.accessToken, { type: 'bearer' });
    expect(noSlash.body).toEqual(rules);
    expectMatrixError(await hs.http.get('/_matrix/client/v3/pushrules/'), 401, 'M_MISSING_TOKEN');
  });

  it('presence is one’s own to set and seen by those sharing a room; no TURN server; unknown endpoints are M_UNRECOGNIZED', async () => {
    expect(await alice.ok('PUT', `/presence/${enc(alice.userId)}/status`, { presence: 'unavailable', status_msg: 'in a meeting' })).toEqual({});
    expect(await alice.ok('GET', `/presence/${enc(alice.userId)}/status`)).toMatchObject({ presence: 'unavailable', status_msg: 'in a meeting', currently_active: false });
    // bob shares no room with alice: not his to see.
    expectMatrixError(await bob.request('GET', `/presence/${enc(alice.userId)}/status`), 403, 'M_FORBIDDEN');
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    expect(await bob.ok('GET', `/presence/${enc(alice.userId)}/status`)).toMatchObject({ presence: 'unavailable', status_msg: 'in a meeting' });
    expectMatrixError(await bob.request('PUT', `/presence/${enc(alice.userId)}/status`, { presence: 'online' }), 403, 'M_FORBIDDEN');
    expectMatrixError(await alice.request('PUT', `/presence/${enc(alice.userId)}/status`, { presence: 'dancing' }), 400, 'M_INVALID_PARAM');
    expectMatrixError(await alice.request('GET', `/presence/${enc('@nobody:test.local')}/status`), 404, 'M_NOT_FOUND');
    expect((await hs.http.get('/_matrix/client/v3/voip/turnServer').auth(alice.user.accessToken, { type: 'bearer' })).body).toEqual({});
    const probe = await hs.http.get('/_matrix/client/unstable/org.matrix.msc4143/rtc/transports').auth(alice.user.accessToken, { type: 'bearer' });
    expectMatrixError(probe, 404, 'M_UNRECOGNIZED');
  });
});

describe('response hygiene', () => {
  it('empty successes are exactly {} (matrix-nio rejects extra keys)', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    const eventId = await alice.send(roomId);
    await createUser(hs, 'carol');
    const r0 = (path: string) => `/_matrix/client/r0${path}`;
    const token = { access_token: alice.user.accessToken };
    const answers = [
      await hs.http.post(r0(`/rooms/${roomId}/invite`)).query(token).send({ user_id: '@carol:test.local' }),
      await hs.http.put(r0(`/rooms/${roomId}/typing/${alice.userId}`)).query(token).send({ typing: true, timeout: 1000 }),
      await hs.http.post(r0(`/rooms/${roomId}/receipt/m.read/${eventId}`)).query(token).send({}),
      await hs.http.put(r0(`/profile/${alice.userId}/displayname`)).query(token).send({ displayname: 'A' }),
      await hs.http.post(r0(`/rooms/${roomId}/kick`)).query(token).send({ user_id: bob.userId }),
      await hs.http.post(r0(`/rooms/${roomId}/ban`)).query(token).send({ user_id: bob.userId }),
      await hs.http.post(r0(`/rooms/${roomId}/leave`)).query(token).send({}),
    ];
    for (const answer of answers) {
      expect(answer.status).toBe(200);
      expect(answer.text).toBe('{}');
    }
  });
});
