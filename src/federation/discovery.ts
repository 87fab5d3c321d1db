/**
 * Server name resolution for the Server-Server API ("Resolving server names" in
 * server-server-api.md): which address to connect to for a server name, which `Host` header to
 * send and which name the certificate must hold. All I/O (the .well-known GET, SRV lookups, the
 * clock) is injected; A/AAAA lookups are left to the caller's socket, which applies the outbound
 * address blacklist there.
 *
 * Where the spec leaves a choice open, this module decides as follows (Synapse's values where it
 * has one):
 * - Server names: the appendix grammar, made stricter where a name could not be reached or would
 *   be read differently by a resolver: ports 1-65535; DNS labels non-empty and at most 63
 *   characters, no trailing dot (it names the same host as without it, and SNI forbids it); a name
 *   whose last label is all digits must be a plain dotted-quad IPv4 address (so `127.1`,
 *   `2130706433` or `01.2.3.4`, which getaddrinfo reads as addresses, are refused); IPv6 literals
 *   must be valid RFC 4291 text (Node's `isIP`), without a zone index.
 * - Well-known caching: Cache-Control `max-age` wins over `Expires` (RFC 9111); `no-store` and
 *   `no-cache` count as 0; an invalid `Expires` means already expired; `Age` and `s-maxage` are
 *   ignored (as Synapse). Periods from headers are clamped to [5 min, 48 h]; without headers 24 h.
 *   A good value is fetched again once 80% of its period has gone (Synapse's grace period); if that
 *   fetch fails temporarily (network/TLS error, 5xx, 429, body over 50 KiB) the previous value is
 *   kept until its own expiry, with retries backing off from 2 minutes. A definitive failure
 *   (any other non-200, bad JSON, no string `m.server`, an invalid delegated name) drops the
 *   delegation at once, since the remote server said so.
 * - Failures are cached for 1 hour, or, when the server had a valid well-known within the last
 *   2 hours, for 2 minutes doubling on each further failure up to 1 hour (Synapse's "had valid"
 *   memory plus the spec's exponential back-off). Default and failure periods get a jitter of up
 *   to -10%, derived from the server name, so entries fetched together do not expire together;
 *   jitter only shortens, so the 24 h / 1 h figures are never exceeded.
 * - Redirects, TLS, timeouts and the byte cap on the download belong to the caller's HTTP client;
 *   a 30x that still reaches us (a loop, too many hops) is a definitive failure. The 50 KiB limit
 *   is checked again here.
 * - SRV: no record means the next step; a DNS failure other than "no record" fails the resolution
 *   (falling through to port 8448 could reach the wrong service; Synapse also raises). A lone
 *   record with target `.` means "decidedly not available" (RFC 2782) and fails the resolution,
 *   as in Synapse. Records whose target is not a host name, or whose port is 0, are dropped.
 *   Targets are ordered by priority, then by RFC 2782's weighted random selection. SRV answers are
 *   not cached here (Node's resolver gives no TTL).
 */
import { isIP } from 'node:net';

export interface SrvRecord { name: string; port: number; priority: number; weight: number }

export interface WellKnownResponse { status: number; headers: Record<string, string | string[] | undefined>; body: string }

export interface DiscoveryDeps {
  /** GET https://<serverName>/.well-known/matrix/server (the caller's HTTP client follows redirects, applies TLS checks, timeouts, size caps and the outbound address blacklist). Rejects on network/TLS errors. */
  fetchWellKnown(serverName: string): Promise<WellKnownResponse>;
  /** SRV lookup; resolves [] when there is no record (ENOTFOUND/ENODATA); rejects on other DNS failures. */
  resolveSrv(name: string): Promise<SrvRecord[]>;
  /** Milliseconds since the epoch. */
  now(): number;
  /** A number in [0, 1) for RFC 2782's weighted choice among SRV targets; Math.random when absent. */
  random?(): number;
}

/**
 * Where to send a request for a server: connect to `host`:`port`, send `Host: hostHeader`, and
 * verify the certificate against `tlsServerName`. When `host` is an IP address (an IP literal
 * server name or delegation) Node does no lookup, so the caller must check it against the address
 * blacklist itself; `tlsServerName` is then that address: check the certificate's IP SAN and send
 * no SNI (RFC 6066 allows only host names there).
 */
export interface ServerAddress { host: string; port: number; hostHeader: string; tlsServerName: string }

export class FederationDiscoveryError extends Error {
  override name = 'FederationDiscoveryError';

  constructor(message: string, readonly serverName: string, options?: ErrorOptions) {
    super(message, options);
  }
}

export const DEFAULT_FEDERATION_PORT = 8448;
export const WELL_KNOWN_MAX_BODY_BYTES = 50 * 1024;

const SECOND = 1000;
const MINUTE = 60 * SECOND;
const HOUR = 60 * MINUTE;
const DEFAULT_CACHE_PERIOD = 24 * HOUR;
const MAX_CACHE_PERIOD = 48 * HOUR;
// Synapse's floor: a remote sending max-age=0 would otherwise be fetched before every request.
const MIN_CACHE_PERIOD = 5 * MINUTE;
const FAILURE_CACHE_PERIOD = HOUR;
// First retry after a failure for a server that had a valid well-known lately (Synapse: 2 min).
const RETRY_PERIOD = 2 * MINUTE;
const REMEMBER_HAD_VALID = 2 * HOUR;
const GRACE_FACTOR = 0.2;
const JITTER = 0.1;

interface ParsedServerName { host: string; port?: number; isIpLiteral: boolean }

/** The server name grammar of appendices.md, with the stricter rules above; undefined when invalid. */
export function parseServerName(name: string): ParsedServerName | undefined {
  const result = checkServerName(name);
  return typeof result === 'string' ? undefined : result;
}

/** The parsed name, or why it is invalid. */
function checkServerName(name: unknown): ParsedServerName | string {
  if (typeof name !== 'string' || name === '') return 'it is empty';
  let host: string;
  let portText: string | undefined;
  if (name.startsWith('[')) {
    const close = name.indexOf(']');
    if (close < 0) return 'an IPv6 literal lacks its closing "]"';
    host = name.slice(1, close);
    const rest = name.slice(close + 1);
    if (rest !== '') {
      if (!rest.startsWith(':')) return 'only a port may follow an IPv6 literal';
      portText = rest.slice(1);
    }
    // The grammar's IPv6char set has no "%", so zone indexes (which isIP accepts) are out.
    if (!/^[0-9A-Fa-f:.]{2,45}$/.test(host) || isIP(host) !== 6) return 'it holds an invalid IPv6 literal';
  } else {
    const colon = name.indexOf(':');
    if (colon >= 0) {
      if (name.indexOf(':', colon + 1) >= 0) return 'an IPv6 literal must be in brackets';
      host = name.slice(0, colon);
      portText = name.slice(colon + 1);
    } else {
      host = name;
    }
  }
  let port: number | undefined;
  if (portText !== undefined) {
    if (!/^[0-9]{1,5}$/.test(portText)) return 'the port is not 1 to 5 digits';
    port = Number(portText);
    if (port < 1 || port > 65535) return 'the port is not between 1 and 65535';
  }
  if (name.startsWith('[')) return { host, port, isIpLiteral: true };
  const hostProblem = checkDnsName(host);
  if (hostProblem === 'ipv4') return { host, port, isIpLiteral: true };
  if (hostProblem !== undefined) return hostProblem;
  return { host, port, isIpLiteral: false };
}

/** undefined for a usable DNS name, 'ipv4' for a dotted-quad, else why the name is refused. */
function checkDnsName(host: string): string | undefined {
  if (host === '') return 'the host name is empty';
  if (host.length > 255) return 'the host name is longer than 255 characters';
  if (!/^[A-Za-z0-9.-]+$/.test(host)) return 'the host name holds characters other than letters, digits, "-" and "."';
  const labels = host.split('.');
  if (labels.some((label) => label === '')) return 'the host name has an empty label';
  if (labels.some((label) => label.length > 63)) return 'a label of the host name is longer than 63 characters';
  // A numeric last label is no DNS name (TLDs are never numeric): only a plain IPv4 address passes.
  if (/^[0-9]+$/.test(labels[labels.length - 1] ?? '')) {
    return isIP(host) === 4 ? 'ipv4' : 'it is neither a valid IPv4 address nor a DNS name';
  }
  return undefined;
}

/** A validated delegation from a well-known response. */
interface Delegation extends ParsedServerName { name: string }

interface WellKnownEntry {
  delegation: Delegation | null;
  /** From here a fetch is tried (the grace period or the failure period has begun). */
  refreshAt: number;
  /** After this the delegation is not used, whatever happens to the refresh. */
  expiresAt: number;
  /** Until then failures are retried quickly: the server was delegating lately. */
  hadValidUntil: number;
  /** Consecutive failed fetches, for the back-off. */
  failures: number;
}

type FetchOutcome =
  | { ok: true; delegation: Delegation; period: number | undefined }
  | { ok: false; temporary: boolean; reason: string };

export class ServerResolver {
  private readonly cache = new Map<string, WellKnownEntry>();
  private readonly inFlight = new Map<string, Promise<ServerAddress[]>>();
  private readonly maxCacheEntries: number;

  constructor(private readonly deps: DiscoveryDeps, options: { maxCacheEntries?: number } = {}) {
    this.maxCacheEntries = Math.max(1, Math.floor(options.maxCacheEntries ?? 10_000));
  }

  /**
   * The addresses to try, in order: several only when SRV gives several targets (by priority,
   * then RFC 2782's weighted random order within a priority).
   */
  async resolve(serverName: string): Promise<ServerAddress[]> {
    const parsed = checkServerName(serverName);
    if (typeof parsed === 'string') {
      throw new FederationDiscoveryError(`invalid server name ${quote(serverName)}: ${parsed}`, String(serverName));
    }
    // Step 1: an IP literal, with its port or 8448; Host is the server name as given.
    if (parsed.isIpLiteral) return [address(parsed.host, parsed.port ?? DEFAULT_FEDERATION_PORT, serverName, parsed.host)];
    // Step 2: an explicit port skips .well-known and SRV.
    if (parsed.port !== undefined) return [address(parsed.host, parsed.port, serverName, parsed.host)];
    let lookup = this.inFlight.get(serverName);
    if (!lookup) {
      lookup = this.lookup(serverName).finally(() => this.inFlight.delete(serverName));
      this.inFlight.set(serverName, lookup);
    }
    // Callers may change what they get; the shared result stays intact.
    return (await lookup).map((entry) => ({ ...entry }));
  }

  /** Steps 3 to 6, for a host name without a port. */
  private async lookup(hostname: string): Promise<ServerAddress[]> {
    const delegation = await this.wellKnown(hostname);
    if (delegation === null) return this.srvOrDefault(hostname, hostname);
    // 3.1: an IP literal; Host is the delegated name, port included when given.
    if (delegation.isIpLiteral) {
      return [address(delegation.host, delegation.port ?? DEFAULT_FEDERATION_PORT, delegation.name, delegation.host)];
    }
    // 3.2: a host name with a port; no SRV.
    if (delegation.port !== undefined) return [address(delegation.host, delegation.port, delegation.name, delegation.host)];
    // 3.3 to 3.5: SRV on the delegated name, then 8448.
    return this.srvOrDefault(delegation.host, hostname);
  }

  /** `_matrix-fed._tcp`, then the deprecated `_matrix._tcp`, then port 8448; Host and TLS name stay `name`. */
  private async srvOrDefault(name: string, serverName: string): Promise<ServerAddress[]> {
    for (const service of ['_matrix-fed._tcp.', '_matrix._tcp.']) {
      const records = await this.lookupSrv(service + name, serverName);
      if (records.length > 0) return records.map((record) => address(record.name, record.port, name, name));
    }
    return [address(name, DEFAULT_FEDERATION_PORT, name, name)];
  }

  /** The usable records of an SRV name, ordered; [] when there are none. */
  private async lookupSrv(srvName: string, serverName: string): Promise<SrvRecord[]> {
    let records: SrvRecord[];
    try {
      records = await this.deps.resolveSrv(srvName);
    } catch (err) {
      throw new FederationDiscoveryError(`SRV lookup of ${srvName} failed: ${errorMessage(err)}`, serverName, { cause: err });
    }
    if (records.length === 0) return [];
    if (records.length === 1 && isRootTarget(records[0]?.name ?? '')) {
      throw new FederationDiscoveryError(`${srvName} says the service is not available (SRV target ".")`, serverName);
    }
    const usable = records
      .map((record) => ({ ...record, name: record.name.replace(/\.$/, '') }))
      .filter((record) => checkDnsName(record.name) === undefined && Number.isInteger(record.port) && record.port >= 1 && record.port <= 65535);
    if (usable.length === 0) throw new FederationDiscoveryError(`${srvName} has no usable SRV target`, serverName);
    return orderSrv(usable, this.deps.random ?? Math.random);
  }

  /** The delegation for `hostname`, from the cache or a fetch. */
  private async wellKnown(hostname: string): Promise<Delegation | null> {
    const previous = this.cache.get(hostname);
    if (previous && this.deps.now() < previous.refreshAt) return previous.delegation;
    const outcome = await this.fetchWellKnown(hostname);
    const now = this.deps.now();
    const jitter = 1 - JITTER * nameHash(hostname);
    if (outcome.ok) {
      const period = outcome.period === undefined ? DEFAULT_CACHE_PERIOD * jitter : outcome.period;
      this.store(hostname, {
        delegation: outcome.delegation,
        refreshAt: now + period * (1 - GRACE_FACTOR),
        expiresAt: now + period,
        hadValidUntil: now + period + REMEMBER_HAD_VALID,
        failures: 0,
      });
      return outcome.delegation;
    }
    const failures = (previous?.failures ?? 0) + 1;
    const hadValid = previous !== undefined && now < previous.hadValidUntil;
    const retryIn = hadValid ? Math.min(FAILURE_CACHE_PERIOD, RETRY_PERIOD * 2 ** (failures - 1)) * jitter : FAILURE_CACHE_PERIOD * jitter;
    // A temporary failure during the grace period keeps the good value until it expires.
    if (outcome.temporary && previous?.delegation && now < previous.expiresAt) {
      this.store(hostname, { ...previous, refreshAt: Math.min(previous.expiresAt, now + retryIn), failures });
      return previous.delegation;
    }
    this.store(hostname, {
      delegation: null,
      refreshAt: now + retryIn,
      expiresAt: now + retryIn,
      hadValidUntil: previous?.hadValidUntil ?? 0,
      failures,
    });
    return null;
  }

  /** One GET, judged; never throws. */
  private async fetchWellKnown(hostname: string): Promise<FetchOutcome> {
    let response: WellKnownResponse;
    try {
      response = await this.deps.fetchWellKnown(hostname);
    } catch (err) {
      return { ok: false, temporary: true, reason: `request failed: ${errorMessage(err)}` };
    }
    const { status, body } = response;
    if (status >= 500 || status === 429) return { ok: false, temporary: true, reason: `status ${status}` };
    if (status !== 200) return { ok: false, temporary: false, reason: `status ${status}` };
    // As Synapse: an oversized body is treated as a temporary failure (a previous value is kept).
    if (typeof body !== 'string' || Buffer.byteLength(body, 'utf8') > WELL_KNOWN_MAX_BODY_BYTES) {
      return { ok: false, temporary: true, reason: 'body too large' };
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(body);
    } catch {
      return { ok: false, temporary: false, reason: 'body is not JSON' };
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
      return { ok: false, temporary: false, reason: 'body is not a JSON object' };
    }
    const server = Object.hasOwn(parsed, 'm.server') ? (parsed as Record<string, unknown>)['m.server'] : undefined;
    if (typeof server !== 'string') return { ok: false, temporary: false, reason: 'm.server is not a string' };
    const delegation = checkServerName(server);
    if (typeof delegation === 'string') return { ok: false, temporary: false, reason: `m.server is invalid: ${delegation}` };
    return { ok: true, delegation: { ...delegation, name: server }, period: cachePeriod(response.headers, this.deps.now()) };
  }

  /** Newest last; the oldest goes when the cache is full. */
  private store(hostname: string, entry: WellKnownEntry): void {
    this.cache.delete(hostname);
    this.cache.set(hostname, entry);
    while (this.cache.size > this.maxCacheEntries) {
      const oldest = this.cache.keys().next();
      if (oldest.done) break;
      this.cache.delete(oldest.value);
    }
  }
}

function address(host: string, port: number, hostHeader: string, tlsServerName: string): ServerAddress {
  return { host, port, hostHeader, tlsServerName };
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function quote(value: unknown): string {
  const text = JSON.stringify(String(value));
  return text.length > 100 ? `${text.slice(0, 97)}..."` : text;
}

/** c-ares gives '' for the root; some resolvers give '.'. */
function isRootTarget(name: string): boolean {
  return name === '' || name === '.';
}

/**
 * The period from the response headers, clamped to [5 min, 48 h]; undefined when the headers say
 * nothing (the caller applies the 24 h default).
 */
function cachePeriod(headers: WellKnownResponse['headers'], now: number): number | undefined {
  const period = periodFromHeaders(headers, now);
  if (period === undefined) return undefined;
  return Math.min(MAX_CACHE_PERIOD, Math.max(MIN_CACHE_PERIOD, period));
}

function periodFromHeaders(headers: WellKnownResponse['headers'], now: number): number | undefined {
  const directives = new Map<string, string | undefined>();
  for (const value of headerValues(headers, 'cache-control')) {
    for (const directive of value.split(',')) {
      const [key, argument] = directive.split('=', 2).map((part) => part.trim());
      if (key) directives.set(key.toLowerCase(), argument?.replace(/^"(.*)"$/, '$1'));
    }
  }
  if (directives.has('no-store') || directives.has('no-cache')) return 0;
  const maxAge = directives.get('max-age');
  if (maxAge !== undefined && /^[0-9]+$/.test(maxAge)) return Number(maxAge) * SECOND;
  const expires = headerValues(headers, 'expires').at(-1);
  if (expires !== undefined) {
    // RFC 9111: an invalid date (notably "0") means already expired. The letter check keeps
    // Date.parse from reading "0" or "2030" as a year.
    const at = /[A-Za-z]/.test(expires) ? Date.parse(expires) : Number.NaN;
    return Number.isNaN(at) ? 0 : Math.max(0, at - now);
  }
  return undefined;
}

/** Header values by case-insensitive name. */
function headerValues(headers: WellKnownResponse['headers'], name: string): string[] {
  const values: string[] = [];
  for (const [key, value] of Object.entries(headers ?? {})) {
    if (key.toLowerCase() !== name || value === undefined) continue;
    if (Array.isArray(value)) values.push(...value);
    else values.push(value);
  }
  return values;
}

/** RFC 2782: ascending priority; within one, a weighted random draw (weight 0 first, rarely drawn). */
function orderSrv(records: SrvRecord[], random: () => number): SrvRecord[] {
  const priorities = [...new Set(records.map((record) => record.priority))].sort((a, b) => a - b);
  const ordered: SrvRecord[] = [];
  for (const priority of priorities) {
    const pool = records.filter((record) => record.priority === priority);
    pool.sort((a, b) => Number(a.weight > 0) - Number(b.weight > 0));
    while (pool.length > 0) {
      const total = pool.reduce((sum, record) => sum + Math.max(0, record.weight), 0);
      const draw = Math.min(total, Math.floor(random() * (total + 1)));
      let running = 0;
      let index = pool.findIndex((record) => (running += Math.max(0, record.weight)) >= draw);
      if (index < 0) index = 0;
      ordered.push(...pool.splice(index, 1));
    }
  }
  return ordered;
}

/** FNV-1a of the name, in [0, 1): a stable per-server jitter. */
function nameHash(name: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < name.length; i++) {
    hash ^= name.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return (hash >>> 0) / 2 ** 32;
}
