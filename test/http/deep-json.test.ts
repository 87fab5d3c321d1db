/**
 * Deeply nested JSON: refused at the door on every route that stores a body, and, for rows written
 * before the limit existed, never a 500 on the way out. A member who could store an event nested a
 * few thousand levels deep used to make every read of the room (sync, messages, event, context)
 * overflow the stack for everyone in it.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MAX_JSON_DEPTH } from '../../src/core/json.js';
import { rowFromEvent, type StoredEvent } from '../../src/rooms/events.js';
import { clientsFor, timelineOf, type TestClient } from '../support/client.js';
import { startTestHomeserver, type TestHomeserver } from '../support/homeserver.js';
import { validateMatrixError } from '../support/spec-validator.js';

let hs: TestHomeserver;
let alice: TestClient;
let bob: TestClient;
let roomId: string;

beforeEach(async () => {
  hs = await startTestHomeserver();
  [alice, bob] = await clientsFor(hs, 'alice', 'bob');
  roomId = await alice.createRoom({ preset: 'public_chat' });
  await bob.join(roomId);
});
afterEach(() => hs.close());

const enc = encodeURIComponent;

/** `{"msgtype":"m.text","body":"x","a":{"a":...}}` with `depth` levels of objects in all. */
function nestedContent(depth: number): string {
  return '{"msgtype":"m.text","body":"x","a":'.concat('{"a":'.repeat(depth - 1), '1', '}'.repeat(depth - 1), '}');
}

/** `levels` levels of objects at the end of `prefix` (which is open `prefix`'s own depth deep). */
function nestedUnder(prefix: string, levels: number, suffix: string): string {
  return prefix + '{"a":'.repeat(levels) + '1' + '}'.repeat(levels) + suffix;
}

async function put(path: string, body: string, client = alice) {
  return hs.http.put(`/_matrix/client/v3${path}`).auth(client.user.accessToken, { type: 'bearer' }).set('Content-Type', 'application/json').send(body);
}
async function post(path: string, body: string, client = alice) {
  return hs.http.post(`/_matrix/client/v3${path}`).auth(client.user.accessToken, { type: 'bearer' }).set('Content-Type', 'application/json').send(body);
}

function expectTooDeep(res: { status: number; body: unknown }, what: string): void {
  expect(res.status, `${what}: ${JSON.stringify(res.body).slice(0, 200)}`).toBe(400);
  expect(validateMatrixError(res.body)).toEqual([]);
  expect((res.body as { errcode: string }).errcode, what).toBe('M_BAD_JSON');
}

describe('bodies nested deeper than the limit', () => {
  it('are refused with 400 M_BAD_JSON on every route that stores one, at any depth', async () => {
    const userId = enc(alice.userId);
    for (const depth of [MAX_JSON_DEPTH + 1, 4_000, 10_000, 100_000]) {
      const routes: Array<[string, () => Promise<{ status: number; body: unknown }>]> = [
        ['send', () => put(`/rooms/${enc(roomId)}/send/m.room.message/deep-${depth}`, nestedContent(depth))],
        ['state', () => put(`/rooms/${enc(roomId)}/state/org.example.deep/k`, nestedContent(depth))],
        ['createRoom initial_state', () => post('/createRoom', nestedUnder('{"invite":["@bob:test.local"],"initial_state":[{"type":"org.example.deep","state_key":"","content":', depth - 3, '}]}'))],
        ['createRoom creation_content', () => post('/createRoom', nestedUnder('{"creation_content":', depth - 1, '}'))],
        ['global account data', () => put(`/user/${userId}/account_data/org.example.deep`, nestedContent(depth))],
        ['room account data', () => put(`/user/${userId}/rooms/${enc(roomId)}/account_data/org.example.deep`, nestedContent(depth))],
        ['filter', () => post(`/user/${userId}/filter`, nestedUnder('{"room":{"timeline":{"org.example":', depth - 3, '}}}'))],
        ['displayname', () => put(`/profile/${userId}/displayname`, nestedUnder('{"displayname":"a","x":', depth - 1, '}'))],
        ['redact', () => put(`/rooms/${enc(roomId)}/redact/${enc('$nothing')}/deep-${depth}`, nestedUnder('{"reason":"x","x":', depth - 1, '}'))],
      ];
      for (const [what, call] of routes) expectTooDeep(await call(), `${what} at depth ${depth}`);
    }
    // Nothing of it was stored: the room holds only its creation and bob's join.
    const messages = await alice.ok('GET', `/rooms/${enc(roomId)}/messages`, undefined, { dir: 'b', limit: 100 });
    expect(messages.chunk.map((e: { type: string }) => e.type)).not.toContain('org.example.deep');
    expect(messages.chunk.filter((e: { type: string }) => e.type === 'm.room.message')).toEqual([]);
    expect((await alice.request('GET', `/user/${userId}/account_data/org.example.deep`)).status).toBe(404);
  });

  it('refuses deep inline filters on sync and messages with a 400', async () => {
    const deepFilter = nestedUnder('{"room":{"timeline":{"x":', MAX_JSON_DEPTH, '}}}');
    const sync = await hs.http.get('/_matrix/client/v3/sync').query({ filter: deepFilter }).auth(alice.user.accessToken, { type: 'bearer' });
    expect(sync.status).toBe(400);
    expect(sync.body.errcode).toBe('M_INVALID_PARAM');
    const messages = await hs.http
      .get(`/_matrix/client/v3/rooms/${enc(roomId)}/messages`)
      .query({ dir: 'b', filter: nestedUnder('{"x":', MAX_JSON_DEPTH + 1, '}') })
      .auth(alice.user.accessToken, { type: 'bearer' });
    expect(messages.status).toBe(400);
  });

  it('accepts content exactly at the limit, and every read of it works for every member', async () => {
    const res = await put(`/rooms/${enc(roomId)}/send/m.room.message/at-limit`, nestedContent(MAX_JSON_DEPTH));
    expect(res.status).toBe(200);
    const eventId = res.body.event_id as string;
    for (const member of [alice, bob]) {
      expect(timelineOf(await member.sync(), roomId).map((e) => e.event_id)).toContain(eventId);
      await member.ok('GET', `/rooms/${enc(roomId)}/messages`, undefined, { dir: 'b' });
      await member.ok('GET', `/rooms/${enc(roomId)}/event/${enc(eventId)}`);
      await member.ok('GET', `/rooms/${enc(roomId)}/context/${enc(eventId)}`);
    }
  });
});

describe('a deep event stored before the limit existed', () => {
  it('never makes a read answer 500: sync, messages, event and context still work', async () => {
    const since = (await bob.sync()).next_batch as string;
    // Written straight to the database, as an older version of the server would have.
    const content = JSON.parse('{"msgtype":"m.text","body":"deep","a":' + '{"a":'.repeat(4_000) + '1' + '}'.repeat(4_000) + '}') as Record<string, unknown>;
    const { storage, stream } = hs.services;
    const event: StoredEvent = {
      stream: 0, eventId: '$legacy-deep-event', roomId, type: 'm.room.message', stateKey: undefined, sender: alice.userId,
      originServerTs: hs.clock.now(), content, replacesState: undefined, prevContent: undefined, prevSender: undefined,
      redacts: undefined, redactedBy: undefined, historyVisibility: 'shared', txnDeviceId: undefined, txnScope: undefined, txnId: undefined,
      depth: 0, prevEvents: undefined, authEvents: undefined, pduExtra: undefined, stateGroup: undefined, outlier: false, rejected: undefined, softFailed: false,
    };
    await storage.transaction(async (stores) => {
      event.stream = stream.next();
      const row = rowFromEvent({ ...event, content: {} });
      await stores.rooms.insertEvents([{ ...row, content: '{"msgtype":"m.text","body":"deep","a":' + '{"a":'.repeat(4_000) + '1' + '}'.repeat(4_000) + '}' }]);
    });
    stream.commit(event.stream);
    // The room's in-memory snapshot does not know the row, as after a restart.
    hs.services.roomCache.forgetRoom(roomId);

    for (const member of [alice, bob]) {
      const initial = await member.sync();
      const shown = timelineOf(initial, roomId).find((e) => e.event_id === '$legacy-deep-event');
      expect(shown?.content).toEqual({});
      await member.sync({ since });
      await member.ok('GET', `/rooms/${enc(roomId)}/messages`, undefined, { dir: 'b' });
      expect((await member.ok('GET', `/rooms/${enc(roomId)}/event/${enc('$legacy-deep-event')}`)).content).toEqual({});
      await member.ok('GET', `/rooms/${enc(roomId)}/context/${enc('$legacy-deep-event')}`);
    }
    // The room goes on.
    await bob.send(roomId, { msgtype: 'm.text', body: 'still here' });
  });
});
