/** Rooms and membership through HTTP: creation, the membership endpoints and their auth rules, aliases. */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createUser, startTestHomeserver, type TestHomeserver } from '../support/homeserver.js';
import { client, clientsFor, timelineOf, type TestClient } from '../support/client.js';
import { expectMatrixError, validateEvent } from '../support/spec-validator.js';

let hs: TestHomeserver;
let alice: TestClient;
let bob: TestClient;
let carol: TestClient;

beforeEach(async () => {
  hs = await startTestHomeserver();
  [alice, bob, carol] = await clientsFor(hs, 'alice', 'bob', 'carol');
});
afterEach(() => hs.close());

const enc = encodeURIComponent;

async function stateOf(c: TestClient, roomId: string) {
  return (await c.request('GET', `/rooms/${enc(roomId)}/state`)).body as unknown as Array<Record<string, any>>;
}

describe('POST /createRoom', () => {
  it('writes the initial state in the spec order, with v10 defaults and a creator in the create event', async () => {
    const roomId = await alice.createRoom({ name: 'Ops', topic: 'alerts', invite: [bob.userId], room_alias_name: 'ops' });
    expect(roomId).toMatch(/^![A-Za-z]{18}:test\.local$/);
    const sync = await alice.sync();
    const room = sync.rooms.join[roomId];
    const all = [...room.state.events, ...room.timeline.events];
    for (const event of all) expect(validateEvent(event, { roomId })).toEqual([]);
    const timeline = (await alice.ok('GET', `/rooms/${enc(roomId)}/messages`, undefined, { dir: 'f', limit: 50 })).chunk as Array<Record<string, any>>;
    expect(timeline.map((e) => `${e.type}|${e.state_key}`)).toEqual([
      'm.room.create|',
      `m.room.member|${alice.userId}`,
      'm.room.power_levels|',
      'm.room.canonical_alias|',
      'm.room.join_rules|',
      'm.room.history_visibility|',
      'm.room.guest_access|',
      'm.room.name|',
      'm.room.topic|',
      `m.room.member|${bob.userId}`,
    ]);
    const create = timeline[0]!;
    expect(create.content).toEqual({ creator: alice.userId, room_version: '10' });
    expect(timeline[2]!.content.users).toEqual({ [alice.userId]: 100 });
    expect(timeline[2]!.content.invite).toBe(0); // private_chat lets members invite
    expect(timeline[3]!.content).toEqual({ alias: '#ops:test.local' });
    const resolved = await alice.ok('GET', `/directory/room/${enc('#ops:test.local')}`);
    expect(resolved).toEqual({ room_id: roomId, servers: ['test.local'] });
  });

  it('public_chat is joinable by anyone; trusted_private_chat makes invitees admins', async () => {
    const publicRoom = await alice.createRoom({ preset: 'public_chat' });
    expect(await bob.join(publicRoom)).toBe(publicRoom);
    const trusted = await alice.createRoom({ preset: 'trusted_private_chat', invite: [bob.userId], is_direct: true });
    const pl = await alice.ok('GET', `/rooms/${enc(trusted)}/state/m.room.power_levels/`);
    expect(pl.users).toEqual({ [alice.userId]: 100, [bob.userId]: 100 });
    const invite = await alice.ok('GET', `/rooms/${enc(trusted)}/state/m.room.member/${enc(bob.userId)}`);
    expect(invite).toEqual({ membership: 'invite', is_direct: true, displayname: 'bob' });
  });

  it('visibility public implies public_chat; initial_state and overrides win over the preset', async () => {
    const roomId = await alice.createRoom({
      visibility: 'public',
      initial_state: [{ type: 'm.room.history_visibility', content: { history_visibility: 'joined' } }],
      power_level_content_override: { events_default: 10 },
      creation_content: { 'm.federate': false },
    });
    expect(await alice.ok('GET', `/rooms/${enc(roomId)}/state/m.room.join_rules`)).toEqual({ join_rule: 'public' });
    expect(await alice.ok('GET', `/rooms/${enc(roomId)}/state/m.room.history_visibility`)).toEqual({ history_visibility: 'joined' });
    expect((await alice.ok('GET', `/rooms/${enc(roomId)}/state/m.room.power_levels/`)).events_default).toBe(10);
    expect((await alice.ok('GET', `/rooms/${enc(roomId)}/state/m.room.create/`))['m.federate']).toBe(false);
    const states = await stateOf(alice, roomId);
    expect(states.filter((e) => e.type === 'm.room.history_visibility')).toHaveLength(1);
  });

  it('refuses unknown room versions, taken aliases, bad invitees and bad bodies', async () => {
    expectMatrixError(await alice.request('POST', '/createRoom', { room_version: '99' }), 400, 'M_UNSUPPORTED_ROOM_VERSION');
    await alice.createRoom({ room_alias_name: 'taken' });
    expectMatrixError(await bob.request('POST', '/createRoom', { room_alias_name: 'taken' }), 400, 'M_ROOM_IN_USE');
    expectMatrixError(await alice.request('POST', '/createRoom', { room_alias_name: 'a:b' }), 400, 'M_INVALID_PARAM');
    expectMatrixError(await alice.request('POST', '/createRoom', { invite: ['not-a-user'] }), 400, 'M_INVALID_PARAM');
    expectMatrixError(await alice.request('POST', '/createRoom', { invite: ['@nobody:test.local'] }), 404, 'M_NOT_FOUND');
    expectMatrixError(await alice.request('POST', '/createRoom', { preset: 'party' }), 400, 'M_BAD_JSON');
    expectMatrixError(await alice.request('POST', '/createRoom', { name: 5 }), 400, 'M_BAD_JSON');
    // A failed creation leaves no alias behind.
    expectMatrixError(await alice.request('POST', '/createRoom', { room_alias_name: 'ghost', room_version: '99' }), 400, 'M_UNSUPPORTED_ROOM_VERSION');
    expectMatrixError(await alice.request('GET', `/directory/room/${enc('#ghost:test.local')}`), 404, 'M_NOT_FOUND');
  });

  it('accepts an empty body, and needs a token', async () => {
    const res = await hs.http.post('/_matrix/client/v3/createRoom').auth(alice.user.accessToken, { type: 'bearer' });
    expect(res.status).toBe(200);
    expectMatrixError(await hs.http.post('/_matrix/client/v3/createRoom').send({}), 401, 'M_MISSING_TOKEN');
  });
});

describe('membership', () => {
  it('invite, join, leave and rejoin rules of a private room', async () => {
    const roomId = await alice.createRoom();
    expectMatrixError(await bob.request('POST', `/join/${enc(roomId)}`, {}), 403, 'M_FORBIDDEN');
    expect((await alice.request('POST', `/rooms/${enc(roomId)}/invite`, { user_id: bob.userId })).body).toEqual({});
    expect(await bob.ok('POST', `/rooms/${enc(roomId)}/join`, {})).toEqual({ room_id: roomId });
    expect(await bob.ok('GET', '/joined_rooms')).toEqual({ joined_rooms: [roomId] });
    expect(await bob.ok('POST', `/rooms/${enc(roomId)}/leave`, {})).toEqual({});
    expect(await bob.ok('GET', '/joined_rooms')).toEqual({ joined_rooms: [] });
    expectMatrixError(await bob.request('POST', `/rooms/${enc(roomId)}/join`, {}), 403, 'M_FORBIDDEN');
  });

  it('an invitee can reject by leaving; inviting needs membership and power', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' }); // invite level 50
    await bob.join(roomId);
    expectMatrixError(await bob.request('POST', `/rooms/${enc(roomId)}/invite`, { user_id: carol.userId }), 403, 'M_FORBIDDEN');
    expectMatrixError(await carol.request('POST', `/rooms/${enc(roomId)}/invite`, { user_id: carol.userId }), 403, 'M_FORBIDDEN');
    await alice.invite(roomId, carol.userId);
    expect(await carol.ok('POST', `/rooms/${enc(roomId)}/leave`, {})).toEqual({});
    const member = await alice.ok('GET', `/rooms/${enc(roomId)}/state/m.room.member/${enc(carol.userId)}`);
    expect(member.membership).toBe('leave');
    expectMatrixError(await alice.request('POST', `/rooms/${enc(roomId)}/invite`, { user_id: '@ghost:test.local' }), 404, 'M_NOT_FOUND');
    expectMatrixError(await alice.request('POST', `/rooms/${enc(roomId)}/invite`, { user_id: bob.userId }), 403, 'M_FORBIDDEN');
  });

  it('kick and ban follow power levels; a banned user cannot join a public room until unbanned', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    await carol.join(roomId);
    // A member at 0 cannot kick; a moderator (50) can kick a 0 but not an admin or a peer.
    expectMatrixError(await bob.request('POST', `/rooms/${enc(roomId)}/kick`, { user_id: carol.userId }), 403, 'M_FORBIDDEN');
    await alice.setState(roomId, 'm.room.power_levels', '', {
      ...(await alice.ok('GET', `/rooms/${enc(roomId)}/state/m.room.power_levels/`)),
      users: { [alice.userId]: 100, [bob.userId]: 50 },
    });
    expectMatrixError(await bob.request('POST', `/rooms/${enc(roomId)}/kick`, { user_id: alice.userId }), 403, 'M_FORBIDDEN');
    expect(await bob.ok('POST', `/rooms/${enc(roomId)}/kick`, { user_id: carol.userId, reason: 'spam' })).toEqual({});
    const kicked = await alice.ok('GET', `/rooms/${enc(roomId)}/state/m.room.member/${enc(carol.userId)}`);
    expect(kicked).toEqual({ membership: 'leave', reason: 'spam' });
    await carol.join(roomId); // public room: a kick is not a ban
    expect(await bob.ok('POST', `/rooms/${enc(roomId)}/ban`, { user_id: carol.userId })).toEqual({});
    expectMatrixError(await carol.request('POST', `/join/${enc(roomId)}`, {}), 403, 'M_FORBIDDEN');
    expectMatrixError(await carol.request('PUT', `/rooms/${enc(roomId)}/send/m.room.message/x1`, { body: 'hi', msgtype: 'm.text' }), 403, 'M_FORBIDDEN');
    expect(await bob.ok('POST', `/rooms/${enc(roomId)}/unban`, { user_id: carol.userId })).toEqual({});
    expect(await carol.join(roomId)).toBe(roomId);
    expectMatrixError(await bob.request('POST', `/rooms/${enc(roomId)}/unban`, { user_id: carol.userId }), 403, 'M_FORBIDDEN');
  });

  it('joins by alias, raw or encoded, on v3 and r0', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat', room_alias_name: 'lobby' });
    const r0 = client(hs, bob.user, '/_matrix/client/r0');
    const res = await hs.http.post('/_matrix/client/r0/join/%23lobby:test.local').query({ access_token: bob.user.accessToken }).send({});
    expect(res.body).toEqual({ room_id: roomId });
    expect(await r0.ok('GET', '/joined_rooms')).toEqual({ joined_rooms: [roomId] });
    // nio sends ! and : unencoded.
    const raw = await hs.http.get(`/_matrix/client/r0/rooms/${roomId}/joined_members`).query({ access_token: bob.user.accessToken });
    expect(raw.status).toBe(200);
    expectMatrixError(await carol.request('POST', `/join/${enc('#nowhere:test.local')}`, {}), 404, 'M_NOT_FOUND');
    expectMatrixError(await carol.request('POST', `/join/${enc('garbage')}`, {}), 400, 'M_INVALID_PARAM');
  });

  it('keeps the custom content of a join request, but not the keys the server sets', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat', room_alias_name: 'custom' });
    await bob.ok('POST', `/join/${enc(roomId)}`, { foo: 'bar', membership: 'leave', join_authorised_via_users_server: alice.userId });
    const member = await bob.ok('GET', `/rooms/${enc(roomId)}/state/m.room.member/${enc(bob.userId)}`);
    expect(member).toMatchObject({ foo: 'bar', membership: 'join' });
    expect(member).not.toHaveProperty('join_authorised_via_users_server');
    await carol.ok('POST', `/join/${enc('#custom:test.local')}`, { displayname: 'Carol here', reason: 'hello' });
    expect(await carol.ok('GET', `/rooms/${enc(roomId)}/state/m.room.member/${enc(carol.userId)}`)).toMatchObject({ displayname: 'Carol here', reason: 'hello', membership: 'join' });
    await carol.ok('POST', `/rooms/${enc(roomId)}/join`, { custom: { nested: true } });
    expect(await carol.ok('GET', `/rooms/${enc(roomId)}/state/m.room.member/${enc(carol.userId)}`)).toMatchObject({ custom: { nested: true } });
    expectMatrixError(await bob.request('POST', `/rooms/${enc(roomId)}/join`, { big: 'x'.repeat(70_000) }), 413, 'M_TOO_LARGE');
  });

  it('knock: only where the join rule says so; the knocker sees knock_state, a moderator lets them in', async () => {
    const closed = await alice.createRoom({ preset: 'private_chat' });
    expectMatrixError(await bob.request('POST', `/knock/${enc(closed)}`, {}), 403, 'M_FORBIDDEN');
    const roomId = await alice.createRoom({ preset: 'private_chat', name: 'Door', initial_state: [{ type: 'm.room.join_rules', state_key: '', content: { join_rule: 'knock' } }] });
    expect((await bob.ok('POST', `/knock/${enc(roomId)}`, { reason: 'hello' })).room_id).toBe(roomId);
    const sync = await bob.sync();
    const events = sync.rooms.knock[roomId].knock_state.events as Array<Record<string, any>>;
    expect(events.find((e) => e.type === 'm.room.name')?.content.name).toBe('Door');
    expect(events.find((e) => e.type === 'm.room.member' && e.state_key === bob.userId)?.content).toMatchObject({ membership: 'knock', reason: 'hello' });
    const v6 = await alice.createRoom({ room_version: '6', initial_state: [{ type: 'm.room.join_rules', state_key: '', content: { join_rule: 'knock' } }] });
    expectMatrixError(await carol.request('POST', `/knock/${enc(v6)}`, {}), 403, 'M_FORBIDDEN');
    await alice.invite(roomId, bob.userId);
    await bob.join(roomId);
    expect((await bob.sync()).rooms.join[roomId]).toBeDefined();
  });

  it('restricted rooms (v8+): members of an allowed room join without an invite, vouched for by a member who may invite', async () => {
    const lobby = await alice.createRoom({ preset: 'public_chat' });
    const restricted = await alice.createRoom({
      room_version: '9',
      preset: 'private_chat',
      initial_state: [{ type: 'm.room.join_rules', state_key: '', content: { join_rule: 'restricted', allow: [{ type: 'm.room_membership', room_id: lobby }] } }],
    });
    expectMatrixError(await bob.request('POST', `/join/${enc(restricted)}`, {}), 400, 'M_UNABLE_TO_AUTHORISE_JOIN');
    await bob.join(lobby);
    await bob.join(restricted);
    const member = await bob.ok('GET', `/rooms/${enc(restricted)}/state/m.room.member/${enc(bob.userId)}`);
    expect(member).toMatchObject({ membership: 'join', join_authorised_via_users_server: alice.userId });
  });

  it('forget hides a left room from sync; it needs leaving first', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    expectMatrixError(await bob.request('POST', `/rooms/${enc(roomId)}/forget`, {}), 400, 'M_UNKNOWN');
    await bob.ok('POST', `/rooms/${enc(roomId)}/leave`, {});
    expect(await bob.ok('POST', `/rooms/${enc(roomId)}/forget`)).toEqual({});
    const sync = await bob.sync({ filter: JSON.stringify({ room: { include_leave: true } }) });
    expect(sync.rooms.leave[roomId]).toBeUndefined();
    expectMatrixError(await carol.request('POST', `/rooms/${enc(roomId)}/forget`, {}), 404, 'M_NOT_FOUND');
  });
});

describe('member lists', () => {
  it('members filters by membership; joined_members always has display_name and avatar_url keys', async () => {
    await alice.ok('PUT', `/profile/${enc(alice.userId)}/displayname`, { displayname: 'Alice' });
    await bob.ok('PUT', `/profile/${enc(bob.userId)}/displayname`, { displayname: null });
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    await alice.invite(roomId, carol.userId);
    const all = await alice.ok('GET', `/rooms/${enc(roomId)}/members`);
    expect(all.chunk.map((e: any) => e.state_key).sort()).toEqual([alice.userId, bob.userId, carol.userId].sort());
    const joined = await alice.ok('GET', `/rooms/${enc(roomId)}/members`, undefined, { membership: 'join' });
    expect(joined.chunk.map((e: any) => e.state_key).sort()).toEqual([alice.userId, bob.userId].sort());
    const notJoined = await alice.ok('GET', `/rooms/${enc(roomId)}/members`, undefined, { not_membership: 'join' });
    expect(notJoined.chunk.map((e: any) => e.state_key)).toEqual([carol.userId]);
    // Checked raw: the spec's schema calls these non-nullable, but Synapse sends null and nio needs the keys.
    const res = await hs.http.get(`/_matrix/client/v3/rooms/${enc(roomId)}/joined_members`).auth(bob.user.accessToken, { type: 'bearer' });
    expect(res.body).toEqual({
      joined: {
        [alice.userId]: { display_name: 'Alice', avatar_url: null },
        [bob.userId]: { display_name: null, avatar_url: null },
      },
    });
    expectMatrixError(await carol.request('GET', `/rooms/${enc(roomId)}/joined_members`), 403, 'M_FORBIDDEN');
    expectMatrixError(await carol.request('GET', `/rooms/${enc(roomId)}/members`), 403, 'M_FORBIDDEN');
  });
});

describe('aliases', () => {
  it('PUT, GET and DELETE /directory/room, with who may do what', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    const alias = '#bots:test.local';
    expect(await bob.ok('PUT', `/directory/room/${enc(alias)}`, { room_id: roomId })).toEqual({});
    expectMatrixError(await alice.request('PUT', `/directory/room/${enc(alias)}`, { room_id: roomId }), 409, 'M_UNKNOWN');
    expectMatrixError(await carol.request('PUT', `/directory/room/${enc('#other:test.local')}`, { room_id: roomId }), 403, 'M_FORBIDDEN');
    expectMatrixError(await bob.request('PUT', `/directory/room/${enc('#x:elsewhere.org')}`, { room_id: roomId }), 400, 'M_INVALID_PARAM');
    expect((await alice.ok('GET', `/rooms/${enc(roomId)}/aliases`)).aliases).toEqual([alias]);
    // The canonical alias must name an alias of this room.
    await alice.setState(roomId, 'm.room.canonical_alias', '', { alias });
    expectMatrixError(
      await alice.request('PUT', `/rooms/${enc(roomId)}/state/m.room.canonical_alias/`, { alias: '#unknown:test.local' }),
      400,
      'M_BAD_ALIAS',
    );
    await carol.join(alias);
    expectMatrixError(await carol.request('DELETE', `/directory/room/${enc(alias)}`), 403, 'M_FORBIDDEN');
    expect(await alice.ok('DELETE', `/directory/room/${enc(alias)}`)).toEqual({}); // room admin
    expectMatrixError(await alice.request('GET', `/directory/room/${enc(alias)}`), 404, 'M_NOT_FOUND');
    expectMatrixError(await alice.request('DELETE', `/directory/room/${enc(alias)}`), 404, 'M_NOT_FOUND');
  });
});

describe('sync sees membership', () => {
  it('a member join reaches others as a timeline event', async () => {
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    const first = await alice.sync();
    await bob.join(roomId);
    const next = await alice.sync({ since: first.next_batch });
    const joins = timelineOf(next, roomId).filter((e) => e.type === 'm.room.member');
    expect(joins).toMatchObject([{ state_key: bob.userId, sender: bob.userId, content: { membership: 'join' } }]);
  });
});

describe('deactivation and admin profile changes reach rooms', () => {
  it('a deactivated user leaves every room and invite; an admin rename shows in member events', async () => {
    const admin = client(hs, await createUser(hs, 'root', { admin: true }));
    const joined = await alice.createRoom({ preset: 'public_chat' });
    const invited = await alice.createRoom();
    await bob.join(joined);
    await alice.invite(invited, bob.userId);
    await hs.http.put(`/_synapse/admin/v2/users/${enc(bob.userId)}`).auth(admin.user.accessToken, { type: 'bearer' }).send({ displayname: 'Robert' });
    expect((await alice.ok('GET', `/rooms/${enc(joined)}/joined_members`)).joined[bob.userId].display_name).toBe('Robert');
    const res = await hs.http.post(`/_synapse/admin/v1/deactivate/${enc(bob.userId)}`).auth(admin.user.accessToken, { type: 'bearer' }).send({});
    expect(res.status).toBe(200);
    expect(Object.keys((await alice.ok('GET', `/rooms/${enc(joined)}/joined_members`)).joined)).toEqual([alice.userId]);
    expect((await alice.ok('GET', `/rooms/${enc(invited)}/state/m.room.member/${enc(bob.userId)}`)).membership).toBe('leave');
  });
});
