/**
 * The spec's cryptographic test vectors (appendices, "Cryptographic Test Vectors" and "Canonical
 * JSON" examples): if these pass, our hashes and signatures are the bytes every other server
 * computes.
 */
import { describe, expect, it } from 'vitest';
import { canonicalJson, canonicalJsonProblem, compareCodePoints, NotCanonicalJsonError } from '../../src/core/canonical-json.js';
import { decodeBase64, ed25519PublicKey, ed25519Signer, hasValidSignature, signJson, unpaddedBase64 } from '../../src/core/signed-json.js';
import { contentHash, finishPdu, hasValidContentHash, signedForm } from '../../src/rooms/pdu.js';
import { redactPdu } from '../../src/rooms/redaction.js';
import { knownRoomVersion } from '../../src/rooms/room-versions.js';

const SEED = decodeBase64('YJDBA9Xnr2sVqXD9Vj7XVUnmFZcZrlw8Md7kMW+3XA1')!;
const signer = ed25519Signer('domain', '1', SEED);

describe('unpadded base64', () => {
  it.each([['', ''], ['f', 'Zg'], ['fo', 'Zm8'], ['foo', 'Zm9v'], ['foob', 'Zm9vYg'], ['fooba', 'Zm9vYmE'], ['foobar', 'Zm9vYmFy']])('encodes %j as %j', (text, encoded) => {
    expect(unpaddedBase64(Buffer.from(text))).toBe(encoded);
    expect(decodeBase64(encoded)?.toString()).toBe(text);
  });
});

describe('canonical JSON', () => {
  it.each([
    [{}, '{}'],
    [{ one: 1, two: 'Two' }, '{"one":1,"two":"Two"}'],
    [{ b: '2', a: '1' }, '{"a":"1","b":"2"}'],
    [
      { auth: { success: true, mxid: '@john.doe:example.com', profile: { display_name: 'John Doe', three_pids: [{ medium: 'email', address: 'john.doe@example.org' }, { medium: 'msisdn', address: '123456789' }] } } },
      '{"auth":{"mxid":"@john.doe:example.com","profile":{"display_name":"John Doe","three_pids":[{"address":"john.doe@example.org","medium":"email"},{"address":"123456789","medium":"msisdn"}]},"success":true}}',
    ],
    [{ a: '日本語' }, '{"a":"日本語"}'],
    [{ 本: 2, 日: 1 }, '{"日":1,"本":2}'],
    [JSON.parse('{"a": "\\u65E5"}'), '{"a":"日"}'],
    [{ a: null }, '{"a":null}'],
    [{ a: -0, b: 1e10 }, '{"a":0,"b":10000000000}'],
  ])('encodes the spec example %#', (value, expected) => {
    expect(canonicalJson(value)).toBe(expected);
  });

  it('escapes only what the grammar escapes', () => {
    expect(canonicalJson({ s: '"\\\b\f\n\r\t\u0001\u001f\u007f/é' })).toBe('{"s":"\\"\\\\\\b\\f\\n\\r\\t\\u0001\\u001f\u007f/é"}');
  });

  it('orders keys by code point, not by UTF-16 unit', () => {
    // U+FF01 sorts before U+1F600 by code point, after it by UTF-16 code unit.
    expect(canonicalJson({ '\u{1F600}': 1, '\uFF01': 2, a: 3 })).toBe('{"a":3,"！":2,"😀":1}');
    expect(compareCodePoints('\uE000', '\u{10000}')).toBeLessThan(0);
    expect(compareCodePoints('ab', 'a')).toBeGreaterThan(0);
  });

  it('refuses floats and integers out of range, unless lenient', () => {
    expect(() => canonicalJson({ a: 1.5 })).toThrow(NotCanonicalJsonError);
    expect(() => canonicalJson({ a: 2 ** 53 })).toThrow(NotCanonicalJsonError);
    expect(canonicalJson({ a: 2 ** 53 - 1, b: -(2 ** 53 - 1) })).toBe('{"a":9007199254740991,"b":-9007199254740991}');
    expect(canonicalJson({ a: 1.5 }, { lenient: true })).toBe('{"a":1.5}');
    expect(canonicalJsonProblem({ a: [{ b: 0.5 }] })).toBe('a[0].b is not an integer (floats are not allowed)');
    expect(canonicalJsonProblem({ a: [{ b: 1 }] })).toBeUndefined();
  });
});

describe('signing JSON', () => {
  it('signs an empty object as the spec says', () => {
    expect(signJson({}, signer)).toEqual({
      signatures: { domain: { 'ed25519:1': 'K8280/U9SSy9IVtjBuVeLr+HpOB4BQFWbg+UZaADMtTdGYI7Geitb76LTrr5QV/7Xg4ahLwYGYZzuHGZKM5ZAQ' } },
    });
  });

  it('signs an object with data as the spec says, and verifies it', () => {
    const signed = signJson({ one: 1, two: 'Two' }, signer);
    expect(signed.signatures.domain!['ed25519:1']).toBe('KqmLSbO39/Bzb0QIYE82zqLwsA+PDzYIpIRA2sRQ4sL53+sN6/fpNSoqE7BP7vBZhG6kYdD13EIMJpvhJI+6Bw');
    const keys = new Map([['ed25519:1', ed25519PublicKey(signer.publicKey)!]]);
    expect(hasValidSignature(signed, 'domain', keys)).toBe(true);
    expect(hasValidSignature({ ...signed, two: 'Three' }, 'domain', keys)).toBe(false);
    expect(hasValidSignature(signed, 'other', keys)).toBe(false);
    expect(hasValidSignature(signed, 'domain', new Map())).toBe(false);
  });
});

describe('signing events', () => {
  // The vectors predate room version 3 (they carry `origin` and an event id); the redaction
  // algorithm of versions 3-10 keeps both, and the hashing is the same in every version.
  const v10 = knownRoomVersion('10');

  function signEvent(event: Record<string, unknown>): Record<string, unknown> {
    const { unsigned, signatures: _signatures, hashes: _hashes, ...rest } = event;
    const hashed = { ...rest, hashes: { sha256: contentHash(rest, v10) } };
    const signed = signJson(signedForm(hashed, v10), signer);
    return { ...hashed, signatures: signed.signatures, ...(unsigned ? { unsigned } : {}) };
  }

  it('signs a minimal event as the spec says', () => {
    const event = {
      room_id: '!x:domain', sender: '@a:domain', origin: 'domain', origin_server_ts: 1000000, signatures: {}, hashes: {},
      type: 'X', content: {}, prev_events: [], auth_events: [], depth: 3, unsigned: { age_ts: 1000000 },
    };
    const signed = signEvent(event);
    expect(signed.hashes).toEqual({ sha256: '5jM4wQpv6lnBo7CLIghJuHdW+s2CMBJPUOGOC89ncos' });
    expect(signed.signatures).toEqual({ domain: { 'ed25519:1': 'KxwGjPSDEtvnFgU00fwFz+l6d2pJM6XBIaMEn81SXPTRl16AqLAYqfIReFGZlHi5KLjAWbOoMszkwsQma+lYAg' } });
    expect(signed.unsigned).toEqual({ age_ts: 1000000 });
  });

  it('signs an event with redactable content as the spec says', () => {
    const event = {
      content: { body: 'Here is the message content' }, event_id: '$0:domain', origin: 'domain', origin_server_ts: 1000000,
      type: 'm.room.message', room_id: '!r:domain', sender: '@u:domain', signatures: {}, unsigned: { age_ts: 1000000 },
    };
    const signed = signEvent(event);
    expect(signed.hashes).toEqual({ sha256: 'onLKD1bGljeBWQhWZ1kaP9SorVmRQNdN5aM2JYU2n/g' });
    expect(signed.signatures).toEqual({ domain: { 'ed25519:1': 'Wm+VzmOUOz08Ds+0NTWb1d4CZrVsJSikkeRxh6aCcUwu6pNC78FunoD7KNWzqFn241eYHYMGCA5McEiVPdhzBA' } });
    expect(hasValidContentHash(signed, v10)).toBe(true);
    // A redacted copy keeps its signature valid but fails the content hash.
    const redacted = redactPdu(signed, '10');
    const keys = new Map([['ed25519:1', ed25519PublicKey(signer.publicKey)!]]);
    expect(hasValidSignature(redacted, 'domain', keys)).toBe(true);
    expect(hasValidContentHash(redacted, v10)).toBe(false);
  });

  it('finishes local PDUs whose id is the reference hash, url-safe from v4, standard in v3', () => {
    const draft = { room_id: '!r:domain', sender: '@u:domain', type: 'm.room.message', content: { body: 'hi' }, origin_server_ts: 1, depth: 2, prev_events: ['$p'], auth_events: ['$a'] };
    const v4 = finishPdu(draft, knownRoomVersion('4'), signer);
    expect(v4.eventId).toMatch(/^\$[A-Za-z0-9_-]{43}$/);
    const v3 = finishPdu(draft, knownRoomVersion('3'), signer);
    expect(v3.eventId).toMatch(/^\$[A-Za-z0-9+/]{43}$/);
    expect(v3.eventId.slice(1).replace(/\+/g, '-').replace(/\//g, '_')).toBe(v4.eventId.slice(1));
    const keys = new Map([['ed25519:1', ed25519PublicKey(signer.publicKey)!]]);
    expect(hasValidSignature(signedForm(v4.pdu, knownRoomVersion('4')), 'domain', keys)).toBe(true);
    expect(hasValidContentHash(v4.pdu, knownRoomVersion('4'))).toBe(true);
  });
});
