/**
 * Whatever a client sends, the answer is never a 500: a refusal is a Matrix error with a 4xx
 * status (or registration's user-interactive-auth challenge).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createUser, startTestHomeserver, type TestHomeserver, type TestUser } from '../support/homeserver.js';
import { validateMatrixError } from '../support/spec-validator.js';

let hs: TestHomeserver;
let admin: TestUser;
beforeAll(async () => {
  hs = await startTestHomeserver({ enable_registration: true, registration_shared_secret: 's' });
  admin = await createUser(hs, 'admin', { admin: true });
});
afterAll(() => hs.close());

const weirdBodies: [string, string][] = [
  ['a JSON string', '"hello"'],
  ['a JSON number', '42'],
  ['JSON null', 'null'],
  ['truncated JSON', '{"type": "m.login.password", '],
  ['a huge number', '{"type": 1e999}'],
  ['nested arrays', '[[[[[[[[[[[[]]]]]]]]]]]]'],
  ['a __proto__ key', '{"__proto__": {"admin": true}, "type": "m.login.password"}'],
  ['NUL characters', '{"type": "m.login.password", "user": "a\\u0000b", "password": "\\u0000"}'],
  ['wrong nested types', '{"type": "m.login.password", "identifier": "alice", "password": "x"}'],
  ['identifier without a type', '{"type": "m.login.password", "identifier": {"user": "alice"}, "password": "x"}'],
  ['binary garbage', '\u00ff\u00fe\u0000\u0001'],
];

const endpoints: [string, string, boolean][] = [
  ['POST', '/_matrix/client/v3/login', false],
  ['POST', '/_matrix/client/r0/register', false],
  ['POST', '/_matrix/client/v3/refresh', false],
  ['POST', '/_synapse/admin/v1/register', false],
  ['PUT', '/_synapse/admin/v2/users/@someone:test.local', true],
  ['POST', '/_synapse/admin/v1/deactivate/@someone:test.local', true],
  ['POST', '/_synapse/admin/v1/users/@admin:test.local/override_ratelimit', true],
  ['POST', '/_bot_homeserver/admin/v1/bots', true],
];

describe('bad input', () => {
  for (const [method, path, needsAdmin] of endpoints) {
    it(`${method} ${path} never fails on a malformed body`, async () => {
      for (const [name, body] of weirdBodies) {
        let req = method === 'PUT' ? hs.http.put(path) : hs.http.post(path);
        if (needsAdmin) req = req.set('Authorization', `Bearer ${admin.accessToken}`);
        const res = await req.set('Content-Type', 'application/json').send(body);
        const seen = `${name}: ${res.status} ${JSON.stringify(res.body)}`;
        expect(res.status, seen).toBeLessThan(500);
        if (res.status >= 400 && !(res.status === 401 && res.body.flows)) {
          expect(validateMatrixError(res.body), seen).toEqual([]);
        }
      }
      // Bodies that are not JSON objects at all are always refused.
      for (const body of ['"hello"', '42', '[1]', '{"truncated": ']) {
        let req = method === 'PUT' ? hs.http.put(path) : hs.http.post(path);
        if (needsAdmin) req = req.set('Authorization', `Bearer ${admin.accessToken}`);
        const res = await req.set('Content-Type', 'application/json').send(body);
        expect(res.status, body).toBe(400);
        expect(['M_NOT_JSON', 'M_BAD_JSON']).toContain(res.body.errcode);
      }
    });
  }

  it.each([
    ['a malformed percent-encoding', '/_synapse/admin/v2/users/%E0%A4%A'],
    ['a non-numeric paging parameter', '/_synapse/admin/v2/users?limit=lots'],
    ['an unknown order', '/_synapse/admin/v2/users?order_by=password'],
    ['a user id without @', '/_synapse/admin/v2/users/someone'],
    ['a very long user id', `/_synapse/admin/v2/users/@${'a'.repeat(3000)}:test.local`],
  ])('answers %s with a Matrix 4xx', async (_name, path) => {
    const res = await hs.http.get(path).set('Authorization', `Bearer ${admin.accessToken}`);
    expect(res.status).toBeGreaterThanOrEqual(400);
    expect(res.status).toBeLessThan(500);
    expect(validateMatrixError(res.body)).toEqual([]);
  });

  it('answers odd Authorization headers with 401', async () => {
    for (const header of ['Bearer', 'Bearer  ', 'bearer x y', 'Token abc', 'Bearer ' + 'x'.repeat(10_000)]) {
      const res = await hs.http.get('/_matrix/client/v3/account/whoami').set('Authorization', header);
      expect(res.status, header.slice(0, 20)).toBe(401);
      expect(validateMatrixError(res.body)).toEqual([]);
    }
    const both = await hs.http
      .get(`/_matrix/client/v3/account/whoami?access_token=${admin.accessToken}`)
      .set('Authorization', `Bearer ${admin.accessToken}`);
    expect(both.status).toBe(401);
  });

  it('ignores a body it does not read, and checks the token before the body', async () => {
    const user = await createUser(hs, 'leaver');
    const logout = await hs.http
      .post('/_matrix/client/v3/logout')
      .set('Authorization', `Bearer ${user.accessToken}`)
      .set('Content-Type', 'application/json')
      .send('this is not json');
    expect(logout.status).toBe(200);
    const anonymous = await hs.http.put('/_synapse/admin/v2/users/@x:test.local').set('Content-Type', 'application/json').send('{oops');
    expect(anonymous.status).toBe(401);
    expect(anonymous.body.errcode).toBe('M_MISSING_TOKEN');
  });

  it('tells a wrong choice the allowed values', async () => {
    const res = await hs.http.get('/_synapse/admin/v2/users?dir=up').set('Authorization', `Bearer ${admin.accessToken}`);
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ errcode: 'M_INVALID_PARAM', error: 'query parameter dir must be one of "f", "b"' });
  });

  it('the __proto__ key made nobody an admin', async () => {
    expect(Object.prototype).not.toHaveProperty('admin');
  });
});
