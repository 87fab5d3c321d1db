/**
 * Server keys and signed requests between two servers over real TLS: each publishes its key
 * listing, fetches and checks the other's, and accepts only requests signed by a key it can check.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ed25519PublicKey, hasValidSignature } from '../../src/core/signed-json.js';
import { startFederation, type Federation } from '../support/federation.js';

let federation: Federation;
beforeAll(async () => {
  federation = await startFederation(['a.test', 'b.test']);
});
afterAll(() => federation.close());

const server = (name: string) => federation.servers.get(name)!;

describe('server keys', () => {
  it('publishes a signed listing of the key it signs with', async () => {
    const a = server('a.test');
    const res = await a.http.get('/_matrix/key/v2/server');
    expect(res.status).toBe(200);
    const { signer } = a.services;
    expect(res.body).toMatchObject({ server_name: 'a.test', verify_keys: { [signer.keyId]: { key: signer.publicKey } }, old_verify_keys: {} });
    expect(res.body.valid_until_ts).toBeGreaterThan(Date.now());
    expect(hasValidSignature(res.body, 'a.test', new Map([[signer.keyId, ed25519PublicKey(signer.publicKey)!]]))).toBe(true);
    expect((await a.http.get('/_matrix/federation/v1/version')).body.server.name).toBe('bot-homeserver');
  });

  it('fetches another server\'s keys over TLS, checks them, and serves them as a notary', async () => {
    const a = server('a.test');
    const b = server('b.test');
    const keys = await a.services.federation.keyRing.verifyKeys('b.test', [b.services.signer.keyId], Date.now());
    expect(keys.get(b.services.signer.keyId)).toBeDefined();
    // Kept in the database: another instance on the same database knows them without asking.
    expect((await a.services.storage.federation.serverKeys('b.test')).map((row) => row.key_id)).toEqual([b.services.signer.keyId]);
    const notary = await a.http.post('/_matrix/key/v2/query').send({ server_keys: { 'b.test': {} } });
    expect(notary.status).toBe(200);
    const [listing] = notary.body.server_keys;
    expect(listing.server_name).toBe('b.test');
    expect(Object.keys(listing.signatures).sort()).toEqual(['a.test', 'b.test']);
  });

  it('accepts requests signed by the origin\'s key and refuses the rest', async () => {
    const a = server('a.test');
    const b = server('b.test');
    const signed = { method: 'GET', path: '/_matrix/federation/v1/query/profile?user_id=%40x%3Aa.test' };
    // Signed properly: b checks a's signature (fetching a's keys) and answers.
    const origin = await b.services.federation.authenticate({
      method: 'GET',
      uri: signed.path,
      authorization: xMatrixFrom(a, 'b.test', signed.method, signed.path),
      body: undefined,
    });
    expect(origin).toBe('a.test');
    for (const authorization of [
      undefined,
      'Bearer nope',
      xMatrixFrom(a, 'c.test', signed.method, signed.path),
      xMatrixFrom(a, 'b.test', 'PUT', signed.path),
      xMatrixFrom(a, 'b.test', signed.method, '/other'),
      xMatrixFrom(a, 'b.test', signed.method, signed.path).replace(/sig="[^"]+"/, `sig="${'A'.repeat(86)}"`),
    ]) {
      await expect(b.services.federation.authenticate({ method: 'GET', uri: signed.path, authorization, body: undefined })).rejects.toMatchObject({ errcode: 'M_UNAUTHORIZED' });
    }
  });
});

/** The X-Matrix header `from` would send for a request to `destination`. */
function xMatrixFrom(from: ReturnType<typeof server>, destination: string, method: string, uri: string): string {
  const client = from.services.federation.client as unknown as { authorization(destination: string, request: { method: string; path: string }): string };
  return client.authorization(destination, { method, path: uri });
}
