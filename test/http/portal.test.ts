/**
 * The bot portal over HTTP: off unless configured, its headers, cookies and CSRF checks, limits,
 * and the operator's side (owners, grants, the audit log) in the admin API. The sign-in itself,
 * against a real provider in a real browser, is test/portal/browser.test.ts.
 */
import { sign } from '@fastify/cookie';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, test } from 'vitest';
import { capturingLogger } from '../support/logs.js';
import { sharedSecretMac } from '../../src/users/registration-service.js';
import { createUser, startTestHomeserver, type TestHomeserver } from '../support/homeserver.js';

const PORTAL = '/_bot_homeserver/portal';

/** A provider nobody answers at: the portal reaches it only when someone signs in. */
function portalConfig(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    portal: {
      people_server_name: 'example.org',
      request_access_url: 'https://tickets.example.org/new',
      creator_attribute_requirements: [{ attribute: 'groups', value: 'bot-creators' }],
      oidc_providers: [{ idp_id: 'corp', idp_name: 'Corp', issuer: 'http://127.0.0.1:9/', client_id: 'portal', client_secret: 'secret', skip_verification: true }],
      ...overrides,
    },
  };
}

let hs: TestHomeserver | undefined;
afterEach(async () => {
  await hs?.close();
  hs = undefined;
});

/** A signed-in person's cookie header, made as the callback would (the provider is not needed here). */
async function signedIn(server: TestHomeserver, person = '@alice:example.org', attributesGrant = true): Promise<string> {
  const portal = server.services.portal!;
  const id = await portal.sessions.create({ person, displayName: null, idp: 'corp', sub: person, sid: 'sid-1', idToken: undefined, attributesGrant });
  return `bhs_portal_session=${encodeURIComponent(sign(id, await portal.cookieSecret()))}`;
}

/** The CSRF token of a page and the CSRF cookie that goes with it. */
async function formToken(server: TestHomeserver, cookie: string): Promise<{ token: string; cookie: string }> {
  const page = await server.http.get(`${PORTAL}/bots/new`).set('Cookie', cookie);
  expect(page.status).toBe(200);
  const token = /name="_csrf" value="([^"]+)"/.exec(page.text)?.[1];
  const csrfCookie = (page.headers['set-cookie'] as unknown as string[]).find((c) => c.startsWith('bhs_portal_csrf='))!.split(';')[0]!;
  return { token: token!, cookie: `${cookie}; ${csrfCookie}` };
}

describe('the bot portal over HTTP', () => {
  test('is off unless configured', async () => {
    hs = await startTestHomeserver();
    const res = await hs.http.get(`${PORTAL}/`);
    expect(res.status).toBe(404);
    expect(res.body.errcode).toBe('M_UNRECOGNIZED');
  });

  test('answers with strict security headers and a content security policy; the Matrix API keeps its own', async () => {
    hs = await startTestHomeserver(portalConfig());
    const res = await hs.http.get(`${PORTAL}/`);
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toBe('text/html; charset=utf-8');
    const csp = res.headers['content-security-policy'] as string;
    for (const directive of ["default-src 'none'", "script-src 'self'", "style-src 'self'", "form-action 'self'", "frame-ancestors 'none'", "base-uri 'none'"]) expect(csp).toContain(directive);
    expect(csp).not.toContain('unsafe-');
    expect(res.headers['x-content-type-options']).toBe('nosniff');
    expect(res.headers['referrer-policy']).toBe('no-referrer');
    expect(res.headers['strict-transport-security']).toMatch(/max-age=/);
    expect(res.headers['cache-control']).toBe('no-cache, no-store, must-revalidate');
    expect(res.text).toContain('Sign in with Corp');
    const api = await hs.http.get('/_matrix/client/versions');
    expect(api.headers['content-security-policy']).toBeUndefined();
  });

  test('at an https:// public_baseurl its cookies are Secure even when a request came in plain HTTP', async () => {
    hs = await startTestHomeserver({ ...portalConfig(), public_baseurl: 'https://bots.example.org/' });
    const cookie = await signedIn(hs);
    const plain = await hs.http.get(`${PORTAL}/`).set('Cookie', cookie);
    const csrf = (plain.headers['set-cookie'] as unknown as string[]).find((c) => c.startsWith('bhs_portal_csrf='))!;
    expect(csrf).toMatch(/; Secure/);
  });

  test('sets its cookies signed, HttpOnly, SameSite=Strict, and (at an http:// address) Secure only over HTTPS (x_forwarded respected)', async () => {
    hs = await startTestHomeserver({ ...portalConfig(), public_baseurl: 'http://bots.lab.test/', listen: { x_forwarded: true } });
    const cookie = await signedIn(hs);
    const plain = await hs.http.get(`${PORTAL}/`).set('Cookie', cookie);
    const csrf = (plain.headers['set-cookie'] as unknown as string[]).find((c) => c.startsWith('bhs_portal_csrf='))!;
    expect(csrf).toMatch(/; HttpOnly/);
    expect(csrf).toMatch(/; SameSite=Strict/);
    expect(csrf).toMatch(/; Path=\/_bot_homeserver\/portal/);
    expect(csrf).not.toMatch(/; Secure/);
    const viaProxy = await hs.http.get(`${PORTAL}/`).set('Cookie', cookie).set('X-Forwarded-Proto', 'https');
    expect((viaProxy.headers['set-cookie'] as unknown as string[]).find((c) => c.startsWith('bhs_portal_csrf='))).toMatch(/; Secure/);
    // A session cookie whose signature is wrong is no session.
    const forged = await hs.http.get(`${PORTAL}/`).set('Cookie', cookie.replace(/.$/, (c) => (c === 'A' ? 'B' : 'A')));
    expect(forged.text).toContain('Your session has ended');
  });

  test('refuses a form without the CSRF token, or with another session’s; makes the bot with it, and never logs the secret', async () => {
    const { logger, lines } = capturingLogger('trace');
    hs = await startTestHomeserver(portalConfig(), { logger });
    const cookie = await signedIn(hs);
    const form = { username: 'hello-bot', description: 'Says hello.' };
    const missing = await hs.http.post(`${PORTAL}/bots`).type('form').set('Cookie', cookie).send(form);
    expect(missing.status).toBe(403);
    expect(missing.text).toContain('This form has expired');
    const other = await formToken(hs, await signedIn(hs, '@alice:example.org'));
    const mine = await formToken(hs, cookie);
    const foreign = await hs.http.post(`${PORTAL}/bots`).type('form').set('Cookie', mine.cookie).send({ ...form, _csrf: other.token });
    expect(foreign.status).toBe(403);
    expect(await hs.services.accounts.getUser('@hello-bot:test.local')).toBeUndefined();

    const made = await hs.http.post(`${PORTAL}/bots`).type('form').set('Cookie', mine.cookie).send({ ...form, _csrf: mine.token });
    expect(made.status).toBe(200);
    const secret = /id="secret" type="text" readonly value="([^"]+)"/.exec(made.text)?.[1];
    expect(secret).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(lines.join('')).not.toContain(secret!);
    const stored = await hs.services.accounts.getUser('@hello-bot:test.local');
    expect(stored?.password_hash).toMatch(/^\$argon2id\$/);
    expect(await hs.services.bots.ownerOf('@hello-bot:test.local')).toBe('@alice:example.org');
  });

  test('holds each person to max_bots_per_owner, and the username rules and reserved names', async () => {
    hs = await startTestHomeserver(portalConfig({ max_bots_per_owner: 1, reserved_usernames: ['payroll'] }));
    const { token, cookie } = await formToken(hs, await signedIn(hs));
    const post = (username: string) => hs!.http.post(`${PORTAL}/bots`).type('form').set('Cookie', cookie).send({ username, description: 'x', _csrf: token });
    const reserved = await post('payroll');
    expect(reserved.status).toBe(400);
    expect(reserved.text).toContain('This user name is reserved');
    expect((await post('_under')).text).toContain('This user name is not allowed here');
    expect((await post('first-bot')).status).toBe(200);
    const second = await post('second-bot');
    expect(second.status).toBe(400);
    expect(second.text).toContain('the most one person may have');
    expect(await hs.services.accounts.getUser('@second-bot:test.local')).toBeUndefined();
  });

  test('max_bots_per_owner holds against many creations sent at once (the count and the insert are one step)', async () => {
    hs = await startTestHomeserver(portalConfig({ max_bots_per_owner: 2 }));
    const { token, cookie } = await formToken(hs, await signedIn(hs));
    const names = Array.from({ length: 8 }, (_, i) => `racing-bot-${i}`);
    const answers = await Promise.all(names.map((username) => hs!.http.post(`${PORTAL}/bots`).type('form').set('Cookie', cookie).send({ username, description: 'x', _csrf: token })));
    expect(answers.filter((res) => res.status === 200)).toHaveLength(2);
    for (const res of answers.filter((r) => r.status !== 200)) {
      expect(res.status).toBe(400);
      expect(res.text).toContain('the most one person may have');
    }
    expect(await hs.services.bots.countActiveBotsOf('@alice:example.org')).toBe(2);
    const made = await Promise.all(names.map((name) => hs!.services.accounts.getUser(`@${name}:test.local`)));
    expect(made.filter(Boolean)).toHaveLength(2);
    expect((await hs.services.bots.auditLog({ limit: 20, actor: '@alice:example.org' })).map((e) => e.action)).toEqual(['create', 'create']);
  }, 60_000);

  test('a bot cannot take the user name of a person the portal knows (signed in, granted, owning bots)', async () => {
    hs = await startTestHomeserver(portalConfig());
    await hs.services.bots.grant('@carol:example.org', 'cli:operator');
    await hs.services.bots.bindIdentity('corp', 'subject-of-dave', '@dave:example.org');
    const { token, cookie } = await formToken(hs, await signedIn(hs));
    const post = (username: string) => hs!.http.post(`${PORTAL}/bots`).type('form').set('Cookie', cookie).send({ username, description: 'x', _csrf: token });
    for (const name of ['carol', 'dave']) {
      const res = await post(name);
      expect(res.status).toBe(400);
      expect(res.text).toContain('This is the user name of a person');
      expect(await hs.services.accounts.getUser(`@${name}:test.local`)).toBeUndefined();
    }
    expect((await post('carols-helper')).status).toBe(200);
    // Now alice owns a bot, so her own name is a person's too.
    expect((await post('alice')).text).toContain('This is the user name of a person');
  });

  test('one person cannot see, rotate or deactivate another person’s bot (same answer as no such bot)', async () => {
    hs = await startTestHomeserver(portalConfig());
    const alice = await formToken(hs, await signedIn(hs));
    expect((await hs.http.post(`${PORTAL}/bots`).type('form').set('Cookie', alice.cookie).send({ username: 'alices-bot', description: 'x', _csrf: alice.token })).status).toBe(200);
    const mallory = await formToken(hs, await signedIn(hs, '@mallory:example.org'));
    const pages = [
      await hs.http.get(`${PORTAL}/bots/alices-bot`).set('Cookie', mallory.cookie),
      await hs.http.post(`${PORTAL}/bots/alices-bot/rotate`).type('form').set('Cookie', mallory.cookie).send({ _csrf: mallory.token }),
      await hs.http.post(`${PORTAL}/bots/alices-bot/deactivate`).type('form').set('Cookie', mallory.cookie).send({ _csrf: mallory.token, confirm: 'yes' }),
      await hs.http.get(`${PORTAL}/bots/no-such-bot`).set('Cookie', mallory.cookie),
    ];
    for (const page of pages) {
      expect(page.status).toBe(404);
      expect(page.text).toContain('There is no such bot among yours.');
    }
    expect((await hs.services.accounts.getUser('@alices-bot:test.local'))?.deactivated).toBe(0);
    expect((await hs.services.bots.auditLog({ limit: 10, target: '@alices-bot:test.local' })).map((e) => e.action)).toEqual(['create']);
  });

  test('a person without the right is refused creation even by a hand-made post, and shown where to ask', async () => {
    hs = await startTestHomeserver(portalConfig());
    const cookie = await signedIn(hs, '@bob:example.org', false);
    const home = await hs.http.get(`${PORTAL}/`).set('Cookie', cookie);
    expect(home.text).toContain("You can't create bots yet");
    expect(home.text).toContain('href="https://tickets.example.org/new"');
    const token = /name="_csrf" value="([^"]+)"/.exec(home.text)![1]!;
    const csrfCookie = (home.headers['set-cookie'] as unknown as string[]).find((c) => c.startsWith('bhs_portal_csrf='))!.split(';')[0]!;
    const res = await hs.http.post(`${PORTAL}/bots`).type('form').set('Cookie', `${cookie}; ${csrfCookie}`).send({ username: 'sneaky-bot', description: 'x', _csrf: token });
    expect(res.status).toBe(403);
    expect(await hs.services.accounts.getUser('@sneaky-bot:test.local')).toBeUndefined();
  });

  test('limits sign-in attempts per address; a provider that cannot be reached is said plainly', async () => {
    hs = await startTestHomeserver({ ...portalConfig({ rc_sign_in: { per_second: 0.001, burst_count: 2 } }), ratelimiting_enabled: true });
    expect((await hs.http.get(`${PORTAL}/sign-in/corp`)).status).toBe(502);
    const second = await hs.http.get(`${PORTAL}/sign-in/corp`);
    expect(second.status).toBe(502);
    expect(second.text).toContain('We could not reach the sign-in service');
    const third = await hs.http.get(`${PORTAL}/sign-in/corp`);
    expect(third.status).toBe(429);
    expect(third.headers['retry-after']).toBeDefined();
  });

  test('a session survives a restart (sessions and the cookie secret are in the database)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'bhs-portal-'));
    try {
      // On PostgreSQL the test's schema persists the same way; SQLite needs a file for it.
      const database = process.env.BHS_TEST_POSTGRES ? {} : { database: { path: join(dir, 'homeserver.db') } };
      hs = await startTestHomeserver({ ...portalConfig(), ...database });
      const cookie = await signedIn(hs);
      const config = hs.config;
      await hs.app.close();
      const again = await startTestHomeserver({ ...portalConfig(), database: config.database });
      hs = again;
      const page = await again.http.get(`${PORTAL}/`).set('Cookie', cookie);
      expect(page.text).toContain('Your bots');
      expect(page.text).toContain('@alice:example.org');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('a session ends at its lifetime even when used all along, and after the idle timeout (on the server)', async () => {
    hs = await startTestHomeserver(portalConfig({ session_lifetime: '1h', session_idle_timeout: '20m' }));
    const cookie = await signedIn(hs);
    for (let minutes = 0; minutes < 55; minutes += 15) {
      expect((await hs.http.get(`${PORTAL}/`).set('Cookie', cookie)).text).toContain('Your bots');
      hs.clock.advance(15 * 60_000);
    }
    // 60 minutes after sign-in, used 15 minutes ago: past its lifetime.
    expect((await hs.http.get(`${PORTAL}/`).set('Cookie', cookie)).text).toContain('Your session has ended');
    const idle = await signedIn(hs);
    hs.clock.advance(20 * 60_000);
    expect((await hs.http.get(`${PORTAL}/`).set('Cookie', idle)).text).toContain('Your session has ended');
  });

  test('a grant revoked by an operator holds at once in a session already open (no create, no new secret)', async () => {
    hs = await startTestHomeserver(portalConfig());
    await hs.services.bots.grant('@bob:example.org', 'cli:operator');
    const { token, cookie } = await formToken(hs, await signedIn(hs, '@bob:example.org', false));
    const create = (username: string) => hs!.http.post(`${PORTAL}/bots`).type('form').set('Cookie', cookie).send({ username, description: 'x', _csrf: token });
    expect((await create('granted-bot')).status).toBe(200);
    await hs.services.bots.revoke('@bob:example.org', 'cli:operator');
    expect((await create('revoked-bot')).status).toBe(403);
    expect(await hs.services.accounts.getUser('@revoked-bot:test.local')).toBeUndefined();
    const rotate = await hs.http.post(`${PORTAL}/bots/granted-bot/rotate`).type('form').set('Cookie', cookie).send({ _csrf: token });
    expect(rotate.status).toBe(403);
    expect(rotate.text).toContain('no longer have the right');
    // Deactivating stays possible.
    expect((await hs.http.post(`${PORTAL}/bots/granted-bot/deactivate`).type('form').set('Cookie', cookie).send({ _csrf: token, confirm: 'yes' })).status).toBe(303);
  });

  test('a new secret is answered with no-store and never logged; the old one and its sessions stop', async () => {
    const { logger, lines } = capturingLogger('trace');
    hs = await startTestHomeserver(portalConfig(), { logger });
    const { token, cookie } = await formToken(hs, await signedIn(hs));
    const made = await hs.http.post(`${PORTAL}/bots`).type('form').set('Cookie', cookie).send({ username: 'turning-bot', description: 'x', _csrf: token });
    expect(made.headers['cache-control']).toBe('no-cache, no-store, must-revalidate');
    const first = /id="secret" type="text" readonly value="([^"]+)"/.exec(made.text)![1]!;
    const session = await hs.http.post('/_matrix/client/v3/login').send({ type: 'm.login.password', identifier: { type: 'm.id.user', user: 'turning-bot' }, password: first });
    const rotated = await hs.http.post(`${PORTAL}/bots/turning-bot/rotate`).type('form').set('Cookie', cookie).send({ _csrf: token });
    expect(rotated.status).toBe(200);
    expect(rotated.headers['cache-control']).toBe('no-cache, no-store, must-revalidate');
    const second = /id="secret" type="text" readonly value="([^"]+)"/.exec(rotated.text)![1]!;
    expect(second).not.toBe(first);
    expect((await hs.http.get('/_matrix/client/v3/account/whoami').auth(session.body.access_token, { type: 'bearer' })).status).toBe(401);
    expect((await hs.http.get('/_matrix/client/v3/devices').auth(session.body.access_token, { type: 'bearer' })).status).toBe(401);
    expect(await hs.services.storage.sessions.listDevices('@turning-bot:test.local')).toEqual([]);
    const log = lines.join('');
    expect(log).not.toContain(first);
    expect(log).not.toContain(second);
    expect(log).not.toContain(cookie.split('=')[1]!.slice(0, 20));
  });

  test('an unexpected failure is a plain page: no stack, no message from inside', async () => {
    hs = await startTestHomeserver(portalConfig());
    const cookie = await signedIn(hs);
    hs.services.portal!.botsOf = async () => {
      throw new Error('relation "bot_owners" does not exist at /srv/secret/path.ts:12');
    };
    const res = await hs.http.get(`${PORTAL}/`).set('Cookie', cookie);
    expect(res.status).toBe(500);
    expect(res.text).toContain('Something went wrong on our side');
    expect(res.text).not.toContain('bot_owners');
    expect(res.text).not.toContain('secret/path');
    expect(res.text).not.toMatch(/at .*\.ts:\d+/);
  });

  test('a callback without its sign-in cookie, or a bad back-channel logout token, is refused', async () => {
    hs = await startTestHomeserver(portalConfig());
    const callback = await hs.http.get(`${PORTAL}/callback?code=abc&state=def`);
    expect(callback.status).toBe(400);
    expect(callback.text).toContain('Sign-in did not finish');
    const logout = await hs.http.post(`${PORTAL}/backchannel-logout/corp`).type('form').send({ logout_token: 'not.a.token' });
    expect(logout.status).toBe(404);
  });
});

describe('the operator’s side: owners, grants and the audit log', () => {
  test('the admin API lists bots with owners, moves bots, grants and revokes, and shows the audit log', async () => {
    hs = await startTestHomeserver(portalConfig());
    const admin = await createUser(hs, 'admin', { admin: true });
    const auth = (req: ReturnType<TestHomeserver['http']['get']>) => req.auth(admin.accessToken, { type: 'bearer' });

    const created = await auth(hs.http.post('/_bot_homeserver/admin/v1/bots')).send({ name: 'ops-bot', owner: '@alice:example.org' });
    expect(created.status).toBe(201);
    expect((await auth(hs.http.post('/_bot_homeserver/admin/v1/bots')).send({ name: 'bad', owner: 'alice' })).status).toBe(400);
    const list = await auth(hs.http.get('/_bot_homeserver/admin/v1/bots'));
    expect(list.body.bots).toEqual([expect.objectContaining({ user_id: '@ops-bot:test.local', owner: '@alice:example.org', deactivated: false })]);

    const moved = await auth(hs.http.put('/_bot_homeserver/admin/v1/bots/@ops-bot:test.local/owner')).send({ owner: '@bob:example.org' });
    expect(moved.body).toEqual({ from: '@alice:example.org', to: '@bob:example.org' });
    expect((await auth(hs.http.put('/_bot_homeserver/admin/v1/bots/@admin:test.local/owner')).send({ owner: '@bob:example.org' })).status).toBe(404);

    const granted = await auth(hs.http.put('/_bot_homeserver/admin/v1/owners/grants/@carol:example.org')).send({ note: 'ticket 42' });
    expect(granted.body).toMatchObject({ user_id: '@carol:example.org', granted_by: admin.userId, note: 'ticket 42' });
    expect((await auth(hs.http.get('/_bot_homeserver/admin/v1/owners/grants'))).body.grants).toHaveLength(1);
    expect(await hs.services.portal!.mayCreate({ idHash: 'x', person: '@carol:example.org', displayName: null, idp: 'corp', attributesGrant: false, idToken: null, expiresTs: 0 })).toBe(true);
    expect((await auth(hs.http.delete('/_bot_homeserver/admin/v1/owners/grants/@carol:example.org'))).status).toBe(200);
    expect((await auth(hs.http.delete('/_bot_homeserver/admin/v1/owners/grants/@carol:example.org'))).status).toBe(404);

    expect((await auth(hs.http.post('/_bot_homeserver/admin/v1/bots')).send({ name: 'ops-bot' })).status).toBe(200);
    expect((await auth(hs.http.post('/_synapse/admin/v1/deactivate/@ops-bot:test.local')).send({})).status).toBe(200);

    const audit = await auth(hs.http.get('/_bot_homeserver/admin/v1/audit'));
    expect(audit.status).toBe(200);
    const entries = audit.body.entries as Array<{ actor: string; action: string; target: string; detail: unknown; ts: number }>;
    expect(entries.map((e) => [e.action, e.target])).toEqual([
      ['deactivate', '@ops-bot:test.local'],
      ['rotate', '@ops-bot:test.local'],
      ['revoke', '@carol:example.org'],
      ['grant', '@carol:example.org'],
      ['move', '@ops-bot:test.local'],
      ['create', '@ops-bot:test.local'],
    ]);
    expect(entries.every((e) => e.actor === admin.userId && e.ts === hs!.clock.now())).toBe(true);
    expect(entries[4]!.detail).toEqual({ from: '@alice:example.org', to: '@bob:example.org' });
    const paged = await auth(hs.http.get('/_bot_homeserver/admin/v1/audit?limit=2'));
    expect(paged.body.entries).toHaveLength(2);
    const next = await auth(hs.http.get(`/_bot_homeserver/admin/v1/audit?limit=10&from=${paged.body.next_token}`));
    expect(next.body.entries.map((e: { action: string }) => e.action)).toEqual(['revoke', 'grant', 'move', 'create']);
    // The tie between a person and their account at the provider: shown, and released (logged).
    expect((await auth(hs.http.get('/_bot_homeserver/admin/v1/owners/identities/@dave:example.org'))).status).toBe(404);
    expect(await hs.services.bots.bindIdentity('corp', 'subject-of-dave', '@dave:example.org')).toEqual({ ok: true });
    // His next sign-in, from the same account: fine.
    expect(await hs.services.bots.bindIdentity('corp', 'subject-of-dave', '@dave:example.org')).toEqual({ ok: true });
    // Dave's account under another name (renamed at the provider) is not let in as someone else.
    expect(await hs.services.bots.bindIdentity('corp', 'subject-of-dave', '@david:example.org')).toEqual({ ok: false, boundPerson: '@dave:example.org' });
    const daveCookie = await signedIn(hs, '@dave:example.org');
    const identity = await auth(hs.http.get('/_bot_homeserver/admin/v1/owners/identities/@dave:example.org'));
    expect(identity.body).toEqual({ user_id: '@dave:example.org', idp_id: 'corp', subject: 'subject-of-dave', bound_ts: hs.clock.now() });
    expect((await auth(hs.http.delete('/_bot_homeserver/admin/v1/owners/identities/@dave:example.org'))).status).toBe(200);
    expect((await auth(hs.http.delete('/_bot_homeserver/admin/v1/owners/identities/@dave:example.org'))).status).toBe(404);
    expect((await hs.http.get(`${PORTAL}/`).set('Cookie', daveCookie)).text).toContain('Your session has ended');
    const unbound = await auth(hs.http.get('/_bot_homeserver/admin/v1/audit?target=@dave:example.org'));
    expect(unbound.body.entries.map((e: { action: string; actor: string }) => [e.action, e.actor])).toEqual([
      ['unbind', admin.userId],
      ['bind', '@dave:example.org'],
    ]);
    const [refusal] = (await auth(hs.http.get('/_bot_homeserver/admin/v1/audit?target=@david:example.org'))).body.entries;
    expect(refusal).toMatchObject({ action: 'refuse-sign-in', actor: 'oidc:corp', detail: { idp: 'corp', subject: 'subject-of-dave', subject_bound_to: '@dave:example.org' } });
    // Signing a person out of the portal everywhere, at once (logged).
    const carolCookie = await signedIn(hs, '@carol:example.org');
    const ended = await auth(hs.http.delete('/_bot_homeserver/admin/v1/owners/sessions/@carol:example.org'));
    expect(ended.body).toEqual({ ended: 1 });
    expect((await hs.http.get(`${PORTAL}/`).set('Cookie', carolCookie)).text).toContain('Your session has ended');
    const [endedEntry] = (await auth(hs.http.get('/_bot_homeserver/admin/v1/audit?target=@carol:example.org&limit=1'))).body.entries;
    expect(endedEntry).toMatchObject({ action: 'end-sessions', actor: admin.userId, detail: { sessions: 1 } });
    // Not for people who are not admins.
    const bob = await createUser(hs, 'bob');
    expect((await hs.http.get('/_bot_homeserver/admin/v1/audit').auth(bob.accessToken, { type: 'bearer' })).status).toBe(403);
  });

  test('every other way to make, re-enable or deactivate a bot is in the audit log too', async () => {
    hs = await startTestHomeserver({ ...portalConfig(), registration_shared_secret: 'a-shared-secret' });
    const admin = await createUser(hs, 'admin', { admin: true });
    const bearer = { type: 'bearer' as const };

    // Shared-secret registration of a bot.
    const nonce = (await hs.http.get('/_synapse/admin/v1/register')).body.nonce as string;
    const fields = { nonce, username: 'registered-bot', password: 'a-long-enough-secret', admin: false, userType: 'bot' };
    const registered = await hs.http.post('/_synapse/admin/v1/register').send({ ...fields, user_type: 'bot', mac: sharedSecretMac('a-shared-secret', fields) });
    expect(registered.status).toBe(200);

    // The Synapse admin API: a bot made with PUT /v2/users, deactivated, and enabled again.
    const put = (body: Record<string, unknown>) => hs!.http.put('/_synapse/admin/v2/users/@put-bot:test.local').auth(admin.accessToken, bearer).send(body);
    expect((await put({ password: 'a-long-enough-secret', user_type: 'bot' })).status).toBe(201);
    expect((await put({ deactivated: true })).status).toBe(200);
    expect((await put({ deactivated: false, password: 'another-long-secret' })).status).toBe(200);

    // A bot that deactivates itself with its secret (user-interactive auth).
    const token = (await hs.http.post('/_matrix/client/v3/login').send({ type: 'm.login.password', identifier: { type: 'm.id.user', user: 'registered-bot' }, password: 'a-long-enough-secret' })).body.access_token as string;
    const start = await hs.http.post('/_matrix/client/v3/account/deactivate').auth(token, bearer).send({});
    const auth = { type: 'm.login.password', session: start.body.session, identifier: { type: 'm.id.user', user: 'registered-bot' }, password: 'a-long-enough-secret' };
    expect((await hs.http.post('/_matrix/client/v3/account/deactivate').auth(token, bearer).send({ auth })).status).toBe(200);

    const entries = (await hs.services.bots.auditLog({ limit: 20 })).map((e) => [e.actor, e.action, e.target]);
    expect(entries).toEqual([
      ['@registered-bot:test.local', 'deactivate', '@registered-bot:test.local'],
      [admin.userId, 'reactivate', '@put-bot:test.local'],
      [admin.userId, 'deactivate', '@put-bot:test.local'],
      [admin.userId, 'create', '@put-bot:test.local'],
      ['shared-secret-registration', 'create', '@registered-bot:test.local'],
    ]);
  });
});
