// fetchFeed against a local node:http server on 127.0.0.1. Nothing here leaves the machine: names
// other than localhost are answered by an injected resolver, and refused addresses are refused
// inside the lookup, before any connection is attempted.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import zlib from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FeedError } from '../../src/bridge/feeds/error.js';
import { fetchFeed, type FetchFeedOptions, type FetchFeedTestHooks } from '../../src/bridge/feeds/fetch.js';
import { FeedParserThread } from '../../src/bridge/feeds/parser-thread.js';
import { nonPublicAddressReason } from '../../src/net/address-guard.js';
import { feedFixture } from '../support/feeds.js';

const GOLEM = feedFixture('rss2-iso-8859-1-golem.xml');
const LATIN1_UNDECLARED = feedFixture('broken-undeclared-latin1-lecerclepsy.xml');
const HOMEPAGE = feedFixture('not-a-feed-daringfireball-homepage.html');
const ETAG = '"golem-v1"';
const LAST_MODIFIED = 'Sun, 28 Oct 2018 13:00:00 GMT';
const MIB = 1024 * 1024;

let server: http.Server;
const parser = new FeedParserThread({ deadlineMs: 30_000 });
let base: string;
let port: number;
const seenHeaders: http.IncomingHttpHeaders[] = [];

function route(req: http.IncomingMessage, res: http.ServerResponse): void {
  seenHeaders.push(req.headers);
  const url = new URL(req.url ?? '/', base);
  const chain = /^\/chain\/(\d+)$/.exec(url.pathname);
  if (chain) {
    const left = Number(chain[1]);
    res.writeHead(302, { location: left === 0 ? '/golem' : `/chain/${left - 1}` }).end();
    return;
  }
  switch (url.pathname) {
    case '/golem':
      if (req.headers['if-none-match'] === ETAG || req.headers['if-modified-since'] === LAST_MODIFIED) {
        res.writeHead(304, { etag: ETAG }).end();
        return;
      }
      res.writeHead(200, { 'content-type': 'application/rss+xml; charset=ISO-8859-1', etag: ETAG, 'last-modified': LAST_MODIFIED });
      res.end(GOLEM);
      return;
    case '/latin1':
      res.writeHead(200, { 'content-type': 'text/xml; charset=iso-8859-1' }).end(LATIN1_UNDECLARED);
      return;
    case '/homepage':
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(HOMEPAGE);
      return;
    case '/relative-redirect':
      res.writeHead(302, { location: 'golem' }).end();
      return;
    case '/absolute-redirect':
      res.writeHead(301, { location: `${base}/golem` }).end();
      return;
    case '/homepage-redirect':
      res.writeHead(308, { location: '/homepage' }).end();
      return;
    case '/redirect-without-location':
      res.writeHead(302).end();
      return;
    case '/redirect-to-nonsense':
      res.writeHead(302, { location: 'http://exa mple.com:99999/' }).end();
      return;
    case '/redirect-to-file':
      res.writeHead(302, { location: 'file:///etc/passwd' }).end();
      return;
    case '/redirect-to-intranet':
      res.writeHead(302, { location: `http://intranet.test:${port}/golem` }).end();
      return;
    case '/redirect-to-loopback-literal':
      res.writeHead(302, { location: `http://127.0.0.2:${port}/golem` }).end();
      return;
    case '/redirect-to-localhost':
      res.writeHead(302, { location: `http://localhost:${port}/golem` }).end();
      return;
    case '/not-found':
      res.writeHead(404).end('nothing here');
      return;
    case '/broken':
      res.writeHead(500).end('oops');
      return;
    case '/declared-large':
      res.writeHead(200, { 'content-type': 'application/rss+xml', 'content-length': String(2 * MIB) });
      res.end(Buffer.alloc(2 * MIB, 0x20));
      return;
    case '/streamed-large': {
      res.writeHead(200, { 'content-type': 'application/rss+xml' }); // chunked: no Content-Length
      const chunk = Buffer.alloc(64 * 1024, 0x20);
      let sent = 0;
      const pump = () => {
        while (sent < 3 * MIB && !res.destroyed) {
          sent += chunk.length;
          if (!res.write(chunk)) return void res.once('drain', pump);
        }
        res.end();
      };
      pump();
      return;
    }
    case '/gzip':
      res.writeHead(200, { 'content-type': 'application/rss+xml', 'content-encoding': 'gzip' }).end(zlib.gzipSync(GOLEM));
      return;
    case '/deflate':
      res.writeHead(200, { 'content-type': 'application/rss+xml', 'content-encoding': 'deflate' }).end(zlib.deflateSync(GOLEM));
      return;
    case '/brotli':
      res.writeHead(200, { 'content-type': 'application/rss+xml', 'content-encoding': 'br' }).end(zlib.brotliCompressSync(GOLEM));
      return;
    case '/gzip-bomb':
      // 8 MiB of spaces compress to a few KiB: only the decompressed count can catch it.
      res.writeHead(200, { 'content-type': 'application/rss+xml', 'content-encoding': 'gzip' }).end(zlib.gzipSync(Buffer.alloc(8 * MIB, 0x20)));
      return;
    case '/bad-gzip':
      res.writeHead(200, { 'content-type': 'application/rss+xml', 'content-encoding': 'gzip' }).end('this is not gzip');
      return;
    case '/never-answers':
      return; // keep the socket open and say nothing
    case '/stalls-mid-body':
      res.writeHead(200, { 'content-type': 'application/rss+xml' });
      res.write(GOLEM.subarray(0, 1000));
      return;
    default:
      res.writeHead(404).end();
  }
}

beforeAll(async () => {
  server = http.createServer(route);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = (server.address() as AddressInfo).port;
  base = `http://127.0.0.1:${port}`;
});

afterAll(async () => {
  await parser.close();
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

/** Local tests talk to 127.0.0.1, so they allow private addresses unless a test is about refusing them. */
function options(overrides: Partial<FetchFeedOptions> = {}): FetchFeedOptions {
  return { timeoutMs: 10_000, maxBytes: MIB, maxRedirects: 5, allowPrivateAddresses: true, userAgent: 'bot-homeserver-test/1', parse: parser.parse, ...overrides };
}

async function failure(promise: Promise<unknown>): Promise<FeedError> {
  const error = await promise.then(
    () => undefined,
    (thrown: unknown) => thrown,
  );
  expect(error).toBeInstanceOf(FeedError);
  return error as FeedError;
}

describe('fetchFeed', () => {
  it('fetches and parses a feed, returning its validators and the final URL', async () => {
    const result = await fetchFeed(`${base}/golem`, options());
    expect(result.notModified).toBe(false);
    if (result.notModified) return;
    expect(result).toMatchObject({ etag: ETAG, lastModified: LAST_MODIFIED, finalUrl: `${base}/golem` });
    expect(result.feed.format).toBe('rss');
    expect(result.feed.items).toHaveLength(40);
    expect(result.feed.items.map((item) => item.title).join(' ')).toContain('Porträt für');
  });

  it('sends the user agent and asks for compression', async () => {
    seenHeaders.length = 0;
    await fetchFeed(`${base}/golem`, options());
    expect(seenHeaders[0]).toMatchObject({ 'user-agent': 'bot-homeserver-test/1', 'accept-encoding': 'gzip, deflate, br' });
    expect(seenHeaders[0]?.accept).toContain('application/rss+xml');
  });

  it('decodes with the charset of the Content-Type when the document declares none', async () => {
    const result = await fetchFeed(`${base}/latin1`, options());
    if (result.notModified) throw new Error('expected a feed');
    expect(result.feed.items[0]?.summaryText).toContain("nombre d'études montrent");
  });

  it('answers notModified to a matching If-None-Match or If-Modified-Since', async () => {
    expect(await fetchFeed(`${base}/golem`, options({ etag: ETAG }))).toEqual({ notModified: true });
    expect(await fetchFeed(`${base}/golem`, options({ lastModified: LAST_MODIFIED }))).toEqual({ notModified: true });
    const changed = await fetchFeed(`${base}/golem`, options({ etag: '"old"' }));
    expect(changed.notModified).toBe(false);
  });

  it('follows relative and absolute redirects and reports where it ended up', async () => {
    for (const path of ['/relative-redirect', '/absolute-redirect', '/chain/4']) {
      const result = await fetchFeed(`${base}${path}`, options());
      if (result.notModified) throw new Error('expected a feed');
      expect(result.finalUrl).toBe(`${base}/golem`);
      expect(result.feed.items).toHaveLength(40);
    }
  });

  it('gives up after maxRedirects', async () => {
    expect((await failure(fetchFeed(`${base}/chain/5`, options({ maxRedirects: 5 })))).message).toBe('too many redirects (more than 5)');
    expect((await failure(fetchFeed(`${base}/relative-redirect`, options({ maxRedirects: 0 })))).message).toBe('too many redirects (more than 0)');
  });

  it('explains a redirect without a Location', async () => {
    expect((await failure(fetchFeed(`${base}/redirect-without-location`, options()))).message).toBe(
      'the server answered 302 Found without saying where to',
    );
  });

  it('reports error statuses', async () => {
    expect((await failure(fetchFeed(`${base}/not-found`, options()))).message).toBe('the server answered 404 Not Found');
    expect((await failure(fetchFeed(`${base}/broken`, options()))).message).toBe('the server answered 500 Internal Server Error');
  });

  it('resolves the feed link of an HTML page against the URL it was finally served from', async () => {
    expect((await failure(fetchFeed(`${base}/homepage-redirect`, options()))).message).toBe(
      `that page is HTML, not a feed (it links to a feed at ${base}/feeds/main)`,
    );
  });

  it('refuses a body whose Content-Length is over the cap', async () => {
    expect((await failure(fetchFeed(`${base}/declared-large`, options()))).message).toBe('the response is larger than 1 MiB');
  });

  it('stops reading a chunked body once it passes the cap', async () => {
    expect((await failure(fetchFeed(`${base}/streamed-large`, options()))).message).toBe('the response is larger than 1 MiB');
  });

  it('decompresses gzip, deflate and brotli', async () => {
    for (const path of ['/gzip', '/deflate', '/brotli']) {
      const result = await fetchFeed(`${base}${path}`, options());
      if (result.notModified) throw new Error('expected a feed');
      expect(result.feed.items).toHaveLength(40);
    }
  });

  it('caps the decompressed size too', async () => {
    expect((await failure(fetchFeed(`${base}/gzip-bomb`, options()))).message).toBe('the response is larger than 1 MiB');
  });

  it('explains a body that does not decompress', async () => {
    expect((await failure(fetchFeed(`${base}/bad-gzip`, options()))).message).toBe('the response could not be decompressed');
  });

  it('times out on a server that never answers, and on one that stalls mid-body', async () => {
    expect((await failure(fetchFeed(`${base}/never-answers`, options({ timeoutMs: 300 })))).message).toBe('the request timed out after 300 ms');
    expect((await failure(fetchFeed(`${base}/stalls-mid-body`, options({ timeoutMs: 1000 })))).message).toBe('the request timed out after 1 s');
  });

  it('stops when the caller aborts', async () => {
    const controller = new AbortController();
    const pending = fetchFeed(`${base}/never-answers`, options({ signal: controller.signal }));
    setTimeout(() => controller.abort(), 50);
    expect((await failure(pending)).message).toBe('the fetch was cancelled');
  });

  it.each([
    ['ftp://example.com/feed.xml', 'only http and https addresses can be fetched, not ftp:'],
    ['file:///etc/passwd', 'only http and https addresses can be fetched, not file:'],
    ['not a url', '"not a url" is not a valid URL'],
  ])('refuses %s', async (url, message) => {
    expect((await failure(fetchFeed(url, options()))).message).toBe(message);
  });

  it('refuses a redirect to another scheme or to nonsense', async () => {
    expect((await failure(fetchFeed(`${base}/redirect-to-file`, options()))).message).toBe(
      'only http and https addresses can be fetched, not file:',
    );
    expect((await failure(fetchFeed(`${base}/redirect-to-nonsense`, options()))).message).toBe(
      'the server redirected to an invalid address (http://exa mple.com:99999/)',
    );
  });
});

describe('fetchFeed without private addresses', () => {
  const publicOnly = () => options({ allowPrivateAddresses: false });

  it.each([
    ['127.0.0.1', 'the address is 127.0.0.1, a loopback address'],
    ['[::1]', 'the address is ::1, a loopback address'],
    ['[::ffff:127.0.0.1]', 'the address is 127.0.0.1, a loopback address'],
    ['2130706433', 'the address is 127.0.0.1, a loopback address'], // the URL parser reads it as 127.0.0.1
    ['10.0.0.5', 'the address is 10.0.0.5, a private address'],
    // IPv4-compatible IPv6 (::/96), which ipaddr.js classes as public unicast.
    ['[::127.0.0.1]', 'the address is ::7f00:1 (127.0.0.1), a loopback address'], // the URL parser writes it ::7f00:1
    ['[::7f00:1]', 'the address is ::7f00:1 (127.0.0.1), a loopback address'],
    ['[::a00:5]', 'the address is ::a00:5 (10.0.0.5), a private address'],
    // NAT64, 6to4 and Teredo carry IPv4 addresses too: refused whatever they carry.
    ['[64:ff9b::7f00:1]', 'the address is 64:ff9b::7f00:1, a reserved address'],
    ['[2002:7f00:1::1]', 'the address is 2002:7f00:1::1, a reserved address'],
  ])('refuses the IP literal %s without connecting', async (host, message) => {
    expect((await failure(fetchFeed(`http://${host}:${port}/golem`, publicOnly()))).message).toBe(message);
  });

  it('refuses localhost after resolving it', async () => {
    expect((await failure(fetchFeed(`http://localhost:${port}/golem`, publicOnly()))).message).toMatch(
      /^the address resolves to (127\.0\.0\.1|::1), a loopback address$/,
    );
  });

  it('refuses a name that resolves to a private address', async () => {
    const hooks: FetchFeedTestHooks = { resolveHost: async () => [{ address: '10.0.0.5', family: 4 }] };
    expect((await failure(fetchFeed(`http://intranet.test:${port}/golem`, publicOnly(), hooks))).message).toBe(
      'the address resolves to 10.0.0.5, a private address',
    );
  });

  describe('with the test server standing in for a public host', () => {
    // Only 127.0.0.1 counts as public here; every other address gets the production rule.
    const hooks: FetchFeedTestHooks = {
      nonPublicAddressReason: (address) => (address === '127.0.0.1' ? undefined : nonPublicAddressReason(address)),
      resolveHost: async (hostname) => {
        if (hostname === 'feeds.test') return [{ address: '127.0.0.1', family: 4 }];
        if (hostname === 'intranet.test') return [{ address: '10.0.0.5', family: 4 }];
        if (hostname === 'localhost') return [{ address: '::1', family: 6 }];
        return [];
      },
    };

    it('connects to the address it checked', async () => {
      const result = await fetchFeed(`http://feeds.test:${port}/golem`, publicOnly(), hooks);
      expect(result.notModified).toBe(false);
    });

    it.each([
      ['/redirect-to-intranet', 'the address resolves to 10.0.0.5, a private address'],
      ['/redirect-to-loopback-literal', 'the address is 127.0.0.2, a loopback address'],
      ['/redirect-to-localhost', 'the address resolves to ::1, a loopback address'],
    ])('refuses a redirect hop to a private address (%s)', async (path, message) => {
      expect((await failure(fetchFeed(`http://feeds.test:${port}${path}`, publicOnly(), hooks))).message).toBe(message);
    });
  });
});
