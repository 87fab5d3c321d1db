// The fetcher is handed URLs by chat users, so it must not become a way to reach the homeserver's
// own network (SSRF). The check runs inside the socket's DNS lookup: the address we approve is the
// address we connect to, with no second resolution a rebinding DNS server could answer differently.
import dns from 'node:dns';
import type { LookupAddress, LookupOptions } from 'node:dns';
import ipaddr from 'ipaddr.js';

const RANGE_WORDS: Record<string, string> = {
  loopback: 'a loopback address',
  private: 'a private address',
  uniqueLocal: 'a private address',
  linkLocal: 'a link-local address',
  carrierGradeNat: 'a carrier-grade NAT address',
  unspecified: 'an unspecified address',
  multicast: 'a multicast address',
  broadcast: 'a broadcast address',
};

/**
 * Why we refuse to connect to `address`, or undefined for a public unicast address. Anything
 * ipaddr.js does not class as plain `unicast` (documentation, benchmarking, NAT64, 6to4, Teredo,
 * ... ranges included) is refused. IPv6 addresses that carry an IPv4 address in their last 32
 * bits are judged as that IPv4 address: IPv4-mapped ones (`::ffff:0:0/96`), and the deprecated
 * IPv4-compatible ones (`::/96`), which ipaddr.js classes as unicast although `::7f00:1` is
 * 127.0.0.1 to a host that routes them; those are refused whatever they carry.
 */
export function nonPublicAddressReason(address: string): string | undefined {
  if (!ipaddr.isValid(address)) return `${address} is not an IP address`;
  let parsed = ipaddr.parse(address);
  let compatible = false;
  if (parsed.kind() === 'ipv6') {
    const v6 = parsed as ipaddr.IPv6;
    compatible = v6.parts.slice(0, 6).every((part) => part === 0) && v6.range() === 'unicast';
    if (v6.isIPv4MappedAddress() || compatible) parsed = ipaddr.IPv4.parse(lastFourBytes(v6));
  }
  const range = parsed.range();
  if (range === 'unicast' && !compatible) return undefined;
  const words = range === 'unicast' ? 'an IPv4-compatible IPv6 address (deprecated)' : (RANGE_WORDS[range] ?? 'a reserved address');
  return `the address resolves to ${compatible ? `${address} (${parsed.toString()})` : parsed.toString()}, ${words}`;
}

/** The IPv4 address in the last 32 bits of an IPv6 address, dotted. */
function lastFourBytes(address: ipaddr.IPv6): string {
  return address.toByteArray().slice(12).join('.');
}

export type ResolveHost = (hostname: string) => Promise<LookupAddress[]>;

export const systemResolveHost: ResolveHost = (hostname) => dns.promises.lookup(hostname, { all: true });

type LookupCallback = (error: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;
export type LookupFunction = (hostname: string, options: LookupOptions, callback: LookupCallback) => void;

/** An error refusing an address, in the caller's own error type (its message is the reason). */
export type RefusalError = (reason: string) => Error;

/**
 * A `lookup` for node:net that resolves with `resolveHost` and fails the connection with
 * `refusal(reason)` when any address the name resolves to is refused by `reasonToRefuse`.
 */
export function guardedLookup(resolveHost: ResolveHost, reasonToRefuse: (address: string) => string | undefined, refusal: RefusalError): LookupFunction {
  return (hostname, options, callback) => {
    resolveHost(hostname).then(
      (addresses) => {
        const family = options.family === 'IPv4' ? 4 : options.family === 'IPv6' ? 6 : options.family;
        const usable = family ? addresses.filter((entry) => entry.family === family) : addresses;
        const first = usable[0];
        if (first === undefined) {
          callback(Object.assign(new Error(`no address found for ${hostname}`), { code: 'ENOTFOUND' }), []);
          return;
        }
        // Refuse if any answer is refused: a name with one public and one private address could
        // otherwise reach the private one on a retry or a later connection.
        for (const entry of usable) {
          const reason = reasonToRefuse(entry.address);
          if (reason !== undefined) {
            callback(refusal(reason), []);
            return;
          }
        }
        if (options.all) callback(null, usable);
        else callback(null, first.address, first.family);
      },
      (error: NodeJS.ErrnoException) => callback(error, []),
    );
  };
}

/**
 * Synapse's default `ip_range_blacklist`: loopback, private, link-local, shared, documentation,
 * benchmarking and multicast ranges. 0.0.0.0 and :: are refused whatever the list says.
 */
export const DEFAULT_IP_RANGE_BLACKLIST: readonly string[] = [
  '127.0.0.0/8', '10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', '100.64.0.0/10', '192.0.0.0/24', '169.254.0.0/16',
  '192.88.99.0/24', '198.18.0.0/15', '192.0.2.0/24', '198.51.100.0/24', '203.0.113.0/24', '224.0.0.0/4',
  '::1/128', 'fe80::/10', 'fc00::/7', '2001:db8::/32', 'ff00::/8', 'fec0::/10',
];

/**
 * Why an address is refused by a CIDR blacklist (and not let through by the whitelist), or
 * undefined. IPv6 addresses carrying an IPv4 address (mapped or compatible) are judged as that
 * IPv4 address as well, so `::ffff:10.0.0.1` cannot slip past `10.0.0.0/8`. Throws on an invalid
 * range (configuration is checked when it is read).
 */
export function cidrRefusal(blacklist: readonly string[], whitelist: readonly string[] = []): (address: string) => string | undefined {
  const parse = (ranges: readonly string[]) => ranges.map((range) => ({ range, cidr: ipaddr.parseCIDR(range) }));
  const blocked = parse(blacklist);
  const allowed = parse(whitelist);
  const matches = (list: typeof blocked, address: ipaddr.IPv4 | ipaddr.IPv6) =>
    list.find(({ cidr }) => address.kind() === cidr[0].kind() && address.match(cidr as [typeof address, number]));
  return (text) => {
    if (!ipaddr.isValid(text)) return `${text} is not an IP address`;
    const parsed = ipaddr.parse(text);
    const forms: Array<ipaddr.IPv4 | ipaddr.IPv6> = [parsed];
    if (parsed.kind() === 'ipv6') {
      const v6 = parsed as ipaddr.IPv6;
      if (v6.isIPv4MappedAddress() || (v6.parts.slice(0, 6).every((part) => part === 0) && v6.range() === 'unicast')) {
        forms.push(ipaddr.IPv4.parse(lastFourBytes(v6)));
      }
    }
    if (forms.some((form) => form.range() === 'unspecified')) return `the address ${text} is unspecified`;
    if (forms.some((form) => matches(allowed, form))) return undefined;
    const hit = forms.map((form) => matches(blocked, form)).find((found) => found !== undefined);
    return hit ? `the address ${text} is in the blacklisted range ${hit.range}` : undefined;
  };
}

/**
 * Whether an address is in one of the ranges (CIDR), an IPv6 address carrying an IPv4 one judged
 * as that too (`::ffff:127.0.0.1` is in `127.0.0.0/8`). Throws on an invalid range.
 */
export function addressInRanges(ranges: readonly string[]): (address: string) => boolean {
  // The blacklist check, with the ranges as the blacklist: "refused" means "in a range".
  const refusal = cidrRefusal(ranges);
  return (address) => ipaddr.isValid(address) && refusal(address)?.includes('blacklisted range') === true;
}

/** Whether each range is a valid CIDR; the invalid ones, for configuration errors. */
export function invalidRanges(ranges: readonly string[]): string[] {
  return ranges.filter((range) => {
    try {
      ipaddr.parseCIDR(range);
      return false;
    } catch {
      return true;
    }
  });
}
