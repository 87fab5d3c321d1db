/**
 * Media across servers: a client of A downloads media uploaded on B (fetched over federation with
 * the authenticated multipart endpoint, kept, and served from A's copy afterwards, even with B
 * gone); an unknown media id is 404. Then a hostile remote (issue 28): bodies streamed to disk,
 * one fetch per media, fetches bounded, the cap, errors that say nothing of addresses, no fetch
 * for the unauthenticated legacy download; and the cache's bounds in age and size.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, type Dirent } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import supertest from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FileBlobStore } from '../../src/media/blob-store.js';
import { startServer, type RunningServer } from '../../src/server.js';
import { createUser, startFederation, type Federation, type FederatedServer } from '../support/federation.js';
import { FakeClock, testConfig, type TestHomeserver, type TestUser } from '../support/homeserver.js';
import { releaseSchema } from '../support/test-schemas.js';
import { testCertificates } from '../support/tls.js';

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

/**
 * A hostile (or merely slow or huge) remote server: a plain HTTPS server under the test CA that
 * answers federation media requests as each test says, and counts what it is asked. The server
 * under test (`a.test`) finds `b.test` and `c.test` there; `evil.test` resolves to an address in
 * its ip_range_blacklist.
 */
interface FakeRemote {
  port: number;
  /** Media ids asked for, per destination server. */
  asked: Array<{ server: string; mediaId: string }>;
  inFlight: Map<string, number>;
  maxInFlight: number;
  maxInFlightPerServer: Map<string, number>;
  answer: Map<string, (res: ServerResponse) => Promise<void>>;
  close(): Promise<void>;
}

const PNG = Buffer.concat([Buffer.from('89504e470d0a1a0a', 'hex'), Buffer.alloc(1000, 3)]);
const BOUNDARY = 'fake6b0a';

async function startFakeRemote(): Promise<FakeRemote> {
  const tls = testCertificates();
  const fake: FakeRemote = {
    port: 0,
    asked: [],
    inFlight: new Map(),
    maxInFlight: 0,
    maxInFlightPerServer: new Map(),
    answer: new Map(),
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  const server = createHttpsServer({ cert: readFileSync(tls.certPath), key: readFileSync(tls.keyPath) }, (req, res) => {
    const destination = /destination="([^"]+)"/.exec(req.headers.authorization ?? '')?.[1] ?? '?';
    const match = /^\/_matrix\/federation\/v1\/media\/download\/([^/?]+)/.exec(req.url ?? '');
    if (!match) {
      res.writeHead(404, { 'Content-Type': 'application/json' }).end('{"errcode":"M_UNRECOGNIZED","error":"Unrecognized request"}');
      return;
    }
    const mediaId = decodeURIComponent(match[1]!);
    fake.asked.push({ server: destination, mediaId });
    const running = (fake.inFlight.get(destination) ?? 0) + 1;
    fake.inFlight.set(destination, running);
    fake.maxInFlightPerServer.set(destination, Math.max(fake.maxInFlightPerServer.get(destination) ?? 0, running));
    fake.maxInFlight = Math.max(fake.maxInFlight, [...fake.inFlight.values()].reduce((a, b) => a + b, 0));
    // Done once the answer is handed to the socket (before the other side can have read it all).
    let done = false;
    const finished = () => {
      if (done) return;
      done = true;
      fake.inFlight.set(destination, (fake.inFlight.get(destination) ?? 1) - 1);
    };
    res.once('finish', finished);
    res.once('close', finished);
    const answer = fake.answer.get(mediaId);
    if (!answer) {
      res.writeHead(404, { 'Content-Type': 'application/json' }).end('{"errcode":"M_NOT_FOUND","error":"no such media on 10.1.2.3, says the remote"}');
      return;
    }
    answer(res).catch(() => res.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  fake.port = (server.address() as AddressInfo).port;
  return fake;
}

/** Writes, waiting while the socket's buffer is full; false once the other side is gone. */
async function write(res: ServerResponse, bytes: Buffer | string): Promise<boolean> {
  if (res.destroyed) return false;
  if (res.write(bytes)) return true;
  return new Promise((resolve) => {
    const done = (ok: boolean) => {
      res.off('drain', onDrain);
      res.off('close', onClose);
      resolve(ok);
    };
    const onDrain = () => done(true);
    const onClose = () => done(false);
    res.once('drain', onDrain);
    res.once('close', onClose);
  });
}

function multipartHead(contentType = 'image/png', filename = 'pic.png'): string {
  return `--${BOUNDARY}\r\nContent-Type: application/json\r\n\r\n{}\r\n--${BOUNDARY}\r\nContent-Type: ${contentType}\r\nContent-Disposition: inline; filename="${filename}"\r\n\r\n`;
}
const MULTIPART_TAIL = `\r\n--${BOUNDARY}--\r\n`;

/** A well-behaved answer: the whole media in one multipart message. */
function serve(media: Buffer) {
  return async (res: ServerResponse) => {
    res.writeHead(200, { 'Content-Type': `multipart/mixed; boundary=${BOUNDARY}` });
    await write(res, multipartHead());
    await write(res, media);
    res.end(MULTIPART_TAIL);
  };
}

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

async function until(condition: () => boolean | Promise<boolean>, what: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

interface MediaServer {
  server: RunningServer;
  http: ReturnType<typeof supertest>;
  bot: TestUser;
  store: string;
  clock: FakeClock;
  close(): Promise<void>;
}

async function startMediaServer(fake: FakeRemote, overrides: Record<string, unknown>): Promise<MediaServer> {
  const tls = testCertificates();
  const store = mkdtempSync(join(tmpdir(), 'bhs-remote-media-'));
  const config = testConfig({
    server_name: 'a.test',
    listen: { host: '127.0.0.1', port: 0 },
    federation_custom_ca_list: [tls.caPath],
    // The fake listens on 127.0.0.1; evil.test's 127.0.0.2 stays refused.
    ip_range_blacklist: ['127.0.0.2/32'],
    media_store_path: store,
    ...overrides,
  });
  const clock = new FakeClock(Date.now());
  const remotes = new Set(['b.test', 'c.test', 'evil.test']);
  const server = await startServer(config, {
    clock,
    federation: {
      resolveHost: async (host: string) => (host === 'evil.test' ? [{ address: '127.0.0.2', family: 4 }] : remotes.has(host) ? [{ address: '127.0.0.1', family: 4 }] : []),
      resolveSrv: async (name: string) => {
        const host = name.replace(/^_matrix(-fed)?\._tcp\./, '');
        return name.startsWith('_matrix-fed._tcp.') && remotes.has(host) ? [{ name: host, port: fake.port, priority: 0, weight: 0 }] : [];
      },
    },
  });
  const http = supertest(server.url.replace(/\/$/, ''));
  const hs = { app: server.app, services: server.app.homeserver.services, config, http } as unknown as TestHomeserver;
  const bot = await createUser(hs, 'bot');
  return {
    server,
    http,
    bot,
    store,
    clock,
    close: async () => {
      await server.close();
      await releaseSchema(config.database);
      rmSync(store, { recursive: true, force: true });
    },
  };
}

function filesUnder(dir: string): string[] {
  return existsSync(dir) ? (readdirSync(dir, { recursive: true, withFileTypes: true }) as Dirent[]).filter((entry) => entry.isFile()).map((entry) => join(entry.parentPath, entry.name)) : [];
}

describe('remote media from a hostile server', () => {
  let fake: FakeRemote;
  let hs: MediaServer;
  const authed = (path: string) => hs.http.get(path).set('Authorization', `Bearer ${hs.bot.accessToken}`);

  beforeAll(async () => {
    fake = await startFakeRemote();
    hs = await startMediaServer(fake, {
      max_upload_size: '48M',
      media: { max_concurrent_remote_fetches: 3, max_concurrent_remote_fetches_per_server: 2, max_queued_remote_fetches: 4 },
      // What a fetch that never finishes is cut off by (the buffering code met it in the streaming test).
      federation: { request_timeout: '15s' },
    });
  });
  afterAll(async () => {
    await hs?.close();
    await fake?.close();
  });

  it('streams a 40 MiB body to disk instead of holding it in memory', async () => {
    const total = 40 * 1024 * 1024;
    const chunk = Buffer.alloc(1024 * 1024);
    for (let i = 0; i < chunk.length; i++) chunk[i] = i % 251;
    const expected = createHash('sha256');
    for (let sent = 0; sent < total; sent += chunk.length) expected.update(chunk);
    const tmp = join(hs.store, 'tmp');
    const partBytes = () => filesUnder(tmp).reduce((size, file) => size + (statSync(file, { throwIfNoEntry: false })?.size ?? 0), 0);
    fake.answer.set('big', async (res) => {
      res.writeHead(200, { 'Content-Type': `multipart/mixed; boundary=${BOUNDARY}` });
      await write(res, multipartHead('application/octet-stream', 'big.bin'));
      for (let sent = 0; sent < total / 2; sent += chunk.length) if (!(await write(res, chunk))) return;
      // Half the body is out: it must already be in the blob store's file, not in memory. Code
      // that reads the whole answer before storing it never gets the second half.
      while (partBytes() < total / 8) {
        if (res.destroyed) return;
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      for (let sent = total / 2; sent < total; sent += chunk.length) if (!(await write(res, chunk))) return;
      res.end(MULTIPART_TAIL);
    });
    const res = await authed('/_matrix/client/v1/media/download/b.test/big').buffer(true).parse((stream, done) => {
      const hash = createHash('sha256');
      let size = 0;
      stream.on('data', (c: Buffer) => {
        size += c.length;
        hash.update(c);
      });
      stream.on('end', () => done(null, { size, sha256: hash.digest('hex') }));
    });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ size: total, sha256: expected.digest('hex') });
    expect(res.headers['content-disposition']).toBe('attachment; filename="big.bin"');
    expect(filesUnder(tmp)).toEqual([]);
  });

  it('shares one fetch among concurrent downloads of the same media', async () => {
    const gate = deferred();
    fake.answer.set('same', async (res) => {
      await gate.promise;
      await serve(PNG)(res);
    });
    const n = 12;
    let arrived = 0;
    const count = (req: IncomingMessage) => {
      if (req.url?.includes('/same')) arrived++;
    };
    hs.server.app.server.on('request', count);
    const downloads = Array.from({ length: n }, (_, i) =>
      authed(i % 2 === 0 ? '/_matrix/client/v1/media/download/b.test/same' : '/_matrix/client/v1/media/thumbnail/b.test/same?width=32&height=32').then((r) => r),
    );
    // All downloads are in (and have had a moment to reach the fetch), or a second fetch started.
    await until(() => arrived >= n || fake.asked.filter((a) => a.mediaId === 'same').length > 1, 'the downloads to arrive');
    await new Promise((resolve) => setTimeout(resolve, 100));
    gate.resolve();
    const answers = await Promise.all(downloads);
    hs.server.app.server.off('request', count);
    expect(answers.map((r) => r.status)).toEqual(Array(n).fill(200));
    expect(fake.asked.filter((a) => a.mediaId === 'same')).toEqual([{ server: 'b.test', mediaId: 'same' }]);
  });

  it('bounds the fetches at once, in all and per server, and refuses past the queue with 429', async () => {
    fake.maxInFlight = 0;
    fake.maxInFlightPerServer.clear();
    const gate = deferred();
    const ids = ['q1', 'q2', 'q3', 'q4'];
    for (const id of ids) {
      fake.answer.set(id, async (res) => {
        await gate.promise;
        await serve(PNG)(res);
      });
    }
    const before = fake.asked.length;
    // 8 fetches: 3 run (at most 2 per server), 4 wait (at most 2 per server), 1 is refused.
    const downloads = ['b.test', 'c.test'].flatMap((server) => ids.map((id) => authed(`/_matrix/client/v1/media/download/${server}/${id}`).then((r) => r)));
    const settled: Array<{ status: number; body: { errcode?: string; retry_after_ms?: number } }> = [];
    for (const download of downloads) void download.then((r) => settled.push(r));
    await until(() => settled.length >= 1 && fake.asked.length - before >= 3, 'one refusal and three fetches');
    expect(settled).toHaveLength(1);
    expect(settled[0]!.status).toBe(429);
    expect(settled[0]!.body.errcode).toBe('M_LIMIT_EXCEEDED');
    expect(settled[0]!.body.retry_after_ms).toBeGreaterThan(0);
    expect(fake.asked.length - before).toBe(3);
    gate.resolve();
    const answers = await Promise.all(downloads);
    expect(answers.filter((r) => r.status === 200)).toHaveLength(7);
    expect(fake.asked.length - before).toBe(7);
    expect(fake.maxInFlight).toBe(3);
    expect(Math.max(...fake.maxInFlightPerServer.values())).toBe(2);
  });

  it('refuses a body above the cap, declared or streamed, and keeps nothing of it', async () => {
    const filesBefore = filesUnder(hs.store).length;
    fake.answer.set('huge', async (res) => {
      // No Content-Length: found while streaming (a .part file exists by then).
      res.writeHead(200, { 'Content-Type': `multipart/mixed; boundary=${BOUNDARY}` });
      await write(res, multipartHead());
      const chunk = Buffer.alloc(1024 * 1024, 9);
      for (let sent = 0; sent < 100; sent++) if (!(await write(res, chunk))) return;
      res.end(MULTIPART_TAIL);
    });
    fake.answer.set('declared', async (res) => {
      res.writeHead(200, { 'Content-Type': `multipart/mixed; boundary=${BOUNDARY}`, 'Content-Length': String(200 * 1024 * 1024) });
      await write(res, multipartHead());
      await new Promise<void>((resolve) => res.once('close', resolve));
    });
    for (const id of ['huge', 'declared']) {
      const res = await authed(`/_matrix/client/v1/media/download/b.test/${id}`);
      expect(res.status).toBe(502);
      expect(res.body.errcode).toBe('M_TOO_LARGE');
      expect(await hs.server.app.homeserver.services.storage.media.remote('b.test', id)).toBeUndefined();
    }
    expect(filesUnder(join(hs.store, 'tmp'))).toEqual([]);
    expect(filesUnder(hs.store)).toHaveLength(filesBefore);
  });

  it('answers 404 and 502 without the remote text, an address or the blacklist', async () => {
    fake.answer.set('broken', async (res) => {
      res.writeHead(500, { 'Content-Type': 'application/json' }).end('{"errcode":"M_UNKNOWN","error":"db at 10.0.0.7:5432 is down"}');
    });
    fake.answer.set('garbled', async (res) => {
      res.writeHead(200, { 'Content-Type': `multipart/mixed; boundary=${BOUNDARY}` }).end('not a multipart message at all');
    });
    const missing = await authed('/_matrix/client/v1/media/download/b.test/nothing');
    expect(missing.status).toBe(404);
    expect(missing.body).toEqual({ errcode: 'M_NOT_FOUND', error: 'Not found' });
    for (const path of ['b.test/broken', 'b.test/garbled', 'evil.test/abc', 'nowhere.test/abc', '127.0.0.1:1/abc', 'localhost:8448/abc']) {
      const res = await authed(`/_matrix/client/v1/media/download/${path}`);
      expect(res.status, path).toBe(502);
      expect(res.body, path).toEqual({ errcode: 'M_UNKNOWN', error: 'Failed to fetch remote media' });
    }
  });

  it('never fetches for an unauthenticated legacy download, and serves there only what was cached for it', async () => {
    fake.answer.set('fresh', serve(PNG));
    const before = fake.asked.length;
    for (const path of ['/_matrix/media/v3/download/b.test/fresh', '/_matrix/media/r0/download/b.test/fresh/x.png', '/_matrix/media/v3/thumbnail/b.test/fresh?width=8&height=8']) {
      const res = await hs.http.get(path);
      expect(res.status, path).toBe(404);
      expect(res.body.errcode).toBe('M_NOT_FOUND');
    }
    // allow_remote=false (Synapse): not fetched even with a token on the legacy path.
    expect((await hs.http.get('/_matrix/media/v3/download/b.test/fresh?allow_remote=false').set('Authorization', `Bearer ${hs.bot.accessToken}`)).status).toBe(404);
    expect(fake.asked.length).toBe(before);

    // Media cached before authenticated media (authenticated = 0) stays available there.
    await new FileBlobStore(hs.store).write('OldBlobIdOfCachedMedia00', Readable.from([PNG]), PNG.length);
    await hs.server.app.homeserver.services.storage.media.insertRemote({
      server_name: 'c.test', media_id: 'old', blob_id: 'OldBlobIdOfCachedMedia00', content_type: 'image/png', upload_name: null,
      size_bytes: PNG.length, sha256: createHash('sha256').update(PNG).digest('hex'), fetched_ts: hs.clock.now(), last_access_ts: hs.clock.now(), authenticated: 0,
    });
    const old = await hs.http.get('/_matrix/media/v3/download/c.test/old').buffer(true).parse((stream, done) => {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => done(null, Buffer.concat(chunks)));
    });
    expect(old.status).toBe(200);
    expect(Buffer.compare(old.body as Buffer, PNG)).toBe(0);
    expect(fake.asked.length).toBe(before);
  });
});

describe('the cache of remote media', () => {
  let fake: FakeRemote;
  let hs: MediaServer;
  const media = (id: string) => `/_matrix/client/v1/media/download/b.test/${id}`;

  beforeAll(async () => {
    fake = await startFakeRemote();
    for (const id of ['m1', 'm2', 'm3', 'm4', 'm5', 'legacy']) fake.answer.set(id, serve(PNG));
    hs = await startMediaServer(fake, {
      media_retention: { remote_media_lifetime: '30d' },
      // Room for three of them.
      media: { max_remote_cache_size: 3 * PNG.length },
      enable_authenticated_media: false,
    });
  });
  afterAll(async () => {
    await hs?.close();
    await fake?.close();
  });

  const rows = async () =>
    (await hs.server.app.homeserver.services.storage.db.selectFrom('remote_media').select('media_id').orderBy('media_id').execute()).map((row) => row.media_id);
  const blobs = () => filesUnder(hs.store).filter((file) => !file.includes(`${join(hs.store, 'tmp')}`)).length;
  const get = (id: string) => hs.http.get(media(id)).set('Authorization', `Bearer ${hs.bot.accessToken}`);

  it('deletes media nobody downloaded within remote_media_lifetime, files and rows', async () => {
    const day = 86_400_000;
    expect((await get('m1')).status).toBe(200);
    expect((await get('m2')).status).toBe(200);
    hs.clock.advance(20 * day);
    // m1 is downloaded again (from the cache): its clock starts over.
    expect((await get('m1')).status).toBe(200);
    hs.clock.advance(15 * day);
    const services = hs.server.app.homeserver.services;
    expect(await services.media.applyRetention()).toBe(1);
    expect(await rows()).toEqual(['m1']);
    expect(blobs()).toBe(1);
    expect(fake.asked.map((a) => a.mediaId)).toEqual(['m1', 'm2']);
    // Asked for again, m2 is fetched again.
    expect((await get('m2')).status).toBe(200);
    expect(fake.asked.map((a) => a.mediaId)).toEqual(['m1', 'm2', 'm2']);
  });

  it('keeps the cache within max_remote_cache_size, least recently downloaded out first', async () => {
    hs.clock.advance(3_600_000);
    expect((await get('m1')).status).toBe(200); // m1 is now the most recently used
    hs.clock.advance(3_600_000);
    expect((await get('m3')).status).toBe(200);
    hs.clock.advance(3_600_000);
    expect((await get('m4')).status).toBe(200);
    // Four would not fit: m2, the least recently downloaded, went.
    await until(async () => (await rows()).length === 3, 'the cache to shrink');
    expect(await rows()).toEqual(['m1', 'm3', 'm4']);
    await until(() => blobs() === 3, 'the files to go');
  });

  it('fetches for the unauthenticated legacy download when enable_authenticated_media is off, and serves it there', async () => {
    const first = await hs.http.get('/_matrix/media/v3/download/b.test/legacy');
    expect(first.status).toBe(200);
    expect(fake.asked.filter((a) => a.mediaId === 'legacy')).toHaveLength(1);
    const row = await hs.server.app.homeserver.services.storage.media.remote('b.test', 'legacy');
    expect(row?.authenticated).toBe(0);
  });
});
