/** A local HTTP server on 127.0.0.1 serving feeds a test can change, honouring conditional GETs. */
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ServedDocument {
  body: string | Buffer;
  status?: number;
  contentType?: string;
  etag?: string;
  lastModified?: string;
}

export interface FeedServer {
  url(path: string): string;
  serve(path: string, document: ServedDocument): void;
  /** Every request received, with the status it was answered with. */
  requests: Array<{ path: string; headers: IncomingHttpHeaders; status: number }>;
  /** Resolves once the next answer to `path` has been sent in full. */
  whenServed(path: string): Promise<void>;
  close(): Promise<void>;
}

export async function startFeedServer(): Promise<FeedServer> {
  const documents = new Map<string, ServedDocument>();
  const requests: FeedServer['requests'] = [];
  const waiting = new Map<string, Array<() => void>>();
  const server: Server = createServer((request, response) => {
    const path = request.url ?? '/';
    const document = documents.get(path);
    let status = document?.status ?? (document ? 200 : 404);
    const notModified =
      status === 200 &&
      ((document?.etag !== undefined && request.headers['if-none-match'] === document.etag) ||
        (document?.etag === undefined && document?.lastModified !== undefined && request.headers['if-modified-since'] === document.lastModified));
    if (notModified) status = 304;
    requests.push({ path, headers: request.headers, status });
    const headers: Record<string, string> = { 'content-type': document?.contentType ?? 'application/rss+xml; charset=utf-8' };
    if (document?.etag) headers.etag = document.etag;
    if (document?.lastModified) headers['last-modified'] = document.lastModified;
    response.on('finish', () => {
      for (const resolve of waiting.get(path)?.splice(0) ?? []) resolve();
    });
    response.writeHead(status, headers);
    response.end(status === 304 || !document ? undefined : document.body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: (path) => `http://127.0.0.1:${port}${path}`,
    serve: (path, document) => documents.set(path, document),
    requests,
    whenServed: (path) => new Promise((resolve) => waiting.set(path, [...(waiting.get(path) ?? []), resolve])),
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
