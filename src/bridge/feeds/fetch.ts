// Fetches a feed the way a careful poller should: conditional GET, our own redirect handling (so
// every hop passes the address guard), one deadline for the whole exchange, a byte cap that holds
// after decompression too, and errors worded for the chat user who added the feed.
import http from 'node:http';
import type { IncomingMessage } from 'node:http';
import https from 'node:https';
import net from 'node:net';
import type { Readable, Transform } from 'node:stream';
import zlib from 'node:zlib';
import { FeedError } from './error.js';
import type { ParsedFeed } from './parse.js';
import type { FeedParse } from './parser-thread.js';
import { guardedLookup, nonPublicAddressReason, systemResolveHost, type LookupFunction, type ResolveHost } from '../../net/address-guard.js';

export interface FetchFeedOptions {
  /** Whole request including body. */
  timeoutMs: number;
  /** Body cap; stop reading and fail past it (compressed and decompressed). */
  maxBytes: number;
  maxRedirects: number;
  /** false in production. */
  allowPrivateAddresses: boolean;
  userAgent: string;
  /** Reads the fetched bytes (FeedParserThread.parse: in a worker thread, with a deadline). */
  parse: FeedParse;
  /** From the previous successful fetch. */
  etag?: string;
  lastModified?: string;
  signal?: AbortSignal;
}

export type FetchFeedResult =
  | { notModified: true }
  | { notModified: false; feed: ParsedFeed; etag?: string; lastModified?: string; finalUrl: string };

/** Seams for tests; production callers leave them out. */
export interface FetchFeedTestHooks {
  /** Replaces DNS (lets a test name resolve to an address without a DNS server). */
  resolveHost?: ResolveHost;
  /** Replaces the public-address rule (lets a test treat its 127.0.0.1 server as public). */
  nonPublicAddressReason?: (address: string) => string | undefined;
}

const ACCEPT =
  'application/feed+json, application/atom+xml, application/rss+xml, application/rdf+xml;q=0.9, ' +
  'application/xml;q=0.9, text/xml;q=0.9, application/json;q=0.8, */*;q=0.5';

const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);

/** Conditional GET with If-None-Match / If-Modified-Since; follows redirects itself; throws FeedError. */
export async function fetchFeed(url: string, options: FetchFeedOptions, hooks: FetchFeedTestHooks = {}): Promise<FetchFeedResult> {
  const deadline = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    deadline.abort();
  }, options.timeoutMs);
  // One controller for the deadline and the caller's signal (AbortSignal.any needs Node 20.3).
  const cancel = () => deadline.abort();
  if (options.signal?.aborted) cancel();
  options.signal?.addEventListener('abort', cancel, { once: true });
  const signal = deadline.signal;
  const refusalReason = hooks.nonPublicAddressReason ?? nonPublicAddressReason;
  const lookup = options.allowPrivateAddresses ? undefined : guardedLookup(hooks.resolveHost ?? systemResolveHost, refusalReason, (reason) => new FeedError(reason, { privateAddress: true }));
  try {
    let current = httpUrl(url);
    for (let redirects = 0; ; redirects++) {
      if (!options.allowPrivateAddresses) refuseNonPublicLiteral(current, refusalReason);
      const response = await request(current, options, lookup, signal);
      const status = response.statusCode ?? 0;

      if (REDIRECT_STATUSES.has(status)) {
        response.destroy();
        const location = response.headers.location;
        if (!location) throw new FeedError(`the server answered ${statusText(status)} without saying where to`);
        if (redirects >= options.maxRedirects) throw new FeedError(`too many redirects (more than ${options.maxRedirects})`);
        current = redirectTarget(location, current);
        continue;
      }
      if (status === 304) {
        response.destroy();
        if (options.etag === undefined && options.lastModified === undefined) {
          throw new FeedError('the server answered 304 Not Modified to a request that was not conditional');
        }
        return { notModified: true };
      }
      if (status < 200 || status > 299) {
        response.destroy();
        throw new FeedError(`the server answered ${statusText(status)}`);
      }

      const body = await readBody(response, options.maxBytes);
      const feed = await options.parse(body, { url: current.href, contentType: response.headers['content-type'] });
      const etag = response.headers.etag;
      const lastModified = response.headers['last-modified'];
      return {
        notModified: false,
        feed,
        finalUrl: current.href,
        ...(etag ? { etag } : {}),
        ...(lastModified ? { lastModified } : {}),
      };
    }
  } catch (error) {
    if (timedOut) throw new FeedError(`the request timed out after ${formatDuration(options.timeoutMs)}`);
    if (options.signal?.aborted) throw new FeedError('the fetch was cancelled');
    throw toFeedError(error);
  } finally {
    clearTimeout(timer);
    options.signal?.removeEventListener('abort', cancel);
  }
}

function httpUrl(text: string): URL {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new FeedError(`"${text}" is not a valid URL`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new FeedError(`only http and https addresses can be fetched, not ${url.protocol.replace(/:$/, '')}:`);
  }
  return url;
}

function redirectTarget(location: string, from: URL): URL {
  let target: URL;
  try {
    target = new URL(location, from);
  } catch {
    throw new FeedError(`the server redirected to an invalid address (${location})`);
  }
  return httpUrl(target.href);
}

/** node:net skips `lookup` for IP literals, so those are checked here. */
function refuseNonPublicLiteral(url: URL, reasonToRefuse: (address: string) => string | undefined): void {
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
  if (net.isIP(host) === 0) return;
  const reason = reasonToRefuse(host);
  if (reason !== undefined) throw new FeedError(reason.replace(/^the address resolves to/, 'the address is'), { privateAddress: true });
}

function request(url: URL, options: FetchFeedOptions, lookup: LookupFunction | undefined, signal: AbortSignal): Promise<IncomingMessage> {
  const headers: Record<string, string> = {
    'user-agent': options.userAgent,
    accept: ACCEPT,
    'accept-encoding': 'gzip, deflate, br',
  };
  if (options.etag !== undefined) headers['if-none-match'] = options.etag;
  if (options.lastModified !== undefined) headers['if-modified-since'] = options.lastModified;
  const client = url.protocol === 'https:' ? https : http;
  return new Promise((resolve, reject) => {
    // No shared agent: a pooled keep-alive socket would skip the lookup (and its address check).
    const req = client.request(url, { method: 'GET', headers, signal, agent: false, ...(lookup ? { lookup } : {}) }, resolve);
    req.on('error', reject);
    req.end();
  });
}

async function readBody(response: IncomingMessage, maxBytes: number): Promise<Buffer> {
  const tooLarge = () => new FeedError(`the response is larger than ${formatBytes(maxBytes)}`);
  const declared = Number(response.headers['content-length']);
  if (Number.isFinite(declared) && declared > maxBytes) {
    response.destroy();
    throw tooLarge();
  }

  const decoded = decompressed(response);
  if (decoded !== response) {
    // The compressed bytes count too, so a slow trickle of compressed garbage cannot run on.
    let rawBytes = 0;
    response.on('data', (chunk: Buffer) => {
      rawBytes += chunk.length;
      if (rawBytes > maxBytes) response.destroy(tooLarge());
    });
  }
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of decoded as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > maxBytes) throw tooLarge();
      chunks.push(chunk);
    }
  } finally {
    decoded.destroy();
    response.destroy();
  }
  return Buffer.concat(chunks);
}

/** The body stream, decompressed per Content-Encoding; errors on the response reach the reader. */
function decompressed(response: IncomingMessage): Readable {
  const encoding = (response.headers['content-encoding'] ?? '').trim().toLowerCase();
  let decoder: Transform;
  if (encoding === 'identity' || encoding === '') return response;
  else if (encoding === 'gzip' || encoding === 'x-gzip') decoder = zlib.createGunzip();
  else if (encoding === 'deflate') decoder = zlib.createInflate();
  else if (encoding === 'br') decoder = zlib.createBrotliDecompress();
  else {
    response.destroy();
    throw new FeedError(`the response uses a compression we do not read (${encoding})`);
  }
  response.on('error', (error) => decoder.destroy(error));
  return response.pipe(decoder);
}

function toFeedError(error: unknown): FeedError {
  if (error instanceof FeedError) return error;
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  const message = error instanceof Error ? error.message : String(error);
  switch (code) {
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return new FeedError(`the host name could not be resolved (${message})`);
    case 'ECONNREFUSED':
      return new FeedError('the server refused the connection');
    case 'ECONNRESET':
    case 'EPIPE':
      return new FeedError('the server closed the connection unexpectedly');
    case 'ETIMEDOUT':
    case 'EHOSTUNREACH':
    case 'ENETUNREACH':
      return new FeedError('the server could not be reached');
    case 'Z_DATA_ERROR':
    case 'Z_BUF_ERROR':
      return new FeedError('the response could not be decompressed');
  }
  if (code?.startsWith('ERR_TLS') || /CERT|SSL/.test(code ?? '')) {
    return new FeedError(`the server's TLS certificate was not accepted (${code})`);
  }
  return new FeedError(`the request failed: ${message}`);
}

function statusText(status: number): string {
  const text = http.STATUS_CODES[status];
  return text ? `${status} ${text}` : String(status);
}

function formatDuration(ms: number): string {
  return ms >= 1000 && ms % 1000 === 0 ? `${ms / 1000} s` : ms >= 1000 ? `${(ms / 1000).toFixed(1)} s` : `${ms} ms`;
}

function formatBytes(bytes: number): string {
  const mib = bytes / (1024 * 1024);
  if (mib >= 1 && Number.isInteger(mib)) return `${mib} MiB`;
  const kib = bytes / 1024;
  if (kib >= 1 && Number.isInteger(kib)) return `${kib} KiB`;
  return `${bytes} bytes`;
}
