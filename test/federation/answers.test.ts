/**
 * What a.test answers other servers, and passes on to its clients, where SyTest holds us to
 * Synapse's answers (issue 33): refusals passed through from make_join, malformed X-Matrix
 * origins, unsigned joins, invites with bad JSON either way, the room's ACL before anything else,
 * redactions across rooms, and the notary's old GET form.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canonicalJsonBytes } from '../../src/core/canonical-json.js';
import type { UnsignedPdu } from '../../src/rooms/pdu.js';
import { client, type Json, type TestClient } from '../support/client.js';
import { createUser, startFederation, type Federation, type FederatedServer } from '../support/federation.js';
import { startHostileServer, type HostileServer } from '../support/hostile-server.js';

let federation: Federation;
let a: FederatedServer;
let b: FederatedServer;
let evil: HostileServer;
let botA: TestClient;

beforeAll(async () => {
  federation = await startFederation(['a.test', 'b.test']);
  a = federation.servers.get('a.test')!;
  b = federation.servers.get('b.test')!;
  evil = await startHostileServer(federation);
  botA = client(a.hs, await createUser(a.hs, 'bot'));
});
afterAll(async () => {
  await evil?.close();
  await federation?.close();
});

const enc = encodeURIComponent;

/** What evil.test gets from a.test: status and errcode on failure, the body on success. */
async function ask(method: 'GET' | 'POST' | 'PUT', path: string, body?: unknown): Promise<{ status?: number; errcode?: string; body?: Json }> {
  try {
    return { status: 200, body: (await evil.client.request('a.test', { method, path, ...(body === undefined ? {} : { body }) })) as Json };
  } catch (err) {
    const failure = err as { status?: number; errcode?: string };
    return { status: failure.status, errcode: failure.errcode };
  }
}

/** A room of a.test that evil.test has joined, and what evil needs to build events in it. */
async function roomWithEvil(userId = '@mallory:evil.test') {
  const roomId = await botA.createRoom({ preset: 'public_chat' });
  const joined = await evil.join('a.test', roomId, userId);
  const event = async (draft: Partial<UnsignedPdu>) => {
    const room = (await a.services.roomCache.room(roomId))!;
    return evil.pdu(joined.roomVersion, {
      room_id: roomId,
      sender: userId,
      type: 'm.room.message',
      content: {},
      origin_server_ts: Date.now(),
      depth: room.head.depth + 1,
      prev_events: [...room.head.extremities],
      auth_events: [room.get('m.room.create')!.eventId, room.get('m.room.power_levels')!.eventId, joined.eventId],
      ...draft,
    });
  };
  return { roomId, joined, event };
}

describe('make_join refusals reach the client as the remote server gave them', () => {
  it('passes an unknown errcode through, and keeps room_version of M_INCOMPATIBLE_ROOM_VERSION', async () => {
    evil.route('GET', `/_matrix/federation/v1/make_join/${enc('!denied:evil.test')}`, () => ({ status: 400, body: { errcode: 'M_TEST_ERROR_CODE', error: 'denied!' } }));
    evil.route('GET', `/_matrix/federation/v1/make_join/${enc('!future:evil.test')}`, () => ({
      status: 400,
      body: { errcode: 'M_INCOMPATIBLE_ROOM_VERSION', error: 'y u no upgrade', room_version: 'some-future-version' },
    }));
    const denied = await botA.request('POST', `/join/${enc('!denied:evil.test')}`, {}, { server_name: 'evil.test' });
    expect(denied.status).toBe(400);
    expect(denied.body).toMatchObject({ errcode: 'M_TEST_ERROR_CODE', error: 'denied!' });
    const future = await botA.request('POST', `/join/${enc('!future:evil.test')}`, {}, { server_name: 'evil.test' });
    expect(future.status).toBe(400);
    expect(future.body).toMatchObject({ errcode: 'M_INCOMPATIBLE_ROOM_VERSION', room_version: 'some-future-version' });
  });
});

describe('requests refused for what they are', () => {
  it('answers 400 to an X-Matrix origin that is no server name (a non-numeric port)', async () => {
    const user = await createUser(a.hs, 'profiled');
    const answer = await a.http
      .get(`/_matrix/federation/v1/query/profile?user_id=${enc(user.userId)}`)
      .set('Authorization', 'X-Matrix origin="localhost:http",destination="a.test",key="ed25519:1",sig="c2lnbmF0dXJl"');
    expect(answer.status).toBe(400);
    expect(answer.body.errcode).toBe('M_UNAUTHORIZED');
  });

  it('refuses an unsigned send_join with 403, a malformed one with 400', async () => {
    const roomId = await botA.createRoom({ preset: 'public_chat' });
    const made = await ask('GET', `/_matrix/federation/v1/make_join/${enc(roomId)}/${enc('@joiner:evil.test')}?ver=10`);
    expect(made.status).toBe(200);
    const template = { ...(made.body!.event as Json), origin_server_ts: Date.now() };
    expect(await ask('PUT', `/_matrix/federation/v2/send_join/${enc(roomId)}/${enc('$unsigned')}`, template)).toMatchObject({ status: 403, errcode: 'M_FORBIDDEN' });
    const signed = evil.pdu('10', template as unknown as UnsignedPdu);
    const malformed = { ...signed.pdu, depth: 'deep' };
    expect(await ask('PUT', `/_matrix/federation/v2/send_join/${enc(roomId)}/${enc(signed.eventId)}`, malformed)).toMatchObject({ status: 400, errcode: 'M_BAD_JSON' });
  });

  it('refuses an invite with JSON its room version does not allow with 400 M_BAD_JSON', async () => {
    const invite = evil.pdu('10', {
      room_id: '!elsewhere:evil.test',
      sender: '@host:evil.test',
      type: 'm.room.member',
      state_key: botA.userId,
      content: { membership: 'invite' },
      origin_server_ts: Date.now(),
      depth: 5,
      prev_events: ['$prev'],
      auth_events: ['$create'],
    });
    const floating = { ...invite.pdu, content: { membership: 'invite', bad_val: 1.1 } };
    // Signed by hand: our client refuses to send what is not canonical JSON, SyTest does not.
    const path = `/_matrix/federation/v2/invite/${enc('!elsewhere:evil.test')}/${enc(invite.eventId)}`;
    const body = { room_version: '10', event: floating, invite_room_state: [] };
    const signed = canonicalJsonBytes({ method: 'PUT', uri: path, origin: 'evil.test', destination: 'a.test', content: body }, { lenient: true });
    const sig = evil.signer.sign(signed).toString('base64').replace(/=+$/, '');
    const answer = await a.http
      .put(path)
      .set('Authorization', `X-Matrix origin="evil.test",destination="a.test",key="${evil.signer.keyId}",sig="${sig}"`)
      .set('Content-Type', 'application/json')
      .send(JSON.stringify(body));
    expect(answer.status).toBe(400);
    expect(answer.body.errcode).toBe('M_BAD_JSON');
  });

  it('answers the inviter 400 M_BAD_JSON (not 502) when the invitee’s server returns JSON the room version does not allow', async () => {
    const roomId = await botA.createRoom({ preset: 'private_chat' });
    evil.route('PUT', '/_matrix/federation/v2/invite/', (request) => {
      const event = (request.body as { event: Json }).event;
      return { body: { event: { ...event, bad_val: 1.1 } } };
    });
    const answer = await botA.request('POST', `/rooms/${enc(roomId)}/invite`, { user_id: '@someone:evil.test' });
    expect(answer.status).toBe(400);
    expect(answer.body.errcode).toBe('M_BAD_JSON');
  });
});

describe('the room’s server ACL comes first', () => {
  it('a denied server gets 403 for an invite or get_missing_events, whatever the body; before the ban both are answered', async () => {
    const { roomId } = await roomWithEvil();
    const inviteFor = async (invitee: string) => {
      const room = (await a.services.roomCache.room(roomId))!;
      return evil.pdu('10', {
        room_id: roomId,
        sender: '@mallory:evil.test',
        type: 'm.room.member',
        state_key: invitee,
        content: { membership: 'invite' },
        origin_server_ts: Date.now(),
        depth: room.head.depth + 1,
        prev_events: [...room.head.extremities],
        auth_events: [room.get('m.room.create')!.eventId, room.get('m.room.power_levels')!.eventId, room.get('m.room.member', '@mallory:evil.test')!.eventId],
      });
    };
    // Before: an invite of a user nobody has, in a room we are in, is countersigned (the room's
    // auth rules judge it when it comes as a PDU), and an empty get_missing_events is answered.
    const before = await inviteFor('@nobody-here:a.test');
    expect((await ask('PUT', `/_matrix/federation/v2/invite/${enc(roomId)}/${enc(before.eventId)}`, { room_version: '10', event: before.pdu, invite_room_state: [] })).status).toBe(200);
    expect(await ask('POST', `/_matrix/federation/v1/get_missing_events/${enc(roomId)}`, {})).toMatchObject({ status: 200, body: { events: [] } });

    await botA.setState(roomId, 'm.room.server_acl', '', { allow: ['*'], deny: ['evil.test'] });
    const after = await inviteFor('@nobody-else:a.test');
    expect(await ask('PUT', `/_matrix/federation/v2/invite/${enc(roomId)}/${enc(after.eventId)}`, { room_version: '10', event: after.pdu, invite_room_state: [] })).toMatchObject({
      status: 403,
      errcode: 'M_FORBIDDEN',
    });
    expect(await ask('POST', `/_matrix/federation/v1/get_missing_events/${enc(roomId)}`, {})).toMatchObject({ status: 403, errcode: 'M_FORBIDDEN' });
  });

  it('still refuses an invite kept out of a room (one we are not in) for a user we do not have', async () => {
    const invite = evil.pdu('10', {
      room_id: '!outside:evil.test',
      sender: '@host:evil.test',
      type: 'm.room.member',
      state_key: '@ghost:a.test',
      content: { membership: 'invite' },
      origin_server_ts: Date.now(),
      depth: 5,
      prev_events: ['$prev'],
      auth_events: ['$create'],
    });
    const answer = await ask('PUT', `/_matrix/federation/v2/invite/${enc('!outside:evil.test')}/${enc(invite.eventId)}`, { room_version: '10', event: invite.pdu, invite_room_state: [] });
    expect(answer).toMatchObject({ status: 404, errcode: 'M_NOT_FOUND' });
  });
});

describe('a redaction naming another room’s event', () => {
  it('is never shown, and redacts nothing', async () => {
    const first = await roomWithEvil();
    const second = await roomWithEvil();
    const message = await first.event({ content: { msgtype: 'm.text', body: 'hi' } });
    expect((await evil.send('a.test', [message.pdu])).pdus[message.eventId]).toEqual({});
    const redaction = await second.event({ type: 'm.room.redaction', content: { redacts: message.eventId }, redacts: message.eventId });
    const sentinel = await second.event({ content: { msgtype: 'm.text', body: 'sentinel' } });
    await evil.send('a.test', [redaction.pdu]);
    await evil.send('a.test', [{ ...sentinel.pdu }]);
    await botA.waitForEvent(second.roomId, (event) => event.content?.body === 'sentinel');
    const page = await botA.ok('GET', `/rooms/${enc(second.roomId)}/messages`, undefined, { dir: 'b', limit: 20 });
    expect((page.chunk as Json[]).map((event) => event.event_id)).not.toContain(redaction.eventId);
    expect((await botA.request('GET', `/rooms/${enc(second.roomId)}/event/${enc(redaction.eventId)}`)).status).toBe(404);
    expect((await botA.ok('GET', `/rooms/${enc(first.roomId)}/event/${enc(message.eventId)}`)).content).toEqual({ msgtype: 'm.text', body: 'hi' });
  });
});

describe('the notary', () => {
  it('answers the old GET form naming a key id', async () => {
    const keyId = b.services.signer.keyId;
    const answer = await a.http.get(`/_matrix/key/v2/query/b.test/${enc(keyId)}`);
    expect(answer.status).toBe(200);
    const [listing] = answer.body.server_keys as Json[];
    expect(listing).toMatchObject({ server_name: 'b.test' });
    expect(Object.keys(listing!.verify_keys as Json)).toContain(keyId);
    expect(Object.keys(listing!.signatures as Json)).toEqual(expect.arrayContaining(['b.test', 'a.test']));
  });
});

describe('the notary keeps every key it was given', () => {
  it('fetches a server that failed once more for a key we hold nothing of, not on every anonymous query', async () => {
    const { startTestHomeserver } = await import('../support/homeserver.js');
    const hs = await startTestHomeserver();
    try {
      let fetches = 0;
      Object.assign(hs.services.federation.keyRing, {
        client: {
          request: async () => {
            fetches++;
            throw new Error('the origin is down');
          },
        },
      });
      const keyIds = Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`ed25519:k${i}`, {}]));
      for (let i = 0; i < 10; i++) {
        const answer = await hs.http.post('/_matrix/key/v2/query').send({ server_keys: { 'down.example': keyIds } });
        expect(answer.body.server_keys).toEqual([]);
      }
      // The first fetch, then one for the keys we hold nothing of; the other eight wait out the minute.
      expect(fetches).toBe(2);
    } finally {
      await hs.close();
    }
  });

  it('serves a key its server stopped listing, past its valid_until_ts, when asked for it by id', async () => {
    const { startTestHomeserver } = await import('../support/homeserver.js');
    const { ed25519Signer, signJson } = await import('../../src/core/signed-json.js');
    const { randomBytes } = await import('node:crypto');
    const hs = await startTestHomeserver();
    try {
      const origin = 'origin.example';
      const key1 = ed25519Signer(origin, 'key_1', randomBytes(32));
      const key2 = ed25519Signer(origin, 'key_2', randomBytes(32));
      const expired = Date.now() - 86_400_000;
      const listingOf = (signer: typeof key1, validUntil: number) =>
        signJson({ server_name: origin, valid_until_ts: validUntil, verify_keys: { [signer.keyId]: { key: signer.publicKey } }, old_verify_keys: {} }, signer);
      // The origin's answers, in turn: first key_1 (already expired), then only key_2.
      let answer: Record<string, unknown> | undefined;
      Object.assign(hs.services.federation.keyRing, {
        client: {
          request: async () => {
            if (!answer) throw new Error('the origin is down');
            return answer;
          },
        },
      });
      const query = (keyId: string, minimum: number) => hs.http.post('/_matrix/key/v2/query').send({ server_keys: { [origin]: { [keyId]: { minimum_valid_until_ts: minimum } } } });
      // Down at first: nothing to serve (and a minute's backoff for the key ring's own lookups)...
      expect((await query(key1.keyId, 0)).body.server_keys).toEqual([]);
      // ...which does not stop an asker naming a key we hold nothing of, a moment later.
      answer = listingOf(key1, expired);

      const first = await query(key1.keyId, 0);
      expect(Object.keys(first.body.server_keys[0].verify_keys)).toEqual([key1.keyId]);
      expect(first.body.server_keys[0].valid_until_ts).toBe(expired);
      answer = listingOf(key2, expired + 1000);
      await query(key1.keyId, Date.now());
      const third = await query(key1.keyId, expired);
      expect(third.body.server_keys).toHaveLength(1);
      expect(Object.keys(third.body.server_keys[0].verify_keys)).toEqual([key1.keyId]);
      // Without a key id: the newest listing.
      const newest = await hs.http.get(`/_matrix/key/v2/query/${origin}`);
      expect(Object.keys(newest.body.server_keys[0].verify_keys)).toEqual([key2.keyId]);
    } finally {
      await hs.close();
    }
  });
});
