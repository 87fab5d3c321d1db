/** Media: upload, download by mxc URI (legacy and authenticated paths), limits and what is never served. */
import { mkdtempSync, readdirSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { request } from 'node:http';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createUser, startTestHomeserver, type TestHomeserver, type TestUser } from '../support/homeserver.js';
import { expectMatrixError, validateResponse } from '../support/spec-validator.js';

// A 1x1 PNG.
const PNG = Buffer.from('89504e470d0a1a0a0000000d4948445200000001000000010806000000' + '1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082', 'hex');

let hs: TestHomeserver;
let alice: TestUser;

async function upload(body: Buffer | string, contentType: string, query: Record<string, string> = {}, prefix = '/_matrix/media/v3') {
  return hs.http
    .post(`${prefix}/upload`)
    .query(query)
    .set('Content-Type', contentType)
    .auth(alice.accessToken, { type: 'bearer' })
    .send(body);
}

function mediaIdOf(contentUri: string): string {
  const match = /^mxc:\/\/test\.local\/([A-Za-z0-9]+)$/.exec(contentUri);
  if (!match) throw new Error(`not one of our mxc URIs: ${contentUri}`);
  return match[1]!;
}

/** supertest buffers unknown types only when asked. */
function download(path: string) {
  return hs.http.get(path).buffer(true).parse((res, done) => {
    const chunks: Buffer[] = [];
    res.on('data', (c: Buffer) => chunks.push(c));
    res.on('end', () => done(null, Buffer.concat(chunks)));
  });
}

describe('media in memory', () => {
  beforeEach(async () => {
    hs = await startTestHomeserver({ max_upload_size: '2M' });
    alice = await createUser(hs, 'alice');
  });
  afterEach(() => hs.close());

  it('uploads an image and serves the same bytes, type and name from every download path', async () => {
    const res = await upload(PNG, 'image/png', { filename: 'cat.png' });
    expect(res.status).toBe(200);
    expect(validateResponse('POST', '/_matrix/media/v3/upload', 200, res.body)).toEqual([]);
    const id = mediaIdOf(res.body.content_uri);

    for (const path of [`/_matrix/media/v3/download/test.local/${id}`, `/_matrix/media/r0/download/test.local/${id}`]) {
      const got = await download(path);
      expect(got.status).toBe(200);
      expect(Buffer.compare(got.body as Buffer, PNG)).toBe(0);
      expect(got.headers['content-type']).toBe('image/png');
      expect(got.headers['content-length']).toBe(String(PNG.length));
      expect(got.headers['content-disposition']).toBe('inline; filename="cat.png"');
      expect(got.headers['x-content-type-options']).toBe('nosniff');
      expect(got.headers['content-security-policy']).toContain('sandbox');
    }

    const authed = `/_matrix/client/v1/media/download/test.local/${id}`;
    expectMatrixError(await hs.http.get(authed), 401, 'M_MISSING_TOKEN');
    const got = await download(authed).auth(alice.accessToken, { type: 'bearer' });
    expect(got.status).toBe(200);
    expect(Buffer.compare(got.body as Buffer, PNG)).toBe(0);
    expect(got.headers['cache-control']).toContain('private');

    // HEAD says the size without reading the file.
    const head = await hs.http.head(`/_matrix/media/v3/download/test.local/${id}`);
    expect(head.status).toBe(200);
    expect(head.headers['content-length']).toBe(String(PNG.length));
    expect(head.headers['content-type']).toBe('image/png');

    // The name in the path wins over the uploaded one.
    const renamed = await download(`/_matrix/media/v3/download/test.local/${id}/kitten.png`);
    expect(renamed.headers['content-disposition']).toBe('inline; filename="kitten.png"');
  });

  it('uploads with ?access_token= on r0 (as matrix-nio does), bodies larger than JSON bodies may be', async () => {
    const big = Buffer.alloc(1_500_000, 7); // more than max_request_body_bytes (1 MiB)
    const res = await hs.http
      .post('/_matrix/media/r0/upload')
      .query({ access_token: alice.accessToken, filename: 'blob.bin' })
      .set('Content-Type', 'application/octet-stream')
      .send(big);
    expect(res.status).toBe(200);
    const got = await download(`/_matrix/media/v3/download/test.local/${mediaIdOf(res.body.content_uri)}`);
    expect((got.body as Buffer).length).toBe(big.length);
    expect(Buffer.compare(got.body as Buffer, big)).toBe(0);
    expect(got.headers['content-disposition']).toBe('attachment; filename="blob.bin"');
  });

  it('serves only safe types inline, and encodes names that are not plain ASCII', async () => {
    const html = await upload('<script>alert(1)</script>', 'text/html', { filename: 'page.html' });
    const htmlGot = await download(`/_matrix/media/v3/download/test.local/${mediaIdOf(html.body.content_uri)}`);
    expect(htmlGot.headers['content-type']).toMatch(/^text\/html/);
    expect(htmlGot.headers['content-disposition']).toBe('attachment; filename="page.html"');

    const text = await upload('hello', 'text/plain', { filename: 'notes "été".txt' });
    const textGot = await download(`/_matrix/media/v3/download/test.local/${mediaIdOf(text.body.content_uri)}`);
    expect(textGot.headers['content-disposition']).toBe(`inline; filename*=utf-8''notes%20%22%C3%A9t%C3%A9%22.txt`);

    // No name at upload: only the disposition.
    const anonymous = await upload('x', 'application/pdf');
    const anonymousGot = await download(`/_matrix/media/v3/download/test.local/${mediaIdOf(anonymous.body.content_uri)}`);
    expect(anonymousGot.headers['content-disposition']).toBe('attachment');
  });

  it('stores a missing or malformed Content-Type as application/octet-stream', async () => {
    const res = await hs.http.post('/_matrix/media/v3/upload').auth(alice.accessToken, { type: 'bearer' }).set('Content-Type', 'not a type').send('abc');
    expect(res.status).toBe(200);
    const got = await download(`/_matrix/media/v3/download/test.local/${mediaIdOf(res.body.content_uri)}`);
    expect(got.headers['content-type']).toBe('application/octet-stream');
  });

  it('never serves media that does not exist or has an impossible id', async () => {
    const res = await upload(PNG, 'image/png');
    const id = mediaIdOf(res.body.content_uri);
    // Another server's media is fetched over federation (for a request with a token); one that may
    // not be contacted (loopback, in ip_range_blacklist) is a 502 that does not say why (the reason
    // is for the log), and never our own media of the same id. Without a token: 404, no fetch.
    for (const server of ['127.0.0.1:8448', 'localhost:8448', '[::1]:8448']) {
      const refused = await hs.http.get(`/_matrix/client/v1/media/download/${server}/${id}`).auth(alice.accessToken, { type: 'bearer' });
      expectMatrixError(refused, 502, 'M_UNKNOWN');
      expect(refused.body.error).toBe('Failed to fetch remote media');
      expectMatrixError(await hs.http.get(`/_matrix/media/v3/download/${server}/${id}`), 404, 'M_NOT_FOUND');
    }
    // Our own media whatever allow_remote says; a value that is not a boolean is refused.
    expect((await hs.http.get(`/_matrix/media/v3/download/test.local/${id}?allow_remote=false`)).status).toBe(200);
    expectMatrixError(await hs.http.get(`/_matrix/media/v3/download/test.local/${id}?allow_remote=maybe`), 400, 'M_INVALID_PARAM');
    for (const path of [
      '/_matrix/media/v3/download/test.local/NoSuchMediaIdAtAllHere',
      '/_matrix/media/v3/download/test.local/..%2F..%2Fetc%2Fpasswd',
      '/_matrix/media/v3/thumbnail/test.local/NoSuchMediaIdAtAllHere',
    ]) {
      expectMatrixError(await hs.http.get(path), 404, 'M_NOT_FOUND');
    }
    expectMatrixError(await hs.http.get('/_matrix/client/v1/media/download/test.local/nope').auth(alice.accessToken, { type: 'bearer' }), 404, 'M_NOT_FOUND');
  });

  it('refuses uploads past max_upload_size with 413 M_TOO_LARGE, declared or streamed', async () => {
    const tooBig = Buffer.alloc(2 * 1024 * 1024 + 1);
    expectMatrixError(await upload(tooBig, 'application/octet-stream'), 413, 'M_TOO_LARGE');

    // No Content-Length: the limit is found while reading.
    async function* chunks() {
      for (let i = 0; i < 3; i++) yield Buffer.alloc(1024 * 1024);
    }
    await expect(
      hs.services.media.upload({ uploader: alice.userId, contentType: 'text/plain', filename: undefined, declaredLength: undefined, body: chunks() }),
    ).rejects.toMatchObject({ errcode: 'M_TOO_LARGE', status: 413 });
    expect(await hs.services.storage.db.selectFrom('media').select('media_id').execute()).toEqual([]);

    expectMatrixError(await hs.http.post('/_matrix/media/v3/upload').send('x'), 401, 'M_MISSING_TOKEN');
  });

  it('says the upload limit in both config endpoints', async () => {
    for (const [path, specPath] of [
      ['/_matrix/media/v3/config', '/_matrix/media/v3/config'],
      ['/_matrix/client/v1/media/config', '/_matrix/client/v1/media/config'],
    ] as const) {
      const res = await hs.http.get(path).auth(alice.accessToken, { type: 'bearer' });
      expect(res.status).toBe(200);
      expect(validateResponse('GET', specPath, 200, res.body)).toEqual([]);
      expect(res.body).toEqual({ 'm.upload.size': 2 * 1024 * 1024 });
    }
  });

  it('answers thumbnails of images with the image, and 404 for other media', async () => {
    const image = mediaIdOf((await upload(PNG, 'image/png')).body.content_uri);
    const thumb = await download(`/_matrix/media/v3/thumbnail/test.local/${image}?width=32&height=32&method=scale`);
    expect(thumb.status).toBe(200);
    expect(thumb.headers['content-type']).toBe('image/png');
    expect(Buffer.compare(thumb.body as Buffer, PNG)).toBe(0);
    const text = mediaIdOf((await upload('hi', 'text/plain')).body.content_uri);
    expectMatrixError(await hs.http.get(`/_matrix/media/v3/thumbnail/test.local/${text}?width=32&height=32`), 404, 'M_NOT_FOUND');
  });
});

describe('media on disk', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'bhs-media-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('keeps files beside the database, survives a restart, and leaves nothing behind when refused', async () => {
    const database = { path: join(dir, 'homeserver.db') };
    hs = await startTestHomeserver({ database, max_upload_size: 1024 });
    alice = await createUser(hs, 'alice');
    const res = await upload(PNG, 'image/png', { filename: 'cat.png' });
    expect(res.status).toBe(200);
    const id = mediaIdOf(res.body.content_uri);
    expectMatrixError(await upload(Buffer.alloc(2048), 'image/png'), 413, 'M_TOO_LARGE');
    // Chunked, with no Content-Length: refused while streaming, after a temporary file exists.
    const address = await hs.app.listen({ host: '127.0.0.1', port: 0 });
    const chunked = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = request(`${address}/_matrix/media/v3/upload`, {
        method: 'POST',
        headers: { Authorization: `Bearer ${alice.accessToken}`, 'Content-Type': 'image/png', 'Transfer-Encoding': 'chunked' },
      });
      req.on('response', (res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      });
      req.on('error', reject);
      for (let i = 0; i < 4; i++) req.write(Buffer.alloc(600));
      req.end();
    });
    expect(chunked.status).toBe(413);
    expect(JSON.parse(chunked.body).errcode).toBe('M_TOO_LARGE');
    await hs.close();

    expect(readdirSync(join(dir, 'media_store', 'tmp'))).toEqual([]);
    expect(readdirSync(join(dir, 'media_store', id.slice(0, 2), id.slice(2, 4)))).toEqual([id.slice(4)]);

    // An upload cut short by a crash leaves a .part file; the next start removes it, once it is
    // old enough that no upload can still be writing it (another process on the same media store
    // may be in the middle of one).
    const tmp = join(dir, 'media_store', 'tmp');
    writeFileSync(join(tmp, 'abc.0123.part'), 'half an upload');
    const twoHoursAgo = new Date(Date.now() - 7_200_000);
    utimesSync(join(tmp, 'abc.0123.part'), twoHoursAgo, twoHoursAgo);
    writeFileSync(join(tmp, 'def.4567.part'), 'an upload under way elsewhere');
    hs = await startTestHomeserver({ database, max_upload_size: 1024 });
    expect(readdirSync(tmp)).toEqual(['def.4567.part']);
    try {
      const got = await download(`/_matrix/media/v3/download/test.local/${id}`);
      expect(got.status).toBe(200);
      expect(Buffer.compare(got.body as Buffer, PNG)).toBe(0);
      expect(got.headers['content-disposition']).toBe('inline; filename="cat.png"');
    } finally {
      await hs.close();
    }
  });

  it('uses media_store_path when given', async () => {
    const store = join(dir, 'elsewhere');
    hs = await startTestHomeserver({ media_store_path: store });
    try {
      alice = await createUser(hs, 'alice');
      const id = mediaIdOf((await upload(PNG, 'image/png')).body.content_uri);
      expect(readdirSync(join(store, id.slice(0, 2), id.slice(2, 4)))).toEqual([id.slice(4)]);
    } finally {
      await hs.close();
    }
  });
});
