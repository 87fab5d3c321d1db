/**
 * Federation wired together: the outbound client (discovery, address guard, TLS, signing), the
 * key ring, and who this server may talk to. Built by services.ts; the HTTP routes under
 * http/routes/federation.ts and the room flows call into it.
 */
import { readFileSync } from 'node:fs';
import type { Clock } from '../core/clock.js';
import { MatrixError } from '../core/errors.js';
import type { Signer } from '../core/signed-json.js';
import type { Config } from '../config/index.js';
import { cidrRefusal } from '../net/address-guard.js';
import type { Storage } from '../storage/index.js';
import { FederationClient, type FederationClientOptions } from './http-client.js';
import { KeyRing } from './key-ring.js';
import { authenticateRequest, type SignedRequest } from './request-auth.js';

export interface FederationTestHooks {
  /** Name resolution and SRV without DNS (tests federate between instances on loopback). */
  resolveHost?: FederationClientOptions['resolveHost'];
  resolveSrv?: FederationClientOptions['resolveSrv'];
}

export class Federation {
  readonly client: FederationClient;
  readonly keyRing: KeyRing;
  readonly serverName: string;
  private readonly whitelist: ReadonlySet<string> | undefined;

  constructor(
    readonly config: Config,
    readonly signer: Signer,
    storage: Storage,
    private readonly clock: Clock,
    hooks: FederationTestHooks = {},
  ) {
    this.serverName = config.server_name;
    this.whitelist = config.federation_domain_whitelist === null ? undefined : new Set(config.federation_domain_whitelist);
    this.client = new FederationClient({
      signer,
      addressRefusal: cidrRefusal(config.ip_range_blacklist, config.ip_range_whitelist),
      isAllowedDestination: (server) => this.isAllowed(server),
      verifyCertificates: config.federation_verify_certificates,
      ca: config.federation_custom_ca_list.length > 0 ? config.federation_custom_ca_list.map((path) => readFileSync(path, 'utf8')) : undefined,
      timeoutMs: config.federation.request_timeout,
      maxResponseBytes: config.federation.max_response_bytes,
      resolveHost: hooks.resolveHost,
      resolveSrv: hooks.resolveSrv,
      now: () => clock.now(),
    });
    this.keyRing = new KeyRing(signer, storage, this.client, clock, {
      oldSigningKeys: Object.fromEntries(Object.entries(config.old_signing_keys).map(([keyId, old]) => [keyId, { key: old.key, expiredTs: old.expired_ts }])),
      trustedKeyServers: config.trusted_key_servers,
      keyRefreshIntervalMs: config.key_refresh_interval,
    });
  }

  /** federation_domain_whitelist: null lets every server in. */
  isAllowed(serverName: string): boolean {
    return this.whitelist === undefined || this.whitelist.has(serverName);
  }

  /** The origin of a request from another server (401 when unsigned or badly signed, 403 when not allowed). */
  async authenticate(request: SignedRequest): Promise<string> {
    const origin = await authenticateRequest(request, this.serverName, this.keyRing, this.clock.now());
    if (!this.isAllowed(origin)) throw new MatrixError('M_FORBIDDEN', `Federation with ${origin} is not allowed here`);
    return origin;
  }

  close(): void {
    this.client.close();
  }
}
