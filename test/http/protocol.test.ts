import { afterEach, describe, expect, it } from 'vitest';
import { createUser, startTestHomeserver, type TestHomeserver } from '../support/homeserver.js';
import { expectMatchesSpec, expectMatrixError } from '../support/spec-validator.js';
import { capturingLogger } from '../support/logs.js';
import { MatrixError } from '../../src/core/errors.js';

describe('discovery', () => {
  let hs: TestHomeserver;
  afterEach(() => hs.close());

  it('serves /versions and /.well-known/matrix/client', async () => {
    hs = await startTestHomeserver();
    const versions = await hs.http.get('/_matrix/client/versions');
    expect(versions.status).toBe(200);
    expectMatchesSpec('GET', '/_matrix/client/versions', versions);
    expect(versions.body.versions).toContain('v1.1');
    expect(versions.body.versions).toContain('r0.6.1');
    const wellKnown = await hs.http.get('/.well-known/matrix/client');
    expect(wellKnown.status).toBe(200);
    expectMatchesSpec('GET', '/.well-known/matrix/client', wellKnown);
    expect(wellKnown.body).toEqual({ 'm.homeserver': { base_url: 'https://matrix.test.local/' } });
  });
});

describe('HTTP protocol', () => {
  let hs: TestHomeserver;
  afterEach(() => hs.close());

  it('answers unknown endpoints 404 and wrong methods 405, both M_UNRECOGNIZED', async () => {
    hs = await startTestHomeserver();
    const missing = await hs.http.get('/_matrix/client/v3/no/such/thing');
    expectMatrixError(missing, 404, 'M_UNRECOGNIZED');
    expect(missing.headers['content-type']).toMatch(/^application\/json/);
    const wrongMethod = await hs.http.put('/_matrix/client/v3/login').send({});
    expectMatrixError(wrongMethod, 405, 'M_UNRECOGNIZED');
    expect(wrongMethod.headers.allow).toBe('GET, POST');
    expectMatrixError(await hs.http.delete('/_matrix/client/r0/account/whoami'), 405, 'M_UNRECOGNIZED');
    expectMatrixError(await hs.http.get('/'), 404, 'M_UNRECOGNIZED');
  });

  it('answers JSON as exactly application/json, as Synapse does, errors included', async () => {
    hs = await startTestHomeserver();
    expect((await hs.http.get('/_matrix/client/versions')).headers['content-type']).toBe('application/json');
    expect((await hs.http.get('/_matrix/client/v3/no/such/thing')).headers['content-type']).toBe('application/json');
    expect((await hs.http.post('/_matrix/client/v3/login').send({ type: 42 })).headers['content-type']).toBe('application/json');
  });

  it('refuses a body that is not UTF-8 with 400 M_NOT_JSON', async () => {
    hs = await startTestHomeserver();
    const alice = await createUser(hs, 'alice');
    const room = await hs.http.post('/_matrix/client/v3/createRoom').auth(alice.accessToken, { type: 'bearer' }).send({});
    const invalid = Buffer.concat([Buffer.from('{"msgtype":"m.text","body":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]);
    const res = await hs.http
      .put(`/_matrix/client/v3/rooms/${encodeURIComponent(room.body.room_id)}/send/m.room.message/t1`)
      .auth(alice.accessToken, { type: 'bearer' })
      // (Not application/json: supertest would serialize the Buffer; we read any type as JSON.)
      .set('Content-Type', 'text/plain')
      .send(invalid);
    expectMatrixError(res, 400, 'M_NOT_JSON');
  });

  it('sends the CORS headers the spec asks for, and answers preflights', async () => {
    hs = await startTestHomeserver();
    const res = await hs.http.get('/_matrix/client/versions').set('Origin', 'https://app.example');
    expect(res.headers['access-control-allow-origin']).toBe('*');
    const preflight = await hs.http
      .options('/_matrix/client/v3/login')
      .set('Origin', 'https://app.example')
      .set('Access-Control-Request-Method', 'POST');
    expect(preflight.status).toBe(204);
    expect(preflight.headers['access-control-allow-origin']).toBe('*');
    expect(preflight.headers['access-control-allow-methods']).toBe('GET, HEAD, POST, PUT, DELETE, OPTIONS');
    expect(preflight.headers['access-control-allow-headers']).toBe('X-Requested-With, Content-Type, Authorization, Date');
    // Even for a path we do not serve, and without an Origin header.
    expect((await hs.http.options('/_matrix/client/v3/anything')).status).toBe(204);
    const notFound = await hs.http.get('/_matrix/client/v3/nothing').set('Origin', 'https://app.example');
    expect(notFound.headers['access-control-allow-origin']).toBe('*');
  });

  it('refuses bodies over the limit with 413 M_TOO_LARGE', async () => {
    hs = await startTestHomeserver({ max_request_body_bytes: 2048 });
    const res = await hs.http
      .post('/_matrix/client/v3/login')
      .send({ type: 'm.login.password', user: 'x', password: 'y'.repeat(4096) });
    expectMatrixError(res, 413, 'M_TOO_LARGE');
  });

  it('answers an unexpected failure with 500 M_UNKNOWN, no internals, and logs it', async () => {
    const { logger, lines } = capturingLogger('error');
    hs = await startTestHomeserver({}, { logger });
    const alice = await createUser(hs, 'alice');
    hs.services.sessions.logout = async () => {
      throw new Error('disk on fire at /var/secret/path');
    };
    const res = await hs.http.post('/_matrix/client/v3/logout').auth(alice.accessToken, { type: 'bearer' });
    expectMatrixError(res, 500, 'M_UNKNOWN');
    expect(JSON.stringify(res.body)).not.toContain('disk on fire');
    expect(lines.join('')).toContain('disk on fire');
  });

  it('logs another server\'s failure (502) as a warning, not as an unexpected error', async () => {
    const { logger, lines } = capturingLogger('warn');
    hs = await startTestHomeserver({}, { logger });
    const alice = await createUser(hs, 'alice');
    hs.services.sessions.logout = async () => {
      throw new MatrixError('M_UNKNOWN', 'Could not join through other.test: cannot reach other.test', { status: 502 });
    };
    const res = await hs.http.post('/_matrix/client/v3/logout').auth(alice.accessToken, { type: 'bearer' });
    expectMatrixError(res, 502, 'M_UNKNOWN');
    const logged = lines.map((line) => JSON.parse(line) as { level: number; msg: string }).filter((line) => line.msg !== 'request');
    expect(logged).toEqual([expect.objectContaining({ level: 40, msg: 'another server failed' })]);
  });

  it('never logs access tokens, from the header or the query string', async () => {
    const { logger, lines } = capturingLogger();
    hs = await startTestHomeserver({}, { logger });
    const alice = await createUser(hs, 'alice');
    await hs.http.get('/_matrix/client/v3/account/whoami').auth(alice.accessToken, { type: 'bearer' });
    await hs.http.get(`/_matrix/client/r0/account/whoami?access_token=${alice.accessToken}&x=1`);
    await hs.http.get('/_matrix/client/r0/account/whoami?access_token=not-a-real-token-123');
    // The query parser decodes names, so encoded names must be redacted too.
    const encoded = await hs.http.get(`/_matrix/client/r0/account/whoami?access%5Ftoken=${alice.accessToken}`);
    expect(encoded.status).toBe(200);
    await hs.http.get(`/_matrix/client/r0/account/whoami?%61ccess_token=${alice.accessToken}`);
    const log = lines.join('');
    expect(log).toContain('/_matrix/client/r0/account/whoami?access_token=<redacted>&x=1');
    expect(log).not.toContain(alice.accessToken);
    expect(log).not.toContain('not-a-real-token-123');
    expect(log).not.toContain(alice.password);
  });
});
