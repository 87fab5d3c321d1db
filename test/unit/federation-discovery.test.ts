import { describe, expect, it } from 'vitest';
import {
  FederationDiscoveryError,
  parseServerName,
  ServerResolver,
  type DiscoveryDeps,
  type ServerAddress,
  type SrvRecord,
  type WellKnownResponse,
} from '../../src/federation/discovery.js';

const SECOND = 1000;
const MINUTE = 60 * SECOND;
const HOUR = 60 * MINUTE;

type WellKnownAnswer = WellKnownResponse | Error | Promise<WellKnownResponse>;

/** Fake I/O: answers from the maps (404 / no record when absent), every lookup recorded. */
function fakeNetwork(options: { wellKnown?: Record<string, WellKnownAnswer>; srv?: Record<string, SrvRecord[] | Error>; random?: () => number } = {}) {
  const wellKnown = options.wellKnown ?? {};
  const srv = options.srv ?? {};
  const lookups: string[] = [];
  let clock = Date.UTC(2024, 0, 1);
  const deps: DiscoveryDeps = {
    fetchWellKnown: async (name) => {
      lookups.push(`well-known ${name}`);
      const answer = wellKnown[name];
      if (answer === undefined) return { status: 404, headers: {}, body: 'not found' };
      if (answer instanceof Error) throw answer;
      return answer;
    },
    resolveSrv: async (name) => {
      lookups.push(`srv ${name}`);
      const answer = srv[name];
      if (answer instanceof Error) throw answer;
      return answer ?? [];
    },
    now: () => clock,
    ...(options.random ? { random: options.random } : {}),
  };
  return {
    deps,
    wellKnown,
    srv,
    lookups,
    advance(ms: number) {
      clock += ms;
    },
    /** The lookups recorded since the last call. */
    take(): string[] {
      return lookups.splice(0);
    },
  };
}

function ok(body: unknown, headers: WellKnownResponse['headers'] = {}): WellKnownResponse {
  return { status: 200, headers, body: typeof body === 'string' ? body : JSON.stringify(body) };
}

function delegateTo(server: string, headers: WellKnownResponse['headers'] = {}): WellKnownResponse {
  return ok({ 'm.server': server }, headers);
}

function srvRecord(name: string, port: number, priority = 0, weight = 0): SrvRecord {
  return { name, port, priority, weight };
}

function at(host: string, port: number, hostHeader: string, tlsServerName: string): ServerAddress {
  return { host, port, hostHeader, tlsServerName };
}

const FED = '_matrix-fed._tcp.';
const OLD = '_matrix._tcp.';

describe('ServerResolver: the steps of "Resolving server names"', () => {
  const cases: Array<{
    title: string;
    serverName: string;
    wellKnown?: Record<string, WellKnownAnswer>;
    srv?: Record<string, SrvRecord[] | Error>;
    expected: ServerAddress[];
    lookups: string[];
  }> = [
    {
      title: '1: IPv4 literal without a port: 8448, Host is the name, certificate for the IP',
      serverName: '1.2.3.4',
      expected: [at('1.2.3.4', 8448, '1.2.3.4', '1.2.3.4')],
      lookups: [],
    },
    {
      title: '1: IPv4 literal with a port: Host keeps the port',
      serverName: '1.2.3.4:1234',
      expected: [at('1.2.3.4', 1234, '1.2.3.4:1234', '1.2.3.4')],
      lookups: [],
    },
    {
      title: '1: IPv6 literal without a port: connect without brackets, Host with them',
      serverName: '[1234:5678::abcd]',
      expected: [at('1234:5678::abcd', 8448, '[1234:5678::abcd]', '1234:5678::abcd')],
      lookups: [],
    },
    {
      title: '1: IPv6 literal with a port',
      serverName: '[1234:5678::abcd]:5678',
      expected: [at('1234:5678::abcd', 5678, '[1234:5678::abcd]:5678', '1234:5678::abcd')],
      lookups: [],
    },
    {
      title: '2: hostname with a port skips .well-known and SRV',
      serverName: 'example.com:8888',
      wellKnown: { 'example.com': delegateTo('elsewhere.example.net:443') },
      srv: { [`${FED}example.com`]: [srvRecord('srv.example.com', 1)] },
      expected: [at('example.com', 8888, 'example.com:8888', 'example.com')],
      lookups: [],
    },
    {
      title: '3.1: delegated IPv4 literal without a port',
      serverName: 'example.com',
      wellKnown: { 'example.com': delegateTo('5.6.7.8') },
      expected: [at('5.6.7.8', 8448, '5.6.7.8', '5.6.7.8')],
      lookups: ['well-known example.com'],
    },
    {
      title: '3.1: delegated IPv4 literal with a port',
      serverName: 'example.com',
      wellKnown: { 'example.com': delegateTo('5.6.7.8:9000') },
      expected: [at('5.6.7.8', 9000, '5.6.7.8:9000', '5.6.7.8')],
      lookups: ['well-known example.com'],
    },
    {
      title: '3.1: delegated IPv6 literal without a port',
      serverName: 'example.com',
      wellKnown: { 'example.com': delegateTo('[2001:db8::1]') },
      expected: [at('2001:db8::1', 8448, '[2001:db8::1]', '2001:db8::1')],
      lookups: ['well-known example.com'],
    },
    {
      title: '3.1: delegated IPv6 literal with a port',
      serverName: 'example.com',
      wellKnown: { 'example.com': delegateTo('[2001:db8::1]:8443') },
      expected: [at('2001:db8::1', 8443, '[2001:db8::1]:8443', '2001:db8::1')],
      lookups: ['well-known example.com'],
    },
    {
      title: '3.2: delegated hostname with a port: no SRV, Host is hostname:port',
      serverName: 'example.com',
      wellKnown: { 'example.com': delegateTo('matrix.example.net:443') },
      srv: { [`${FED}matrix.example.net`]: [srvRecord('srv.example.net', 1)] },
      expected: [at('matrix.example.net', 443, 'matrix.example.net:443', 'matrix.example.net')],
      lookups: ['well-known example.com'],
    },
    {
      title: '3.3: delegated hostname without a port: _matrix-fed SRV on the delegated name',
      serverName: 'example.com',
      wellKnown: { 'example.com': delegateTo('matrix.example.net') },
      srv: {
        [`${FED}matrix.example.net`]: [srvRecord('fed.example.net', 8449)],
        [`${OLD}matrix.example.net`]: [srvRecord('old.example.net', 8450)],
        [`${FED}example.com`]: [srvRecord('wrong.example.com', 1)],
      },
      expected: [at('fed.example.net', 8449, 'matrix.example.net', 'matrix.example.net')],
      lookups: ['well-known example.com', `srv ${FED}matrix.example.net`],
    },
    {
      title: '3.4: delegated hostname, only the deprecated _matrix SRV',
      serverName: 'example.com',
      wellKnown: { 'example.com': delegateTo('matrix.example.net') },
      srv: { [`${OLD}matrix.example.net`]: [srvRecord('old.example.net', 8450)] },
      expected: [at('old.example.net', 8450, 'matrix.example.net', 'matrix.example.net')],
      lookups: ['well-known example.com', `srv ${FED}matrix.example.net`, `srv ${OLD}matrix.example.net`],
    },
    {
      title: '3.5: delegated hostname, no SRV: port 8448 (and no .well-known of the delegate)',
      serverName: 'example.com',
      wellKnown: { 'example.com': delegateTo('matrix.example.net'), 'matrix.example.net': delegateTo('loop.example.org:1') },
      expected: [at('matrix.example.net', 8448, 'matrix.example.net', 'matrix.example.net')],
      lookups: ['well-known example.com', `srv ${FED}matrix.example.net`, `srv ${OLD}matrix.example.net`],
    },
    {
      title: '4: no .well-known (404): _matrix-fed SRV; Host and certificate are the server name',
      serverName: 'example.com',
      srv: {
        [`${FED}example.com`]: [srvRecord('fed.example.com', 8449)],
        [`${OLD}example.com`]: [srvRecord('old.example.com', 8450)],
      },
      expected: [at('fed.example.com', 8449, 'example.com', 'example.com')],
      lookups: ['well-known example.com', `srv ${FED}example.com`],
    },
    {
      title: '5: no .well-known: the deprecated _matrix SRV when _matrix-fed has none',
      serverName: 'example.com',
      srv: { [`${OLD}example.com`]: [srvRecord('old.example.com', 8450)] },
      expected: [at('old.example.com', 8450, 'example.com', 'example.com')],
      lookups: ['well-known example.com', `srv ${FED}example.com`, `srv ${OLD}example.com`],
    },
    {
      title: '6: no .well-known and no SRV: port 8448',
      serverName: 'example.com',
      expected: [at('example.com', 8448, 'example.com', 'example.com')],
      lookups: ['well-known example.com', `srv ${FED}example.com`, `srv ${OLD}example.com`],
    },
    {
      title: '4: a .well-known network error counts as no .well-known',
      serverName: 'example.com',
      wellKnown: { 'example.com': new Error('ECONNREFUSED') },
      srv: { [`${FED}example.com`]: [srvRecord('fed.example.com', 8449)] },
      expected: [at('fed.example.com', 8449, 'example.com', 'example.com')],
      lookups: ['well-known example.com', `srv ${FED}example.com`],
    },
    {
      title: '4: a 500 counts as no .well-known',
      serverName: 'example.com',
      wellKnown: { 'example.com': { status: 500, headers: {}, body: JSON.stringify({ 'm.server': 'x.example.net:1' }) } },
      expected: [at('example.com', 8448, 'example.com', 'example.com')],
      lookups: ['well-known example.com', `srv ${FED}example.com`, `srv ${OLD}example.com`],
    },
    {
      title: 'a single-label name goes through the whole algorithm',
      serverName: 'localhost',
      expected: [at('localhost', 8448, 'localhost', 'localhost')],
      lookups: ['well-known localhost', `srv ${FED}localhost`, `srv ${OLD}localhost`],
    },
  ];

  for (const testCase of cases) {
    it(testCase.title, async () => {
      const net = fakeNetwork({ wellKnown: testCase.wellKnown, srv: testCase.srv });
      const resolver = new ServerResolver(net.deps);
      expect(await resolver.resolve(testCase.serverName)).toEqual(testCase.expected);
      expect(net.lookups).toEqual(testCase.lookups);
    });
  }
});

describe('ServerResolver: SRV answers', () => {
  const records = [
    srvRecord('backup.example.com', 8400, 10, 0),
    srvRecord('light.example.com', 8401, 0, 1),
    srvRecord('heavy.example.com', 8402, 0, 3),
  ];

  it('orders by priority, then by RFC 2782 weighted draw (a low draw takes the first record)', async () => {
    const net = fakeNetwork({ srv: { [`${FED}example.com`]: records }, random: () => 0 });
    const hosts = (await new ServerResolver(net.deps).resolve('example.com')).map((entry) => entry.host);
    expect(hosts).toEqual(['light.example.com', 'heavy.example.com', 'backup.example.com']);
  });

  it('a high draw lands in the heavier record\'s share', async () => {
    const net = fakeNetwork({ srv: { [`${FED}example.com`]: records }, random: () => 0.99 });
    const result = await new ServerResolver(net.deps).resolve('example.com');
    expect(result).toEqual([
      at('heavy.example.com', 8402, 'example.com', 'example.com'),
      at('light.example.com', 8401, 'example.com', 'example.com'),
      at('backup.example.com', 8400, 'example.com', 'example.com'),
    ]);
  });

  it('draws a weight-0 target first only on a zero draw (RFC 2782 puts them first in the running sum)', async () => {
    const sameLevel = [srvRecord('weighted.example.com', 1, 0, 2), srvRecord('zero.example.com', 2, 0, 0)];
    const order = async (draw: number) => {
      const net = fakeNetwork({ srv: { [`${FED}example.com`]: sameLevel }, random: () => draw });
      return (await new ServerResolver(net.deps).resolve('example.com')).map((entry) => entry.host);
    };
    expect(await order(0)).toEqual(['zero.example.com', 'weighted.example.com']);
    expect(await order(0.5)).toEqual(['weighted.example.com', 'zero.example.com']);
  });

  it('strips a trailing dot from targets and drops targets that are IP addresses or port 0', async () => {
    const net = fakeNetwork({
      srv: { [`${FED}example.com`]: [srvRecord('fed.example.com.', 8449), srvRecord('10.0.0.1', 8449), srvRecord('zero.example.com', 0)] },
    });
    expect(await new ServerResolver(net.deps).resolve('example.com')).toEqual([at('fed.example.com', 8449, 'example.com', 'example.com')]);
  });

  it('refuses a lone "." target (service decidedly not available) instead of falling back', async () => {
    const net = fakeNetwork({ srv: { [`${FED}example.com`]: [srvRecord('', 0)] } });
    await expect(new ServerResolver(net.deps).resolve('example.com')).rejects.toThrow(/not available/);
    expect(net.lookups).not.toContain(`srv ${OLD}example.com`);
  });

  it('fails on a DNS failure rather than guessing port 8448, and tries again next time', async () => {
    const net = fakeNetwork({ srv: { [`${FED}example.com`]: new Error('SERVFAIL') } });
    const resolver = new ServerResolver(net.deps);
    const failure = await resolver.resolve('example.com').catch((err: unknown) => err);
    expect(failure).toBeInstanceOf(FederationDiscoveryError);
    expect((failure as FederationDiscoveryError).message).toMatch(/SERVFAIL/);
    expect(net.take()).toEqual(['well-known example.com', `srv ${FED}example.com`]);
    net.srv[`${FED}example.com`] = [srvRecord('fed.example.com', 8449)];
    expect(await resolver.resolve('example.com')).toEqual([at('fed.example.com', 8449, 'example.com', 'example.com')]);
    // The .well-known failure was cached; only SRV is asked again.
    expect(net.take()).toEqual([`srv ${FED}example.com`]);
  });
});

describe('ServerResolver: malformed .well-known answers count as none', () => {
  const padding = 'x'.repeat(50 * 1024);
  const cases: Array<[string, WellKnownResponse]> = [
    ['not JSON', ok('{"m.server": ')],
    ['JSON but not an object (array)', ok('["matrix.example.net:443"]')],
    ['JSON but not an object (string)', ok('"matrix.example.net:443"')],
    ['JSON null', ok('null')],
    ['no m.server', ok({})],
    ['m.server not a string', ok({ 'm.server': 443 })],
    ['m.server empty', ok({ 'm.server': '' })],
    ['m.server with a path', ok({ 'm.server': 'matrix.example.net/path' })],
    ['m.server with a URL scheme', ok({ 'm.server': 'https://matrix.example.net' })],
    ['m.server with a bad port', ok({ 'm.server': 'matrix.example.net:99999' })],
    ['body over 50 KiB', ok({ 'm.server': 'matrix.example.net:443', padding })],
    ['a redirect that reached us', { status: 301, headers: { location: '/elsewhere' }, body: JSON.stringify({ 'm.server': 'matrix.example.net:443' }) }],
    ['a 204', { status: 204, headers: {}, body: JSON.stringify({ 'm.server': 'matrix.example.net:443' }) }],
  ];

  for (const [title, response] of cases) {
    it(`${title}: falls through to SRV and 8448, and the failure is cached`, async () => {
      const net = fakeNetwork({ wellKnown: { 'example.com': response } });
      const resolver = new ServerResolver(net.deps);
      expect(await resolver.resolve('example.com')).toEqual([at('example.com', 8448, 'example.com', 'example.com')]);
      expect(net.take()).toEqual(['well-known example.com', `srv ${FED}example.com`, `srv ${OLD}example.com`]);
      net.advance(50 * MINUTE);
      await resolver.resolve('example.com');
      expect(net.take()).not.toContain('well-known example.com');
    });
  }

  it('accepts a body just under the limit', async () => {
    const body = JSON.stringify({ 'm.server': 'matrix.example.net:443', pad: '' });
    const padded = body.replace('"pad":""', `"pad":"${'x'.repeat(50 * 1024 - body.length)}"`);
    expect(Buffer.byteLength(padded)).toBe(50 * 1024);
    const net = fakeNetwork({ wellKnown: { 'example.com': ok(padded) } });
    expect((await new ServerResolver(net.deps).resolve('example.com'))[0]?.host).toBe('matrix.example.net');
  });
});

describe('ServerResolver: .well-known caching', () => {
  const delegated = [at('matrix.example.net', 443, 'matrix.example.net:443', 'matrix.example.net')];
  const undelegated = [at('example.com', 8448, 'example.com', 'example.com')];

  async function wellKnownFetched(net: ReturnType<typeof fakeNetwork>, resolver: ServerResolver): Promise<boolean> {
    await resolver.resolve('example.com');
    return net.take().includes('well-known example.com');
  }

  it('serves a cached answer without fetching again (SRV is not cached here)', async () => {
    const net = fakeNetwork({ wellKnown: { 'example.com': delegateTo('matrix.example.net') } });
    const resolver = new ServerResolver(net.deps);
    await resolver.resolve('example.com');
    net.take();
    net.advance(HOUR);
    expect(await resolver.resolve('example.com')).toEqual([at('matrix.example.net', 8448, 'matrix.example.net', 'matrix.example.net')]);
    expect(net.take()).toEqual([`srv ${FED}matrix.example.net`, `srv ${OLD}matrix.example.net`]);
  });

  it('honours max-age (refetching in the last 20%, as Synapse), whatever the header name\'s case', async () => {
    const net = fakeNetwork({ wellKnown: { 'example.com': delegateTo('matrix.example.net:443', { 'Cache-Control': 'public, max-age=3600' }) } });
    const resolver = new ServerResolver(net.deps);
    expect(await wellKnownFetched(net, resolver)).toBe(true);
    net.advance(0.8 * HOUR - 1);
    expect(await wellKnownFetched(net, resolver)).toBe(false);
    net.advance(1);
    expect(await wellKnownFetched(net, resolver)).toBe(true);
  });

  it('honours Expires when there is no max-age', async () => {
    const net = fakeNetwork();
    net.wellKnown['example.com'] = delegateTo('matrix.example.net:443', { expires: new Date(net.deps.now() + 2 * HOUR).toUTCString() });
    const resolver = new ServerResolver(net.deps);
    expect(await wellKnownFetched(net, resolver)).toBe(true);
    net.advance(0.8 * 2 * HOUR - 1);
    expect(await wellKnownFetched(net, resolver)).toBe(false);
    net.advance(1);
    expect(await wellKnownFetched(net, resolver)).toBe(true);
  });

  it('prefers max-age over Expires', async () => {
    const net = fakeNetwork();
    net.wellKnown['example.com'] = delegateTo('matrix.example.net:443', { 'cache-control': 'max-age=36000', expires: new Date(net.deps.now() + HOUR).toUTCString() });
    const resolver = new ServerResolver(net.deps);
    await resolver.resolve('example.com');
    net.take();
    net.advance(2 * HOUR);
    expect(await wellKnownFetched(net, resolver)).toBe(false);
  });

  it('caps the period at 48 hours, and keeps the value while a refresh fails until then', async () => {
    const net = fakeNetwork({ wellKnown: { 'example.com': delegateTo('matrix.example.net:443', { 'cache-control': 'max-age=31536000' }) } });
    const resolver = new ServerResolver(net.deps);
    expect(await wellKnownFetched(net, resolver)).toBe(true);
    net.advance(0.8 * 48 * HOUR - 1);
    expect(await wellKnownFetched(net, resolver)).toBe(false);
    net.advance(1);
    net.wellKnown['example.com'] = new Error('ETIMEDOUT');
    expect(await resolver.resolve('example.com')).toEqual(delegated);
    expect(net.take()).toEqual(['well-known example.com']);
    net.advance(48 * HOUR - 0.8 * 48 * HOUR);
    expect(await resolver.resolve('example.com')).toEqual(undelegated);
    expect(net.take()[0]).toBe('well-known example.com');
  });

  it('uses a 24 hour default (less up to 10% jitter) without cache headers', async () => {
    const net = fakeNetwork({ wellKnown: { 'example.com': delegateTo('matrix.example.net:443') } });
    const resolver = new ServerResolver(net.deps);
    expect(await wellKnownFetched(net, resolver)).toBe(true);
    net.advance(0.8 * 0.9 * 24 * HOUR - 1);
    expect(await wellKnownFetched(net, resolver)).toBe(false);
    net.advance(0.8 * 24 * HOUR - (0.8 * 0.9 * 24 * HOUR - 1));
    // The refresh fails for a while: the good value holds until it expires, at 24 h at the latest.
    net.wellKnown['example.com'] = { status: 503, headers: {}, body: '' };
    expect(await resolver.resolve('example.com')).toEqual(delegated);
    expect(net.take()).toEqual(['well-known example.com']);
    net.advance(60 * SECOND);
    expect(await wellKnownFetched(net, resolver)).toBe(false);
    net.advance(24 * HOUR - 0.8 * 24 * HOUR - 60 * SECOND);
    expect(await resolver.resolve('example.com')).toEqual(undelegated);
  });

  it('drops a delegation at once when the refresh gets a definitive answer (404)', async () => {
    const net = fakeNetwork({ wellKnown: { 'example.com': delegateTo('matrix.example.net:443', { 'cache-control': 'max-age=3600' }) } });
    const resolver = new ServerResolver(net.deps);
    await resolver.resolve('example.com');
    net.advance(0.8 * HOUR);
    delete net.wellKnown['example.com'];
    expect(await resolver.resolve('example.com')).toEqual(undelegated);
  });

  it('applies a 5 minute floor to max-age=0 and no-store', async () => {
    for (const cacheControl of ['max-age=0', 'no-store']) {
      const net = fakeNetwork({ wellKnown: { 'example.com': delegateTo('matrix.example.net:443', { 'cache-control': cacheControl }) } });
      const resolver = new ServerResolver(net.deps);
      expect(await wellKnownFetched(net, resolver)).toBe(true);
      net.advance(0.8 * 5 * MINUTE - 1);
      expect(await wellKnownFetched(net, resolver)).toBe(false);
      net.advance(1);
      expect(await wellKnownFetched(net, resolver)).toBe(true);
    }
  });

  it('treats an invalid Expires as already expired (so the floor applies)', async () => {
    const net = fakeNetwork({ wellKnown: { 'example.com': delegateTo('matrix.example.net:443', { expires: '0' }) } });
    const resolver = new ServerResolver(net.deps);
    await resolver.resolve('example.com');
    net.take();
    net.advance(4 * MINUTE);
    expect(await wellKnownFetched(net, resolver)).toBe(true);
  });

  for (const [title, answer] of [['a 404', undefined], ['a network error', new Error('ECONNRESET')]] as const) {
    it(`caches ${title} for an hour (less up to 10% jitter)`, async () => {
      const net = fakeNetwork();
      if (answer) net.wellKnown['example.com'] = answer;
      const resolver = new ServerResolver(net.deps);
      expect(await wellKnownFetched(net, resolver)).toBe(true);
      net.advance(0.9 * HOUR - 1);
      expect(await wellKnownFetched(net, resolver)).toBe(false);
      net.advance(0.1 * HOUR + 1);
      net.wellKnown['example.com'] = delegateTo('matrix.example.net:443');
      expect(await resolver.resolve('example.com')).toEqual(delegated);
    });
  }

  it('retries sooner, backing off from 2 minutes, for a server that delegated lately', async () => {
    const net = fakeNetwork({ wellKnown: { 'example.com': delegateTo('matrix.example.net:443', { 'cache-control': 'max-age=3600' }) } });
    const resolver = new ServerResolver(net.deps);
    await resolver.resolve('example.com');
    net.take();
    net.advance(HOUR);
    net.wellKnown['example.com'] = new Error('ECONNREFUSED');
    expect(await resolver.resolve('example.com')).toEqual(undelegated);
    net.take();
    net.advance(0.9 * 2 * MINUTE - 1);
    expect(await wellKnownFetched(net, resolver)).toBe(false);
    net.advance(0.1 * 2 * MINUTE + 1);
    expect(await wellKnownFetched(net, resolver)).toBe(true);
    net.advance(0.9 * 4 * MINUTE - 1);
    expect(await wellKnownFetched(net, resolver)).toBe(false);
    net.advance(0.1 * 4 * MINUTE + 1);
    net.wellKnown['example.com'] = delegateTo('matrix.example.net:443');
    expect(await resolver.resolve('example.com')).toEqual(delegated);
  });

  it('keeps at most maxCacheEntries, letting the oldest go', async () => {
    const net = fakeNetwork();
    const resolver = new ServerResolver(net.deps, { maxCacheEntries: 2 });
    for (const name of ['a.example', 'b.example', 'c.example']) await resolver.resolve(name);
    net.take();
    await resolver.resolve('c.example');
    await resolver.resolve('b.example');
    expect(net.take().filter((lookup) => lookup.startsWith('well-known'))).toEqual([]);
    await resolver.resolve('a.example');
    expect(net.take()).toContain('well-known a.example');
  });

  it('shares one lookup between concurrent resolves of the same name', async () => {
    let answer!: (response: WellKnownResponse) => void;
    const pending = new Promise<WellKnownResponse>((resolve) => {
      answer = resolve;
    });
    const net = fakeNetwork({ wellKnown: { 'example.com': pending } });
    const resolver = new ServerResolver(net.deps);
    const first = resolver.resolve('example.com');
    const second = resolver.resolve('example.com');
    answer(delegateTo('matrix.example.net'));
    const [a, b] = await Promise.all([first, second]);
    expect(a).toEqual(b);
    expect(a).not.toBe(b);
    expect(net.lookups).toEqual(['well-known example.com', `srv ${FED}matrix.example.net`, `srv ${OLD}matrix.example.net`]);
    // Once settled, the next resolve is a new lookup (from the cache).
    await resolver.resolve('example.com');
    expect(net.lookups.filter((lookup) => lookup.startsWith('well-known'))).toHaveLength(1);
  });
});

describe('server names', () => {
  const valid: Array<[string, { host: string; port?: number; isIpLiteral: boolean }]> = [
    ['matrix.org', { host: 'matrix.org', port: undefined, isIpLiteral: false }],
    ['matrix.org:8888', { host: 'matrix.org', port: 8888, isIpLiteral: false }],
    ['1.2.3.4', { host: '1.2.3.4', port: undefined, isIpLiteral: true }],
    ['1.2.3.4:1234', { host: '1.2.3.4', port: 1234, isIpLiteral: true }],
    ['[1234:5678::abcd]', { host: '1234:5678::abcd', port: undefined, isIpLiteral: true }],
    ['[1234:5678::abcd]:5678', { host: '1234:5678::abcd', port: 5678, isIpLiteral: true }],
    ['[::ffff:1.2.3.4]', { host: '::ffff:1.2.3.4', port: undefined, isIpLiteral: true }],
    ['localhost', { host: 'localhost', port: undefined, isIpLiteral: false }],
    ['MATRIX.org:65535', { host: 'MATRIX.org', port: 65535, isIpLiteral: false }],
    ['1.2.3.example', { host: '1.2.3.example', port: undefined, isIpLiteral: false }],
    [`${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(63)}`, { host: `${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(63)}`, port: undefined, isIpLiteral: false }],
  ];

  for (const [name, expected] of valid) {
    it(`parses ${name.length > 40 ? `a ${name.length}-character name` : name}`, () => {
      expect(parseServerName(name)).toEqual(expected);
    });
  }

  const invalid: Array<[string, string]> = [
    ['empty', ''],
    ['with a path', 'example.com/path'],
    ['with a scheme', 'https://example.com'],
    ['with a space', 'exa mple.com'],
    ['with an empty label', 'example..com'],
    ['with a trailing dot', 'example.com.'],
    ['empty host', ':8448'],
    ['empty port', 'example.com:'],
    ['port 0', 'example.com:0'],
    ['port over 65535', 'example.com:65536'],
    ['port of 6 digits', 'example.com:008448'],
    ['port not numeric', 'example.com:84a8'],
    ['too long (256 characters)', `${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(62)}.e`],
    ['a label over 63 characters', `${'a'.repeat(64)}.com`],
    ['an unbracketed IPv6 address', '1234:5678::abcd'],
    ['an unclosed IPv6 literal', '[1234:5678::abcd'],
    ['junk after an IPv6 literal', '[::1]x'],
    ['an IPv6 zone index', '[fe80::1%eth0]'],
    ['not an IPv6 address in brackets', '[example.com]'],
    ['an IPv4 octet over 255', '256.1.1.1'],
    ['a short IPv4 form', '127.1'],
    ['a leading-zero IPv4 octet', '01.2.3.4'],
    ['a bare number', '2130706433'],
  ];

  for (const [title, name] of invalid) {
    it(`refuses ${title}`, async () => {
      expect(parseServerName(name)).toBeUndefined();
      const net = fakeNetwork();
      const failure = await new ServerResolver(net.deps).resolve(name).catch((err: unknown) => err);
      expect(failure).toBeInstanceOf(FederationDiscoveryError);
      expect((failure as Error).message).toMatch(/^invalid server name /);
      expect(net.lookups).toEqual([]);
    });
  }
});
