/**
 * A recording HTTP proxy between two servers of a test (the appservice bridge and its main
 * homeserver, either way): every request is passed on and noted once answered, so a test can
 * count what one asked the other, or wait until the other has taken something.
 */
import { createServer, type IncomingMessage } from 'node:http';

export interface ProxiedRequest {
  method: string;
  /** The path without its query. */
  path: string;
  query: URLSearchParams;
  authorization: string | undefined;
  body: unknown;
  status: number;
}

export interface CountingProxy {
  readonly url: string;
  /** The requests answered so far, oldest first. */
  readonly requests: ProxiedRequest[];
  /** The next requests matching `failWith` are answered with that status, not passed on. */
  failWith: ((request: Omit<ProxiedRequest, 'status'>) => number | undefined) | undefined;
  /** Resolves once a request that `accept` takes has been answered (one already answered counts). */
  answered(accept: (request: ProxiedRequest) => boolean): Promise<ProxiedRequest>;
  close(): Promise<void>;
}

/** Passes requests on to `target()` (asked at each request: the target may start after the proxy). */
export async function startCountingProxy(target: () => string): Promise<CountingProxy> {
  const requests: ProxiedRequest[] = [];
  const waiters: Array<{ accept: (request: ProxiedRequest) => boolean; resolve: (request: ProxiedRequest) => void }> = [];
  const note = (request: ProxiedRequest) => {
    requests.push(request);
    for (const waiter of [...waiters]) {
      if (!waiter.accept(request)) continue;
      waiters.splice(waiters.indexOf(waiter), 1);
      waiter.resolve(request);
    }
  };
  const readBody = async (request: IncomingMessage): Promise<Buffer> => {
    const chunks: Buffer[] = [];
    for await (const chunk of request) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks);
  };
  const proxy: CountingProxy = {
    url: '',
    requests,
    failWith: undefined,
    answered(accept) {
      const done = requests.find(accept);
      if (done) return Promise.resolve(done);
      return new Promise((resolve) => waiters.push({ accept, resolve }));
    },
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
  const server = createServer((request, response) => {
    void (async () => {
      const raw = await readBody(request);
      const url = new URL(request.url ?? '/', 'http://proxy');
      let body: unknown;
      try {
        body = raw.length === 0 ? undefined : JSON.parse(raw.toString('utf8'));
      } catch {
        body = raw.toString('utf8');
      }
      const seen = { method: request.method ?? 'GET', path: url.pathname, query: url.searchParams, authorization: request.headers.authorization, body };
      const failure = proxy.failWith?.(seen);
      if (failure !== undefined) {
        response.writeHead(failure, { 'content-type': 'application/json' }).end(JSON.stringify({ errcode: 'M_UNKNOWN', error: 'failed by the test proxy' }));
        note({ ...seen, status: failure });
        return;
      }
      const headers: Record<string, string> = {};
      for (const [name, value] of Object.entries(request.headers)) if (typeof value === 'string' && name !== 'host' && name !== 'content-length' && name !== 'connection') headers[name] = value;
      try {
        const answer = await fetch(`${target()}${request.url ?? '/'}`, { method: seen.method, headers, body: raw.length === 0 ? undefined : raw });
        const text = Buffer.from(await answer.arrayBuffer());
        response.writeHead(answer.status, { 'content-type': answer.headers.get('content-type') ?? 'application/json' }).end(text);
        note({ ...seen, status: answer.status });
      } catch {
        response.writeHead(502).end();
        note({ ...seen, status: 502 });
      }
    })();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  (proxy as { url: string }).url = `http://127.0.0.1:${port}`;
  return proxy;
}
