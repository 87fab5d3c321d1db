/**
 * Two servers over real TLS on loopback, federating rooms: a bot on A joins a room on B by alias
 * and both chat; B's user joins A's room; invites both ways, a rejected invite; kick and ban
 * across servers; typing and receipts as EDUs.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { client, type Json, type TestClient } from '../support/client.js';
import { createUser, startFederation, type Federation } from '../support/federation.js';

let federation: Federation;
let botA: TestClient;
let aliceB: TestClient;
let carolB: TestClient;

beforeAll(async () => {
  federation = await startFederation(['a.test', 'b.test'], () => ({ federation: { min_retry_interval: '200ms', max_retry_interval: '1s' } }));
  const a = federation.servers.get('a.test')!.hs;
  const b = federation.servers.get('b.test')!.hs;
  botA = client(a, await createUser(a, 'bot'));
  aliceB = client(b, await createUser(b, 'alice'));
  carolB = client(b, await createUser(b, 'carol'));
});
afterAll(() => federation?.close());

const bodies = (events: Json[]) => events.filter((event) => event.type === 'm.room.message').map((event) => event.content.body);

describe('joining rooms across servers', () => {
  it('a bot on A joins a room on B by alias, and both sides chat', async () => {
    const roomId = await aliceB.createRoom({ preset: 'public_chat', room_alias_name: 'lobby', name: 'Lobby' });
    await aliceB.send(roomId, { msgtype: 'm.text', body: 'before the bot came' });
    const joined = await botA.ok('POST', `/join/${encodeURIComponent('#lobby:b.test')}`, {});
    expect(joined.room_id).toBe(roomId);

    // The bot sees the room with its state and the history before its join.
    const state = await botA.ok('GET', `/rooms/${encodeURIComponent(roomId)}/state/m.room.name/`);
    expect(state.name).toBe('Lobby');
    const seen = await botA.waitForEvent(roomId, (event) => event.type === 'm.room.member' && event.state_key === botA.userId);
    expect(seen.content.membership).toBe('join');
    const page = await botA.ok('GET', `/rooms/${encodeURIComponent(roomId)}/messages`, undefined, { dir: 'b', limit: 50 });
    expect(bodies(page.chunk)).toContain('before the bot came');

    // B learns of the join; both directions carry messages.
    await aliceB.waitForEvent(roomId, (event) => event.type === 'm.room.member' && event.state_key === botA.userId && event.content.membership === 'join');
    await botA.send(roomId, { msgtype: 'm.text', body: 'hello from A' });
    const fromA = await aliceB.waitForEvent(roomId, (event) => event.content?.body === 'hello from A');
    expect(fromA.sender).toBe(botA.userId);
    await aliceB.send(roomId, { msgtype: 'm.text', body: 'hello from B' });
    const fromB = await botA.waitForEvent(roomId, (event) => event.content?.body === 'hello from B');
    expect(fromB.sender).toBe(aliceB.userId);

    // A redaction on one server redacts the event on the other.
    await aliceB.ok('PUT', `/rooms/${encodeURIComponent(roomId)}/redact/${encodeURIComponent(fromB.event_id)}/r1`, { reason: 'oops' });
    await expect
      .poll(async () => (await botA.ok('GET', `/rooms/${encodeURIComponent(roomId)}/event/${encodeURIComponent(fromB.event_id)}`)).content, { timeout: 10_000 })
      .toEqual({});

    // The alias and Alice's profile, asked of B through A.
    const alias = await botA.ok('GET', `/directory/room/${encodeURIComponent('#lobby:b.test')}`);
    expect(alias).toEqual({ room_id: roomId, servers: expect.arrayContaining(['b.test']) });
    await aliceB.ok('PUT', `/profile/${encodeURIComponent(aliceB.userId)}/displayname`, { displayname: 'Alice' });
    expect(await botA.ok('GET', `/profile/${encodeURIComponent(aliceB.userId)}`)).toEqual({ displayname: 'Alice' });
  });

  it('B\u2019s user joins a public room on A by id', async () => {
    const roomId = await botA.createRoom({ preset: 'public_chat' });
    await botA.send(roomId, { msgtype: 'm.text', body: 'welcome' });
    const joined = await carolB.ok('POST', `/join/${encodeURIComponent(roomId)}`, {}, { server_name: 'a.test' });
    expect(joined.room_id).toBe(roomId);
    await botA.waitForEvent(roomId, (event) => event.type === 'm.room.member' && event.state_key === carolB.userId && event.content.membership === 'join');
    await carolB.send(roomId, { msgtype: 'm.text', body: 'thanks' });
    await botA.waitForEvent(roomId, (event) => event.content?.body === 'thanks');
    const members = await carolB.ok('GET', `/rooms/${encodeURIComponent(roomId)}/joined_members`);
    expect(Object.keys(members.joined).sort()).toEqual([botA.userId, carolB.userId].sort());
  });
});

describe('restricted rooms across servers', () => {
  it('a bot on A joins a restricted room of B because it is in the allowed room; B vouches and countersigns', async () => {
    const lobby = await aliceB.createRoom({ preset: 'public_chat' });
    const restricted = await aliceB.createRoom({
      room_version: '10',
      preset: 'private_chat',
      initial_state: [{ type: 'm.room.join_rules', state_key: '', content: { join_rule: 'restricted', allow: [{ type: 'm.room_membership', room_id: lobby }] } }],
    });
    const refused = await botA.request('POST', `/join/${encodeURIComponent(restricted)}`, {}, { server_name: 'b.test' });
    expect(refused.status).toBe(400);
    expect(refused.body.errcode).toBe('M_UNABLE_TO_AUTHORISE_JOIN');
    await botA.ok('POST', `/join/${encodeURIComponent(lobby)}`, {}, { server_name: 'b.test' });
    await aliceB.waitForEvent(lobby, (event) => event.type === 'm.room.member' && event.state_key === botA.userId);
    await botA.ok('POST', `/join/${encodeURIComponent(restricted)}`, {}, { server_name: 'b.test' });
    const join = await aliceB.waitForEvent(restricted, (event) => event.type === 'm.room.member' && event.state_key === botA.userId && event.content.membership === 'join');
    expect(join.content.join_authorised_via_users_server).toBe(aliceB.userId);
    const stored = await federation.servers.get('a.test')!.services.storage.rooms.getEvent(join.event_id as string);
    expect(Object.keys(JSON.parse(stored!.pdu_extra!).signatures).sort()).toEqual(['a.test', 'b.test']);
  });
});

describe('every room version across servers', () => {
  it.each(['3', '4', '6', '8', '11', '12'])('room version %s: a bot on A joins a room of B and both chat', async (version) => {
    const roomId = await aliceB.createRoom({ preset: 'public_chat', room_version: version });
    await botA.ok('POST', `/join/${encodeURIComponent(roomId)}`, {}, { server_name: 'b.test' });
    await botA.send(roomId, { msgtype: 'm.text', body: `A in v${version}` });
    await aliceB.waitForEvent(roomId, (event) => event.content?.body === `A in v${version}`);
    await aliceB.send(roomId, { msgtype: 'm.text', body: `B in v${version}` });
    const seen = await botA.waitForEvent(roomId, (event) => event.content?.body === `B in v${version}`);
    // v3 ids are standard base64, v4+ url-safe (no '/' or '+').
    if (version !== '3') expect(seen.event_id).not.toMatch(/[+/]/);
    const create = await botA.ok('GET', `/rooms/${encodeURIComponent(roomId)}/state/m.room.create/`);
    expect(create.room_version).toBe(version);
  });
});

describe('invites across servers', () => {
  it('an invite in createRoom reaches a user of B, who can join at once', async () => {
    const roomId = await botA.createRoom({ preset: 'private_chat', invite: [aliceB.userId], is_direct: true });
    const invite = await aliceB.syncUntil((sync) => (sync.rooms?.invite?.[roomId] as Json | undefined));
    const own = (invite.invite_state.events as Json[]).find((e) => e.type === 'm.room.member' && e.state_key === aliceB.userId);
    expect(own?.content).toMatchObject({ membership: 'invite', is_direct: true });
    // Right away, as a bot that auto-joins does: the inviting server may not have written the invite yet.
    await aliceB.join(roomId);
    await botA.waitForEvent(roomId, (event) => event.type === 'm.room.member' && event.state_key === aliceB.userId && event.content.membership === 'join');
  });

  it('a user on A invites a user on B, who sees the invite and joins', async () => {
    const roomId = await botA.createRoom({ preset: 'private_chat', name: 'Private' });
    await botA.invite(roomId, aliceB.userId);
    const inviteState = await aliceB.waitForInvite(roomId);
    expect(inviteState.find((event) => event.type === 'm.room.name')?.content.name).toBe('Private');
    const own = inviteState.find((event) => event.type === 'm.room.member' && event.state_key === aliceB.userId);
    expect(own?.sender).toBe(botA.userId);
    await aliceB.join(roomId);
    await botA.waitForEvent(roomId, (event) => event.type === 'm.room.member' && event.state_key === aliceB.userId && event.content.membership === 'join');
    // The invite carried Alice's profile as B gave it.
    const invite = (await botA.ok('GET', `/rooms/${encodeURIComponent(roomId)}/messages`, undefined, { dir: 'b', limit: 20 })).chunk.find(
      (event: Json) => event.type === 'm.room.member' && event.state_key === aliceB.userId && event.content.membership === 'invite',
    );
    expect(invite.content.displayname).toBe('Alice');
  });

  it('an invite from B is rejected from A through make_leave and send_leave', async () => {
    const roomId = await aliceB.createRoom({ preset: 'private_chat' });
    await aliceB.invite(roomId, botA.userId);
    await botA.waitForInvite(roomId);
    await botA.ok('POST', `/rooms/${encodeURIComponent(roomId)}/leave`, {});
    await aliceB.waitForEvent(roomId, (event) => event.type === 'm.room.member' && event.state_key === botA.userId && event.content.membership === 'leave');
    const left = await botA.syncUntil((sync) => sync.rooms?.leave?.[roomId]);
    expect(left.timeline.events.at(-1).content.membership).toBe('leave');
  });

  it('an invite withdrawn on B (a kick of the invitee) is withdrawn on A', async () => {
    const roomId = await aliceB.createRoom({ preset: 'private_chat' });
    await aliceB.invite(roomId, botA.userId);
    await botA.waitForInvite(roomId);
    await aliceB.ok('POST', `/rooms/${encodeURIComponent(roomId)}/kick`, { user_id: botA.userId, reason: 'sorry, wrong bot' });
    const left = await botA.syncUntil((sync) => sync.rooms?.leave?.[roomId]);
    expect(left.timeline.events.at(-1)).toMatchObject({ sender: aliceB.userId, content: { membership: 'leave', reason: 'sorry, wrong bot' } });
  });

  it('kick and ban of a remote user reach their server', async () => {
    const roomId = await aliceB.createRoom({ preset: 'public_chat' });
    await botA.ok('POST', `/join/${encodeURIComponent(roomId)}`, {}, { server_name: 'b.test' });
    await aliceB.ok('POST', `/rooms/${encodeURIComponent(roomId)}/kick`, { user_id: botA.userId, reason: 'bye' });
    await botA.syncUntil((sync) => sync.rooms?.leave?.[roomId]);
    await botA.ok('POST', `/join/${encodeURIComponent(roomId)}`, {}, { server_name: 'b.test' });
    await aliceB.ok('POST', `/rooms/${encodeURIComponent(roomId)}/ban`, { user_id: botA.userId });
    await botA.syncUntil((sync) => (sync.rooms?.leave?.[roomId]?.timeline?.events as Json[] | undefined)?.find((event) => event.content?.membership === 'ban'));
    const again = await botA.request('POST', `/join/${encodeURIComponent(roomId)}`, {}, { server_name: 'b.test' });
    expect(again.status).toBe(403);
  });

  it('a user on A knocks on a room of B, is let in by an invite, and joins', async () => {
    const roomId = await aliceB.createRoom({ preset: 'private_chat', name: 'Knock here', initial_state: [{ type: 'm.room.join_rules', state_key: '', content: { join_rule: 'knock' } }] });
    const knocked = await botA.ok('POST', `/knock/${encodeURIComponent(roomId)}`, { reason: 'let me in' }, { server_name: 'b.test' });
    expect(knocked.room_id).toBe(roomId);
    const state = await botA.syncUntil((sync) => sync.rooms?.knock?.[roomId]?.knock_state?.events as Json[] | undefined);
    expect(state.find((event) => event.type === 'm.room.name')?.content.name).toBe('Knock here');
    await aliceB.waitForEvent(roomId, (event) => event.type === 'm.room.member' && event.state_key === botA.userId && event.content.membership === 'knock');
    await aliceB.invite(roomId, botA.userId);
    await botA.waitForInvite(roomId);
    await botA.join(roomId);
    await aliceB.waitForEvent(roomId, (event) => event.type === 'm.room.member' && event.state_key === botA.userId && event.content.membership === 'join');
  });
});
