/**
 * Media across servers: a client of A downloads media uploaded on B (fetched over federation with
 * the authenticated multipart endpoint, kept, and served from A's copy afterwards, even with B
 * gone); an unknown media id is 404.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createUser, startFederation, type Federation, type FederatedServer } from '../support/federation.js';
import type { TestUser } from '../support/homeserver.js';

let federation: Federation;
let a: FederatedServer;
let b: FederatedServer;
let botA: TestUser;
let aliceB: TestUser;

beforeAll(async () => {
  federation = await startFederation(['a.test', 'b.test']);
  a = federation.servers.get('a.test')!;
  b = federation.servers.get('b.test')!;
  botA = await createUser(a.hs, 'bot');
  aliceB = await createUser(b.hs, 'alice');
});
afterAll(() => federation?.close());

describe('remote media', () => {
  it('is fetched from its server, kept, and served from the copy', async () => {
    const png = Buffer.concat([Buffer.from('89504e470d0a1a0a', 'hex'), Buffer.alloc(2000, 7)]);
    const upload = await b.http
      .post('/_matrix/media/v3/upload?filename=pic.png')
      .set('Authorization', `Bearer ${aliceB.accessToken}`)
      .set('Content-Type', 'image/png')
      .send(png);
    expect(upload.status).toBe(200);
    const mxc = new URL(upload.body.content_uri as string);
    const path = `/_matrix/client/v1/media/download/b.test${mxc.pathname}`;

    const first = await a.http.get(path).set('Authorization', `Bearer ${botA.accessToken}`).buffer(true).parse((res, done) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => done(null, Buffer.concat(chunks)));
    });
    expect(first.status).toBe(200);
    expect(first.headers['content-type']).toBe('image/png');
    expect(Buffer.compare(first.body as Buffer, png)).toBe(0);
    expect(first.headers['content-disposition']).toContain('pic.png');

    // B is gone: A still serves its copy. Not on the unauthenticated legacy path: it was fetched
    // for an authenticated request (as Synapse marks it with enable_authenticated_media).
    await b.stop();
    const again = await a.http.get(path).set('Authorization', `Bearer ${botA.accessToken}`).buffer(true).parse((res, done) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => done(null, Buffer.concat(chunks)));
    });
    expect(again.status).toBe(200);
    expect((again.body as Buffer).length).toBe(png.length);
    const legacy = await a.http.get(`/_matrix/media/v3/download/b.test${mxc.pathname}`);
    expect(legacy.status).toBe(404);
    expect(legacy.body.errcode).toBe('M_NOT_FOUND');
    b = await federation.start('b.test');
  });

  it('answers 404 for media its server does not have, and 502 for a server it cannot reach', async () => {
    const missing = await a.http.get('/_matrix/client/v1/media/download/b.test/NoSuchMediaHere').set('Authorization', `Bearer ${botA.accessToken}`);
    expect(missing.status).toBe(404);
    expect(missing.body.errcode).toBe('M_NOT_FOUND');
    const unreachable = await a.http.get('/_matrix/client/v1/media/download/nowhere.test/abc').set('Authorization', `Bearer ${botA.accessToken}`);
    expect(unreachable.status).toBe(502);
  });
});
