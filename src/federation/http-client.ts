/**
 * Outbound federation requests: every request to another server goes through `FederationClient`,
 * which finds where the server is (discovery.ts), connects only to addresses the blacklist allows
 * (checked inside the socket's lookup, so a DNS answer cannot lead it elsewhere), checks the
 * certificate against the name the spec says, signs the request with X-Matrix, and bounds it in
 * time and in size.
 */
import dns from 'node:dns';
import https from 'node:https';
import { isIP } from 'node:net';
import tls from 'node:tls';
import type { ClientRequest, IncomingMessage } from 'node:http';
import { JsonTooDeepError, MAX_JSON_DEPTH, parseJsonSafely } from '../core/json.js';
import { canonicalJsonBytes } from '../core/canonical-json.js';
import { unpaddedBase64, type Signer } from '../core/signed-json.js';
import { guardedLookup, type ResolveHost } from '../net/address-guard.js';
import { ServerResolver, type ServerAddress, type SrvRecord, type WellKnownResponse, WELL_KNOWN_MAX_BODY_BYTES } from './discovery.js';

/** Why a request to another server failed: unreachable, refused, timed out, or an error answer. */
export class FederationError extends Error {
  override name = 'FederationError';
  constructor(
    message: string,
    readonly destination: string,
    /** The HTTP status of an error answer; undefined when there was no answer. */
    readonly status?: number,
    /** The Matrix error body of an error answer. */
    readonly body?: unknown,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }

  get errcode(): string | undefined {
    const body = this.body as { errcode?: unknown } | undefined;
    return typeof body?.errcode === 'string' ? body.errcode : undefined;
  }
}

export interface FederationClientOptions {
  signer: Signer;
  /** Why an address must not be contacted (ip_range_blacklist), or undefined. */
  addressRefusal: (address: string) => string | undefined;
  /** federation_domain_whitelist: false for servers not to talk to. */
  isAllowedDestination: (serverName: string) => boolean;
  verifyCertificates: boolean;
  /** PEM CAs replacing the system's (federation_custom_ca_list). */
  ca?: string[] | undefined;
  timeoutMs: number;
  maxResponseBytes: number;
  /** Tests: name resolution without DNS. */
  resolveHost?: ResolveHost | undefined;
  resolveSrv?: ((name: string) => Promise<SrvRecord[]>) | undefined;
  now?: () => number;
}

export interface FederationRequest {
  method: 'GET' | 'PUT' | 'POST';
  /** Path and query, as sent (and signed). */
  path: string;
  body?: unknown;
  timeoutMs?: number;
  maxResponseBytes?: number;
  /** Told the size of the answer's body (what a fetch budget counts). */
  onAnswerBytes?: (bytes: number) => void;
}

/** An answer whose body is read as it arrives. */
export interface StreamedAnswer {
  headers: IncomingMessage['headers'];
  /** The body, chunk by chunk; throws ResponseTooLarge past the cap, and when the deadline passes. */
  body: AsyncIterable<Buffer>;
}

interface OpenedAnswer {
  status: number;
  headers: IncomingMessage['headers'];
  body(maxBytes: number): AsyncGenerator<Buffer>;
  close(): void;
}

/** The answer is larger than the request allowed; reading stopped there. */
export class ResponseTooLarge extends Error {
  override name = 'ResponseTooLarge';
  constructor(readonly limit: number) {
    super(`the answer is larger than ${limit} bytes`);
  }
}

/** What is read of an error answer to a streamed request (its Matrix error). */
const ERROR_BODY_BYTES = 65_536;

/** Addresses of one destination tried per request, at most (the SRV records' best first). */
const MAX_ADDRESSES_TRIED = 3;

/** JSON nests a few levels deeper in federation answers (transactions, state) than in events. */
const RESPONSE_JSON_DEPTH = MAX_JSON_DEPTH + 16;

export class FederationClient {
  readonly resolver: ServerResolver;
  private readonly agent: https.Agent;
  private readonly lookup;

  constructor(private readonly options: FederationClientOptions) {
    const resolveHost: ResolveHost = options.resolveHost ?? ((hostname) => dns.promises.lookup(hostname, { all: true }));
    this.lookup = guardedLookup(resolveHost, options.addressRefusal, (reason) => new Error(reason));
    // Kept-alive connections: a destination gets many transactions. A pooled socket was checked
    // when it connected; a new one is checked again.
    this.agent = new https.Agent({ keepAlive: true, maxSockets: 8, maxFreeSockets: 4, timeout: 60_000 });
    this.resolver = new ServerResolver({
      fetchWellKnown: (serverName) => this.fetchWellKnown(serverName),
      resolveSrv: options.resolveSrv ?? defaultResolveSrv,
      now: options.now ?? Date.now,
    });
  }

  /** Sends a signed request to `destination` and returns its JSON answer; throws FederationError. */
  async request<T = unknown>(destination: string, request: FederationRequest): Promise<T> {
    const addresses = await this.addressesOf(destination);
    const authorization = this.authorization(destination, request);
    let lastError: unknown;
    for (const address of addresses) {
      try {
        const { status, body } = await this.send(address, request, authorization);
        if (status >= 200 && status < 300) return body as T;
        const errcode = (body as { errcode?: unknown } | undefined)?.errcode;
        throw new FederationError(`${destination} answered ${status}${typeof errcode === 'string' ? ` ${errcode}` : ''}`, destination, status, body);
      } catch (err) {
        // An answer is final; a server that could not be reached may have another address.
        if (err instanceof FederationError && err.status !== undefined) throw err;
        lastError = err;
      }
    }
    const message = lastError instanceof Error ? lastError.message : String(lastError);
    throw new FederationError(`cannot reach ${destination}: ${message}`, destination, undefined, undefined, { cause: lastError });
  }

  close(): void {
    this.agent.destroy();
  }

  /**
   * Where a destination may be reached; refuses ourselves and servers outside the whitelist. At
   * most a few addresses are tried, each with the request's whole deadline: a server's DNS
   * (dozens of SRV records) must not multiply how long one request may take.
   */
  private async addressesOf(destination: string): Promise<ServerAddress[]> {
    if (destination === this.options.signer.serverName) throw new FederationError('refusing to send a federation request to ourselves', destination);
    if (!this.options.isAllowedDestination(destination)) throw new FederationError(`${destination} is not in federation_domain_whitelist`, destination);
    try {
      return (await this.resolver.resolve(destination)).slice(0, MAX_ADDRESSES_TRIED);
    } catch (err) {
      throw new FederationError(`cannot find ${destination}: ${(err as Error).message}`, destination, undefined, undefined, { cause: err });
    }
  }

  /** Closes the pooled connections (the next requests connect again, through the address checks). */
  dropConnections(): void {
    this.agent.destroy();
  }

  /** `X-Matrix origin=..,destination=..,key=..,sig=..` over the request ("Request Authentication"). */
  private authorization(destination: string, request: FederationRequest): string {
    const signer = this.options.signer;
    const signed: Record<string, unknown> = { method: request.method, uri: request.path, origin: signer.serverName, destination };
    if (request.body !== undefined) signed.content = request.body;
    const signature = unpaddedBase64(signer.sign(canonicalJsonBytes(signed)));
    return `X-Matrix origin="${signer.serverName}",destination="${destination}",key="${signer.keyId}",sig="${signature}"`;
  }

  private send(address: ServerAddress, request: FederationRequest, authorization: string | undefined): Promise<{ status: number; body: unknown }> {
    const payload = request.body === undefined ? undefined : Buffer.from(JSON.stringify(request.body));
    const headers: Record<string, string> = { Host: address.hostHeader, Accept: 'application/json', 'User-Agent': 'bot-homeserver' };
    if (authorization) headers.Authorization = authorization;
    if (payload) {
      headers['Content-Type'] = 'application/json';
      headers['Content-Length'] = String(payload.length);
    }
    return this.exchange(address, request.method, request.path, headers, payload, request.timeoutMs ?? this.options.timeoutMs, request.maxResponseBytes ?? this.options.maxResponseBytes).then(
      ({ status, bytes }) => {
        request.onAnswerBytes?.(bytes.length);
        return { status, body: parseAnswer(bytes.toString('utf8')) };
      },
    );
  }

  /**
   * A signed GET whose answer is read as a stream (media): `consume` gets the headers and the body
   * as it arrives, within the same deadline and size cap as any request, and the connection is
   * closed when it returns. Throws FederationError for an error answer (its JSON body kept) or
   * when nothing answers, ResponseTooLarge past `maxResponseBytes`.
   */
  async requestStream<T>(
    destination: string,
    request: { path: string; maxResponseBytes: number; timeoutMs?: number },
    consume: (answer: StreamedAnswer) => Promise<T>,
  ): Promise<T> {
    const addresses = await this.addressesOf(destination);
    const authorization = this.authorization(destination, { method: 'GET', path: request.path });
    let lastError: unknown;
    for (const address of addresses) {
      const headers = { Host: address.hostHeader, Accept: '*/*', 'User-Agent': 'bot-homeserver', Authorization: authorization };
      let opened: OpenedAnswer;
      try {
        opened = await this.open(address, 'GET', request.path, headers, undefined, request.timeoutMs ?? this.options.timeoutMs);
      } catch (err) {
        // A server that could not be reached may have another address.
        lastError = err;
        continue;
      }
      try {
        if (opened.status < 200 || opened.status >= 300) {
          const bytes = await readAll(opened.body(ERROR_BODY_BYTES)).catch(() => Buffer.alloc(0));
          const body = parseAnswer(bytes.toString('utf8'));
          const errcode = (body as { errcode?: unknown } | undefined)?.errcode;
          throw new FederationError(`${destination} answered ${opened.status}${typeof errcode === 'string' ? ` ${errcode}` : ''}`, destination, opened.status, body);
        }
        const declared = Number(opened.headers['content-length']);
        if (Number.isFinite(declared) && declared > request.maxResponseBytes) throw new ResponseTooLarge(request.maxResponseBytes);
        return await consume({ headers: opened.headers, body: opened.body(request.maxResponseBytes) });
      } finally {
        opened.close();
      }
    }
    const message = lastError instanceof Error ? lastError.message : String(lastError);
    throw new FederationError(`cannot reach ${destination}: ${message}`, destination, undefined, undefined, { cause: lastError });
  }

  /**
   * Starts a request to one address: refused addresses are refused here for IP literals and in the
   * socket's lookup for names, and the certificate is checked against the name the spec says.
   */
  private startRequest(address: ServerAddress, method: string, path: string, headers: Record<string, string>): ClientRequest {
    const literal = isIP(address.host) !== 0;
    if (literal) {
      const refused = this.options.addressRefusal(address.host);
      if (refused) throw new Error(refused);
    }
    return https.request({
      host: address.host,
      port: address.port,
      method,
      path,
      headers,
      agent: this.agent,
      // An IP address gets no SNI (RFC 6066); its certificate must name the address.
      ...(literal ? {} : { servername: address.tlsServerName, lookup: this.lookup }),
      rejectUnauthorized: this.options.verifyCertificates,
      ...(this.options.ca ? { ca: this.options.ca } : {}),
      checkServerIdentity: (_host, cert) => tls.checkServerIdentity(address.tlsServerName, cert),
    });
  }

  /** One HTTPS exchange with a deadline over the whole of it and a cap on the answer. */
  private async exchange(
    address: ServerAddress,
    method: string,
    path: string,
    headers: Record<string, string>,
    payload: Buffer | undefined,
    timeoutMs: number,
    maxBytes: number,
  ): Promise<{ status: number; bytes: Buffer; headers: IncomingMessage['headers'] }> {
    const opened = await this.open(address, method, path, headers, payload, timeoutMs);
    try {
      return { status: opened.status, bytes: await readAll(opened.body(maxBytes)), headers: opened.headers };
    } finally {
      opened.close();
    }
  }

  /**
   * Sends the request and resolves once the answer's headers are in. The deadline runs on until
   * `close`, over the reading of the body too; `body(max)` reads it at most once.
   */
  private open(address: ServerAddress, method: string, path: string, headers: Record<string, string>, payload: Buffer | undefined, timeoutMs: number): Promise<OpenedAnswer> {
    return new Promise((resolve, reject) => {
      let req: ClientRequest;
      try {
        req = this.startRequest(address, method, path, headers);
      } catch (err) {
        reject(err);
        return;
      }
      let failure: Error | undefined;
      const timer = setTimeout(() => {
        failure = new Error(`no answer within ${timeoutMs} ms`);
        req.destroy(failure);
      }, timeoutMs);
      // Kept for the whole exchange: an error after the answer began (a reset, the deadline) must
      // not be an unhandled 'error' event; the body's reader sees it.
      req.on('error', (err) => {
        failure ??= err;
        clearTimeout(timer);
        reject(err);
      });
      req.on('response', (response) => {
        async function* body(maxBytes: number): AsyncGenerator<Buffer> {
          let size = 0;
          try {
            for await (const chunk of response as AsyncIterable<Buffer>) {
              size += chunk.length;
              if (size > maxBytes) throw new ResponseTooLarge(maxBytes);
              yield chunk;
            }
          } catch (err) {
            throw failure ?? err;
          }
          if (!response.complete) throw failure ?? new Error('the answer was cut short');
        }
        resolve({
          status: response.statusCode ?? 0,
          headers: response.headers,
          body,
          close: () => {
            clearTimeout(timer);
            // A body left unread (or read in part) would hold the socket: it is not reused.
            if (!response.complete) req.destroy();
          },
        });
      });
      req.end(payload);
    });
  }

  /** GET https://<server>/.well-known/matrix/server: redirects followed (at most 5), 50 KiB, 10 s. */
  private async fetchWellKnown(serverName: string): Promise<WellKnownResponse> {
    let url = new URL(`https://${serverName}/.well-known/matrix/server`);
    for (let hops = 0; ; hops++) {
      const port = url.port === '' ? 443 : Number(url.port);
      const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
      const address: ServerAddress = { host, port, hostHeader: url.host, tlsServerName: host };
      const answer = await this.exchange(address, 'GET', `${url.pathname}${url.search}`, { Host: url.host, Accept: 'application/json', 'User-Agent': 'bot-homeserver' }, undefined, 10_000, WELL_KNOWN_MAX_BODY_BYTES + 1);
      const location = answer.headers.location;
      if (answer.status >= 300 && answer.status < 400 && typeof location === 'string' && hops < 5) {
        const next = new URL(location, url);
        if (next.protocol !== 'https:') return { status: answer.status, headers: answer.headers, body: answer.bytes.toString('utf8') };
        url = next;
        continue;
      }
      return { status: answer.status, headers: answer.headers, body: answer.bytes.toString('utf8') };
    }
  }
}

function parseAnswer(text: string): unknown {
  if (text.trim() === '') return undefined;
  try {
    return parseJsonSafely(text, RESPONSE_JSON_DEPTH);
  } catch (err) {
    if (err instanceof JsonTooDeepError) return { errcode: 'M_BAD_JSON', error: 'the answer is nested too deeply' };
    return { errcode: 'M_NOT_JSON', error: 'the answer is not JSON' };
  }
}

async function readAll(body: AsyncIterable<Buffer>): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of body) chunks.push(chunk);
  return Buffer.concat(chunks);
}

async function defaultResolveSrv(name: string): Promise<SrvRecord[]> {
  try {
    return await dns.promises.resolveSrv(name);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOTFOUND' || code === 'ENODATA') return [];
    throw err;
  }
}
