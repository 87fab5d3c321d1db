/** Server-side key backup through HTTP (`/room_keys/...`), checked against the spec. */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { client, type TestClient } from '../support/client.js';
import { createUser, startTestHomeserver, type TestHomeserver } from '../support/homeserver.js';
import { expectMatchesSpec, expectMatrixError } from '../support/spec-validator.js';

let hs: TestHomeserver;
let alice: TestClient;
beforeEach(async () => {
  hs = await startTestHomeserver();
  alice = client(hs, await createUser(hs, 'alice'));
});
afterEach(() => hs.close());

const ALGORITHM = 'm.megolm_backup.v1.curve25519-aes-sha2';
const authData = { public_key: 'abcdefg', signatures: {} };
const key = (index: number, forwarded: number, verified: boolean, tag: string) => ({
  first_message_index: index,
  forwarded_count: forwarded,
  is_verified: verified,
  session_data: { ephemeral: tag, ciphertext: `cipher-${tag}`, mac: 'mac' },
});
const v3 = (path: string) => `/_matrix/client/v3${path}`;
const as = (method: 'get' | 'put' | 'post' | 'delete', path: string) => hs.http[method](v3(path)).auth(alice.user.accessToken, { type: 'bearer' });

describe('key backup', () => {
  it('creates, reads, updates and deletes versions', async () => {
    expectMatrixError(await as('get', '/room_keys/version'), 404, 'M_NOT_FOUND');
    const created = await as('post', '/room_keys/version').send({ algorithm: ALGORITHM, auth_data: authData });
    expectMatchesSpec('POST', v3('/room_keys/version'), created);
    expect(created.body).toEqual({ version: '1' });
    const current = await as('get', '/room_keys/version');
    expectMatchesSpec('GET', v3('/room_keys/version'), current);
    expect(current.body).toEqual({ version: '1', algorithm: ALGORITHM, auth_data: authData, count: 0, etag: '0' });

    expect((await as('put', '/room_keys/version/1').send({ algorithm: ALGORITHM, auth_data: { ...authData, extra: 1 }, version: '1' })).status).toBe(200);
    expect((await as('get', '/room_keys/version/1')).body.auth_data.extra).toBe(1);
    expectMatrixError(await as('put', '/room_keys/version/1').send({ algorithm: 'other', auth_data: authData }), 400, 'M_INVALID_PARAM');
    expectMatrixError(await as('put', '/room_keys/version/1').send({ algorithm: ALGORITHM, auth_data: authData, version: '2' }), 400, 'M_INVALID_PARAM');

    expect((await as('post', '/room_keys/version').send({ algorithm: ALGORITHM, auth_data: authData })).body.version).toBe('2');
    expect((await as('get', '/room_keys/version')).body.version).toBe('2');
    expect((await as('delete', '/room_keys/version/2')).status).toBe(200);
    expect((await as('get', '/room_keys/version')).body.version).toBe('1');
    expectMatrixError(await as('get', '/room_keys/version/2'), 404, 'M_NOT_FOUND');
    // A deleted version's number is not given out again.
    expect((await as('post', '/room_keys/version').send({ algorithm: ALGORITHM, auth_data: authData })).body.version).toBe('3');
    // Versions are per user.
    const bob = await createUser(hs, 'bob');
    expectMatrixError(await hs.http.get(v3('/room_keys/version')).auth(bob.accessToken, { type: 'bearer' }), 404, 'M_NOT_FOUND');
  });

  it('stores keys at every level, keeps the best copy of each session, with etag and count', async () => {
    await as('post', '/room_keys/version').send({ algorithm: ALGORITHM, auth_data: authData });
    const room = '!room:test.local';
    const all = await as('put', '/room_keys/keys?version=1').send({ rooms: { [room]: { sessions: { s1: key(5, 1, false, 'a'), s2: key(0, 0, false, 'b') } } } });
    expectMatchesSpec('PUT', v3('/room_keys/keys'), all);
    expect(all.body).toEqual({ etag: '1', count: 2 });
    // A worse copy (later first index) is not kept; a better one (verified) is.
    expect((await as('put', `/room_keys/keys/${encodeURIComponent(room)}/s1?version=1`).send(key(9, 0, false, 'worse'))).body).toEqual({ etag: '1', count: 2 });
    const better = await as('put', `/room_keys/keys/${encodeURIComponent(room)}/s1?version=1`).send(key(7, 3, true, 'verified'));
    expectMatchesSpec('PUT', v3(`/room_keys/keys/${encodeURIComponent(room)}/s1`), better);
    expect(better.body).toEqual({ etag: '2', count: 2 });
    expect((await as('put', `/room_keys/keys/${encodeURIComponent('!other:test.local')}?version=1`).send({ sessions: { s3: key(0, 0, true, 'c') } })).body).toEqual({ etag: '3', count: 3 });

    const everything = await as('get', '/room_keys/keys?version=1');
    expectMatchesSpec('GET', v3('/room_keys/keys'), everything);
    expect(everything.body.rooms[room].sessions.s1).toEqual(key(7, 3, true, 'verified'));
    const oneRoom = await as('get', `/room_keys/keys/${encodeURIComponent(room)}?version=1`);
    expect(Object.keys(oneRoom.body.sessions)).toEqual(['s1', 's2']);
    expect((await as('get', `/room_keys/keys/${encodeURIComponent(room)}/s2?version=1`)).body).toEqual(key(0, 0, false, 'b'));
    expectMatrixError(await as('get', `/room_keys/keys/${encodeURIComponent(room)}/nope?version=1`), 404, 'M_NOT_FOUND');
    expect((await as('get', '/room_keys/version')).body).toMatchObject({ count: 3, etag: '3' });

    expect((await as('delete', `/room_keys/keys/${encodeURIComponent(room)}/s2?version=1`)).body).toEqual({ etag: '4', count: 2 });
    expect((await as('delete', `/room_keys/keys/${encodeURIComponent(room)}?version=1`)).body).toEqual({ etag: '5', count: 1 });
    expect((await as('delete', '/room_keys/keys?version=1')).body).toEqual({ etag: '6', count: 0 });
  });

  it('takes keys into the current version only, and says which that is', async () => {
    await as('post', '/room_keys/version').send({ algorithm: ALGORITHM, auth_data: authData });
    await as('post', '/room_keys/version').send({ algorithm: ALGORITHM, auth_data: authData });
    const stale = await as('put', '/room_keys/keys?version=1').send({ rooms: { '!r:test.local': { sessions: { s: key(0, 0, false, 'x') } } } });
    expectMatrixError(stale, 403, 'M_WRONG_ROOM_KEYS_VERSION');
    expect(stale.body.current_version).toBe('2');
    expectMatrixError(await as('get', '/room_keys/keys?version=9'), 404, 'M_NOT_FOUND');
    expectMatrixError(await as('put', '/room_keys/keys/%21r%3Atest.local/s?version=2').send({ first_message_index: -1, forwarded_count: 0, is_verified: false, session_data: {} }), 400, 'M_BAD_JSON');
  });
});
