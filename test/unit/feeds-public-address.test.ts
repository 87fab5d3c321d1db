import type { LookupAddress } from 'node:dns';
import { describe, expect, it } from 'vitest';
import { FeedError } from '../../src/bridge/feeds/error.js';
import { cidrRefusal, DEFAULT_IP_RANGE_BLACKLIST, guardedLookup, invalidRanges, nonPublicAddressReason } from '../../src/net/address-guard.js';

describe('nonPublicAddressReason', () => {
  it.each([
    ['127.0.0.1', 'loopback'],
    ['127.8.9.10', 'loopback'],
    ['10.0.0.5', 'private'],
    ['172.16.0.1', 'private'],
    ['172.31.255.254', 'private'],
    ['192.168.1.1', 'private'],
    ['169.254.169.254', 'link-local'],
    ['100.64.0.1', 'carrier-grade NAT'],
    ['0.0.0.0', 'unspecified'],
    ['224.0.0.1', 'multicast'],
    ['255.255.255.255', 'broadcast'],
    ['::1', 'loopback'],
    ['::', 'unspecified'],
    ['fe80::1', 'link-local'],
    ['fc00::1', 'private'],
    ['fd12:3456::1', 'private'],
    ['ff02::1', 'multicast'],
    ['::ffff:127.0.0.1', 'loopback'],
    ['::ffff:10.0.0.5', 'private'],
    ['::ffff:a9fe:a9fe', 'link-local'],
    ['192.0.2.1', 'reserved'],
    ['2001:db8::1', 'reserved'],
    ['::7f00:1', 'loopback'],
    ['::a00:5', 'private'],
    ['::a9fe:a9fe', 'link-local'],
    ['::2', 'unspecified'],
    ['64:ff9b::7f00:1', 'reserved'],
    ['64:ff9b:1::a00:5', 'reserved'],
    ['::ffff:0:7f00:1', 'reserved'],
    ['2002:7f00:1::1', 'reserved'],
    ['2001:0:4136:e378:8000:63bf:80ff:fffe', 'reserved'],
  ])('refuses %s (%s)', (address, kind) => {
    expect(nonPublicAddressReason(address)).toMatch(new RegExp(`^the address resolves to [^,]+, an? ${kind} address$`));
  });

  it('refuses an IPv4-compatible address even when it carries a public address', () => {
    expect(nonPublicAddressReason('::808:808')).toBe('the address resolves to ::808:808 (8.8.8.8), an IPv4-compatible IPv6 address (deprecated)');
  });

  it('words the reason for a chat user', () => {
    expect(nonPublicAddressReason('10.0.0.5')).toBe('the address resolves to 10.0.0.5, a private address');
    expect(nonPublicAddressReason('::ffff:192.168.0.1')).toBe('the address resolves to 192.168.0.1, a private address');
  });

  it.each(['93.184.215.14', '1.1.1.1', '172.32.0.1', '100.128.0.1', '2606:4700::1111', '::ffff:8.8.8.8'])('allows %s', (address) => {
    expect(nonPublicAddressReason(address)).toBeUndefined();
  });
});

describe('guardedLookup', () => {
  const answers: Record<string, LookupAddress[]> = {
    'public.test': [{ address: '93.184.215.14', family: 4 }, { address: '2606:2800::1', family: 6 }],
    'mixed.test': [{ address: '93.184.215.14', family: 4 }, { address: '10.1.2.3', family: 4 }],
  };
  const lookup = guardedLookup(async (hostname) => answers[hostname] ?? [], nonPublicAddressReason, (reason) => new FeedError(reason));
  const call = (hostname: string, options: { all?: boolean; family?: number }) =>
    new Promise<{ error: Error | null; address: unknown; family?: number }>((resolve) =>
      lookup(hostname, options, (error, address, family) => resolve({ error, address, family })),
    );

  it('answers in both of the shapes node:net asks for', async () => {
    expect(await call('public.test', { all: true })).toMatchObject({ error: null, address: answers['public.test'] });
    expect(await call('public.test', {})).toMatchObject({ error: null, address: '93.184.215.14', family: 4 });
    expect(await call('public.test', { family: 6 })).toMatchObject({ error: null, address: '2606:2800::1', family: 6 });
  });

  it('refuses a name when any of its addresses is not public', async () => {
    const { error } = await call('mixed.test', { all: true });
    expect(error).toBeInstanceOf(FeedError);
    expect(error?.message).toBe('the address resolves to 10.1.2.3, a private address');
  });

  it('reports a name with no address as not found', async () => {
    const { error } = await call('nowhere.test', {});
    expect((error as NodeJS.ErrnoException).code).toBe('ENOTFOUND');
  });
});

describe('cidrRefusal (federation\'s ip_range_blacklist)', () => {
  const refuse = cidrRefusal(DEFAULT_IP_RANGE_BLACKLIST, ['10.5.0.0/16']);
  it.each(['127.0.0.1', '10.0.0.1', '192.168.1.1', '169.254.169.254', '::1', 'fe80::1', 'fd00::1', '::ffff:10.0.0.1', '::7f00:1', '0.0.0.0', '::'])('refuses %s', (address) => {
    expect(refuse(address)).toBeDefined();
  });
  it.each(['93.184.215.14', '2606:4700::1111', '::ffff:8.8.8.8', '10.5.1.2'])('allows %s (public, or whitelisted)', (address) => {
    expect(refuse(address)).toBeUndefined();
  });
  it('says which range refused it, and finds bad ranges', () => {
    expect(refuse('10.0.0.1')).toBe('the address 10.0.0.1 is in the blacklisted range 10.0.0.0/8');
    expect(invalidRanges(['10.0.0.0/8', 'nope', '300.0.0.0/8'])).toEqual(['nope', '300.0.0.0/8']);
    expect(cidrRefusal([])('127.0.0.1')).toBeUndefined();
  });
});
