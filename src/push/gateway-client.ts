/**
 * POSTs notifications to push gateways (`POST /_matrix/push/v1/notify`, the Push Gateway API).
 * A gateway's URL is set by a client, so the connection goes through the outbound address guard
 * (ip_range_blacklist / ip_range_whitelist, checked in the socket's own DNS lookup): a user cannot
 * point the server at its own network. Bounded: one deadline from connect to the last byte, and
 * at most MAX_RESPONSE_BYTES of answer read.
 */
import http from 'node:http';
import https from 'node:https';
import dns from 'node:dns';
import { isIP } from 'node:net';
import tls from 'node:tls';
import { guardedLookup, type ResolveHost } from '../net/address-guard.js';

const MAX_RESPONSE_BYTES = 65_536;

/** Why a push failed: no answer, a refused address, or an answer other than 2xx. */
export class PushGatewayError extends Error {
  override name = 'PushGatewayError';
}

export interface PushGatewayClientOptions {
  timeoutMs: number;
  /** Why an address may not be connected to, or undefined (the configured blacklist). */
  addressRefusal: (address: string) => string | undefined;
  resolveHost?: ResolveHost;
  /** PEM CAs trusted besides the system's (push.custom_ca_list). */
  extraCas?: readonly string[];
}

export class PushGatewayClient {
  private readonly lookup;
  private readonly httpAgent: http.Agent;
  private readonly httpsAgent: https.Agent;
  private readonly inFlight = new Set<http.ClientRequest>();

  constructor(private readonly options: PushGatewayClientOptions) {
    const resolveHost: ResolveHost = options.resolveHost ?? ((hostname) => dns.promises.lookup(hostname, { all: true }));
    this.lookup = guardedLookup(resolveHost, options.addressRefusal, (reason) => new PushGatewayError(reason));
    // Kept-alive connections: one gateway gets every notification of its app's users.
    this.httpAgent = new http.Agent({ keepAlive: true, maxSockets: 8, lookup: this.lookup } as http.AgentOptions);
    const ca = options.extraCas && options.extraCas.length > 0 ? [...tls.rootCertificates, ...options.extraCas] : undefined;
    this.httpsAgent = new https.Agent({ keepAlive: true, maxSockets: 8, lookup: this.lookup, ...(ca ? { ca } : {}) } as https.AgentOptions);
  }

  /** Sends one notification; the gateway's `rejected` pushkeys. Throws PushGatewayError. */
  async notify(url: string, body: Record<string, unknown>): Promise<string[]> {
    let target: URL;
    try {
      target = new URL(url);
    } catch {
      throw new PushGatewayError('the pusher URL is not a URL');
    }
    if (target.protocol !== 'http:' && target.protocol !== 'https:') throw new PushGatewayError('the pusher URL is not http or https');
    // A literal address is connected to without a lookup: it is checked here.
    const literal = target.hostname.replace(/^\[(.*)\]$/, '$1');
    if (isIP(literal) !== 0) {
      const reason = this.options.addressRefusal(literal);
      if (reason !== undefined) throw new PushGatewayError(reason);
    }
    const payload = Buffer.from(JSON.stringify(body));
    const secure = target.protocol === 'https:';
    const text = await new Promise<string>((resolve, reject) => {
      const request = (secure ? https : http).request(
        target,
        {
          method: 'POST',
          agent: secure ? this.httpsAgent : this.httpAgent,
          lookup: this.lookup,
          headers: { 'content-type': 'application/json', 'content-length': payload.length, 'user-agent': 'bot-homeserver' },
        },
        (response) => {
          const chunks: Buffer[] = [];
          let size = 0;
          response.on('data', (chunk: Buffer) => {
            size += chunk.length;
            if (size > MAX_RESPONSE_BYTES) {
              request.destroy(new PushGatewayError('the gateway answered with too much'));
              return;
            }
            chunks.push(chunk);
          });
          response.on('end', () => {
            const status = response.statusCode ?? 0;
            if (status < 200 || status >= 300) reject(new PushGatewayError(`the gateway answered ${status}`));
            else resolve(Buffer.concat(chunks).toString('utf8'));
          });
          response.on('error', reject);
        },
      );
      this.inFlight.add(request);
      request.on('close', () => this.inFlight.delete(request));
      const deadline = setTimeout(() => request.destroy(new PushGatewayError(`no answer within ${this.options.timeoutMs} ms`)), this.options.timeoutMs);
      request.on('close', () => clearTimeout(deadline));
      request.on('error', (err) => reject(err instanceof PushGatewayError ? err : new PushGatewayError(err.message, { cause: err })));
      request.end(payload);
    });
    try {
      const parsed = JSON.parse(text) as { rejected?: unknown };
      return Array.isArray(parsed.rejected) ? parsed.rejected.filter((key): key is string => typeof key === 'string') : [];
    } catch {
      // A 2xx without JSON: delivered, nothing rejected (as Synapse takes it).
      return [];
    }
  }

  /** Ends the requests under way and the kept connections. */
  close(): void {
    for (const request of this.inFlight) request.destroy(new PushGatewayError('the server is stopping'));
    this.httpAgent.destroy();
    this.httpsAgent.destroy();
  }
}
