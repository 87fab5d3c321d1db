// The fetcher is handed URLs by chat users, so it must not become a way to reach the homeserver's
// own network (SSRF). The check runs inside the socket's DNS lookup: the address we approve is the
// address we connect to, with no second resolution a rebinding DNS server could answer differently.
import dns from 'node:dns';
import type { LookupAddress, LookupOptions } from 'node:dns';
import ipaddr from 'ipaddr.js';
import { FeedError } from './error.js';

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

/**
 * A `lookup` for node:net that resolves with `resolveHost` and fails the connection with a
 * FeedError when any address the name resolves to is refused by `reasonToRefuse`.
 */
export function guardedLookup(resolveHost: ResolveHost, reasonToRefuse: (address: string) => string | undefined): LookupFunction {
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
        // Refuse if any answer is private: a name with one public and one private address could
        // otherwise reach the private one on a retry or a later connection.
        for (const entry of usable) {
          const reason = reasonToRefuse(entry.address);
          if (reason !== undefined) {
            callback(new FeedError(reason), []);
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
