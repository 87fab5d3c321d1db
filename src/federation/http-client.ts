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
import type { IncomingMessage } from 'node:http';
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

  /** Where a destination may be reached; refuses ourselves and servers outside the whitelist. */
  private async addressesOf(destination: string): Promise<ServerAddress[]> {
    if (destination === this.options.signer.serverName) throw new FederationError('refusing to send a federation request to ourselves', destination);
    if (!this.options.isAllowedDestination(destination)) throw new FederationError(`${destination} is not in federation_domain_whitelist`, destination);
    try {
      return await this.resolver.resolve(destination);
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
   * A signed GET whose answer is bytes (media), with its headers; throws FederationError for an
   * error answer (its JSON body kept) or when nothing answers.
   */
  async requestBytes(destination: string, request: { path: string; maxResponseBytes: number; timeoutMs?: number }): Promise<{ headers: IncomingMessage['headers']; bytes: Buffer }> {
    const addresses = await this.addressesOf(destination);
    const authorization = this.authorization(destination, { method: 'GET', path: request.path });
    let lastError: unknown;
    for (const address of addresses) {
      try {
        const headers = { Host: address.hostHeader, Accept: '*/*', 'User-Agent': 'bot-homeserver', Authorization: authorization };
        const answer = await this.exchange(address, 'GET', request.path, headers, undefined, request.timeoutMs ?? this.options.timeoutMs, request.maxResponseBytes);
        if (answer.status >= 200 && answer.status < 300) return { headers: answer.headers, bytes: answer.bytes };
        const body = parseAnswer(answer.bytes.toString('utf8'));
        const errcode = (body as { errcode?: unknown } | undefined)?.errcode;
        throw new FederationError(`${destination} answered ${answer.status}${typeof errcode === 'string' ? ` ${errcode}` : ''}`, destination, answer.status, body);
      } catch (err) {
        if (err instanceof FederationError && err.status !== undefined) throw err;
        lastError = err;
      }
    }
    const message = lastError instanceof Error ? lastError.message : String(lastError);
    throw new FederationError(`cannot reach ${destination}: ${message}`, destination, undefined, undefined, { cause: lastError });
  }

  /** One HTTPS exchange with a deadline over the whole of it and a cap on the answer. */
  private exchange(
    address: ServerAddress,
    method: string,
    path: string,
    headers: Record<string, string>,
    payload: Buffer | undefined,
    timeoutMs: number,
    maxBytes: number,
  ): Promise<{ status: number; bytes: Buffer; headers: IncomingMessage['headers'] }> {
    return new Promise((resolve, reject) => {
      const literal = isIP(address.host) !== 0;
      if (literal) {
        const refused = this.options.addressRefusal(address.host);
        if (refused) {
          reject(new Error(refused));
          return;
        }
      }
      const req = https.request({
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
      const timer = setTimeout(() => req.destroy(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
      req.on('error', (err) => {
        clearTimeout(timer);
        reject(err);
      });
      req.on('response', (response) => {
        const chunks: Buffer[] = [];
        let size = 0;
        response.on('data', (chunk: Buffer) => {
          size += chunk.length;
          if (size > maxBytes) {
            req.destroy(new Error(`the answer is larger than ${maxBytes} bytes`));
            return;
          }
          chunks.push(chunk);
        });
        response.on('end', () => {
          clearTimeout(timer);
          resolve({ status: response.statusCode ?? 0, bytes: Buffer.concat(chunks), headers: response.headers });
        });
        response.on('error', (err) => {
          clearTimeout(timer);
          reject(err);
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

async function defaultResolveSrv(name: string): Promise<SrvRecord[]> {
  try {
    return await dns.promises.resolveSrv(name);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOTFOUND' || code === 'ENODATA') return [];
    throw err;
  }
}
