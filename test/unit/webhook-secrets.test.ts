import { createHmac } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { checkSignature, generateSecret, openSecret, sealSecret } from '../../src/bridge/webhooks/secrets.js';

const hmac = (secret: string, body: string | Buffer, algorithm = 'sha256') => createHmac(algorithm, secret).update(body).digest('hex');

describe('sealed secrets', () => {
  it('open with their own webhook id only, and not when moved to another row or tampered with', () => {
    const secret = generateSecret();
    expect(secret).toMatch(/^[A-Za-z0-9_-]{43}$/);
    const sealed = sealSecret('the-webhook-id', 'hash-a', secret);
    expect(sealed).not.toContain(secret);
    expect(openSecret('the-webhook-id', 'hash-a', sealed)).toBe(secret);
    expect(openSecret('another-id', 'hash-a', sealed)).toBeUndefined();
    expect(openSecret('the-webhook-id', 'hash-b', sealed)).toBeUndefined();
    const [version, iv, data, tag] = sealed.split('.');
    const flipped = Buffer.from(data!, 'base64url');
    flipped[0] = flipped[0]! ^ 1;
    expect(openSecret('the-webhook-id', 'hash-a', [version, iv, flipped.toString('base64url'), tag].join('.'))).toBeUndefined();
    expect(openSecret('the-webhook-id', 'hash-a', 'garbage')).toBeUndefined();
    // Two seals of one secret differ (fresh IVs).
    expect(sealSecret('the-webhook-id', 'hash-a', secret)).not.toBe(sealed);
  });
});

describe('checkSignature', () => {
  const secret = "It's a Secret to Everybody";
  const body = Buffer.from('Hello, World!');

  it("accepts GitHub's documented example signature", () => {
    const headers = { 'x-hub-signature-256': 'sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17' };
    expect(checkSignature(secret, headers, body, () => undefined)).toEqual({ ok: true, scheme: 'X-Hub-Signature-256' });
  });

  it.each([
    ['x-hub-signature-256', `sha256=${hmac(secret, body)}`],
    ['x-hub-signature-256', `SHA256=${hmac(secret, body).toUpperCase()}`],
    ['x-gitea-signature', hmac(secret, body)],
    ['x-forgejo-signature', hmac(secret, body)],
    ['x-gogs-signature', hmac(secret, body)],
    ['sentry-hook-signature', hmac(secret, body)],
    ['x-gitlab-token', secret],
    ['authorization', `Bearer ${secret}`],
    ['authorization', `Basic ${Buffer.from(`grafana:${secret}`).toString('base64')}`],
    ['x-hub-signature', `sha1=${hmac(secret, body, 'sha1')}`],
  ])('accepts %s', (name, value) => {
    expect(checkSignature(secret, { [name]: value }, body, () => undefined).ok).toBe(true);
  });

  it.each([
    ['x-hub-signature-256', `sha256=${hmac('wrong', body)}`],
    ['x-hub-signature-256', hmac(secret, body)],
    ['x-gitea-signature', hmac(secret, 'other body')],
    ['sentry-hook-signature', 'zz'],
    ['x-gitlab-token', `${secret} `],
    ['authorization', `Bearer ${secret}x`],
    ['authorization', `Token ${secret}`],
    ['x-hub-signature', `sha256=${hmac(secret, body)}`],
  ])('refuses a wrong %s', (name, value) => {
    expect(checkSignature(secret, { [name]: value }, body, () => undefined)).toMatchObject({ ok: false, reason: 'mismatch' });
  });

  it('says "missing" when the request carries no proof at all', () => {
    expect(checkSignature(secret, { 'content-type': 'application/json', 'x-github-event': 'push' }, body, () => undefined)).toEqual({ ok: false, reason: 'missing' });
    expect(checkSignature(secret, { 'x-hub-signature-256': '' }, body, () => undefined)).toEqual({ ok: false, reason: 'missing' });
  });

  it("accepts Sentry's signature over the re-serialized body, as its own examples compute it", () => {
    const parsed = { action: 'created', data: { issue: { id: '1' } } };
    const spaced = Buffer.from(JSON.stringify(parsed, null, 2));
    const headers = { 'sentry-hook-signature': hmac(secret, JSON.stringify(parsed)) };
    expect(checkSignature(secret, headers, spaced, () => parsed).ok).toBe(true);
    expect(checkSignature(secret, headers, spaced, () => ({ ...parsed, action: 'resolved' })).ok).toBe(false);
  });
});
