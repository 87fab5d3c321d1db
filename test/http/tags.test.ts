/** Room tags: /user/{userId}/rooms/{roomId}/tags, and m.tag in the room's account data in sync. */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createUser, startTestHomeserver, type TestHomeserver, type TestUser } from '../support/homeserver.js';
import { expectMatchesSpec, expectMatrixError } from '../support/spec-validator.js';

let hs: TestHomeserver;
let alice: TestUser;
let room: string;
const bearer = { type: 'bearer' } as const;
beforeEach(async () => {
  hs = await startTestHomeserver();
  alice = await createUser(hs, 'alice');
  room = (await hs.http.post('/_matrix/client/v3/createRoom').auth(alice.accessToken, bearer).send({})).body.room_id as string;
});
afterEach(() => hs.close());

const tagsPath = (userId: string, roomId: string) => `/_matrix/client/v3/user/${encodeURIComponent(userId)}/rooms/${encodeURIComponent(roomId)}/tags`;

describe('room tags', () => {
  it('adds, lists and removes tags, and sync shows them as m.tag', async () => {
    const empty = await hs.http.get(tagsPath(alice.userId, room)).auth(alice.accessToken, bearer);
    expectMatchesSpec('GET', tagsPath(alice.userId, room), empty);
    expect(empty.body).toEqual({ tags: {} });
    const since = (await hs.http.get('/_matrix/client/v3/sync').auth(alice.accessToken, bearer)).body.next_batch as string;

    const put = await hs.http.put(`${tagsPath(alice.userId, room)}/m.favourite`).auth(alice.accessToken, bearer).send({ order: 0.25 });
    expectMatchesSpec('PUT', `${tagsPath(alice.userId, room)}/m.favourite`, put);
    await hs.http.put(`${tagsPath(alice.userId, room)}/u.work`).auth(alice.accessToken, bearer).send({});
    const listed = await hs.http.get(tagsPath(alice.userId, room)).auth(alice.accessToken, bearer);
    expect(listed.body).toEqual({ tags: { 'm.favourite': { order: 0.25 }, 'u.work': {} } });

    const sync = await hs.http.get(`/_matrix/client/v3/sync?since=${since}`).auth(alice.accessToken, bearer);
    const events = sync.body.rooms.join[room].account_data.events as Array<{ type: string; content: unknown }>;
    expect(events).toContainEqual({ type: 'm.tag', content: { tags: { 'm.favourite': { order: 0.25 }, 'u.work': {} } } });

    const removed = await hs.http.delete(`${tagsPath(alice.userId, room)}/m.favourite`).auth(alice.accessToken, bearer);
    expectMatchesSpec('DELETE', `${tagsPath(alice.userId, room)}/m.favourite`, removed);
    expect((await hs.http.get(tagsPath(alice.userId, room)).auth(alice.accessToken, bearer)).body).toEqual({ tags: { 'u.work': {} } });
    // Removing what is not there is fine.
    expect((await hs.http.delete(`${tagsPath(alice.userId, room)}/m.lowpriority`).auth(alice.accessToken, bearer)).status).toBe(200);
  });

  it('keeps every tag when many are added at once', async () => {
    await Promise.all(Array.from({ length: 10 }, (_, i) => hs.http.put(`${tagsPath(alice.userId, room)}/u.t${i}`).auth(alice.accessToken, bearer).send({})));
    expect(Object.keys((await hs.http.get(tagsPath(alice.userId, room)).auth(alice.accessToken, bearer)).body.tags)).toHaveLength(10);
  });

  it('refuses other users’ tags, rooms one is not in, bad orders and long names', async () => {
    const bob = await createUser(hs, 'bob');
    expectMatrixError(await hs.http.get(tagsPath(alice.userId, room)).auth(bob.accessToken, bearer), 403, 'M_FORBIDDEN');
    expectMatrixError(await hs.http.put(`${tagsPath(bob.userId, room)}/u.x`).auth(bob.accessToken, bearer).send({}), 403, 'M_FORBIDDEN');
    expectMatrixError(await hs.http.put(`${tagsPath(alice.userId, room)}/u.x`).auth(alice.accessToken, bearer).send({ order: 'first' }), 400, 'M_BAD_JSON');
    expectMatrixError(await hs.http.put(`${tagsPath(alice.userId, room)}/${'t'.repeat(300)}`).auth(alice.accessToken, bearer).send({}), 400, 'M_INVALID_PARAM');
  });
});
