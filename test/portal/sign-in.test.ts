/**
 * The bot portal's sign-in against a real OpenID provider, over plain HTTP (no browser): the
 * security properties of the round trip and of the sessions it makes. The stories a person sees
 * are in browser.test.ts.
 */
import { generateKeyPair, importJWK, SignJWT, type JWTPayload } from 'jose';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { startPortalWorld, type PortalWorld } from '../support/portal.js';
import { csrfTokenOf, HttpClient, reachCallback, signInOverHttp } from '../support/portal-http.js';

let world: PortalWorld;

beforeAll(async () => {
  world = await startPortalWorld();
}, 60_000);

afterAll(async () => {
  await world?.close();
});

describe('signing in to the bot portal', { timeout: 60_000 }, () => {
  test('a person signs in and sees their bots', async () => {
    const client = new HttpClient();
    const callback = await signInOverHttp(world, client, 'alice');
    expect(callback.status).toBe(200);
    const home = await client.request(world.portal);
    expect(home.text).toContain('Signed in as <strong>Alice Example</strong>');
    expect(csrfTokenOf(home)).toBeTruthy();
  });

  test('another account at the provider with the same user name does not become that person (bound by subject)', async () => {
    const dave = new HttpClient();
    expect((await signInOverHttp(world, dave, 'dave')).status).toBe(200);
    const form = await dave.request(`${world.portal}bots/new`);
    const made = await dave.request(`${world.portal}bots`, { form: { _csrf: csrfTokenOf(form), username: 'daves-bot', description: 'Dave’s.' } });
    expect(made.status).toBe(200);

    // Another account (subject "dave-reused") whose preferred_username is also "dave".
    const other = new HttpClient();
    const refused = await signInOverHttp(world, other, 'dave-reused');
    expect(refused.status).toBe(403);
    expect(refused.text).toContain('You cannot use this page');
    expect(refused.text).toContain('is not the one that signed in here before as @dave:example.org');
    expect(refused.setCookies.some((c) => c.startsWith('bhs_portal_session='))).toBe(false);
    const home = await other.request(world.portal);
    expect(home.text).not.toContain('daves-bot');
    expect(home.text).toContain('Sign in with');

    const services = world.app.homeserver.services;
    const [entry] = await services.bots.auditLog({ limit: 1, target: '@dave:example.org' });
    expect(entry).toMatchObject({ actor: 'oidc:test-idp', action: 'refuse-sign-in', detail: { idp: 'test-idp', subject: 'dave-reused', bound_idp: 'test-idp', bound_subject: 'dave' } });
    expect(await services.bots.identityOf('@dave:example.org')).toMatchObject({ idp: 'test-idp', subject: 'dave' });

    // Dave himself still signs in; once an operator releases the binding, the new account is
    // dave here (dave's sessions end with the release).
    expect((await signInOverHttp(world, dave, 'dave')).status).toBe(200);
    expect(await services.bots.unbindIdentity('@dave:example.org', 'cli:operator')).toBe(true);
    expect((await dave.request(world.portal)).text).toContain('Your session has ended');
    expect((await signInOverHttp(world, other, 'dave-reused')).status).toBe(200);
    expect((await other.request(world.portal)).text).toContain('daves-bot');
    expect((await services.bots.auditLog({ limit: 3, target: '@dave:example.org' })).map((e) => e.action)).toEqual(['bind', 'unbind', 'refuse-sign-in']);
  });

  test('a callback finishes once: replayed with its cookie, it is refused before the provider is asked again', async () => {
    const client = new HttpClient();
    const callbackUrl = await reachCallback(world, client, 'erin');
    const signInCookie = client.cookie(world.portal, 'bhs_portal_sign_in')!;
    expect(signInCookie).toBeTruthy();
    const asked = world.oidc.tokenRequests.length;
    expect((await client.request(callbackUrl)).status).toBe(200);
    expect(world.oidc.tokenRequests.length).toBe(asked + 1);

    // Someone who copied the browser's sign-in cookie and the callback's address tries again.
    const replayer = new HttpClient();
    replayer.setCookie(world.portal, 'bhs_portal_sign_in', signInCookie);
    const replayed = await replayer.request(callbackUrl);
    expect(replayed.status).toBe(400);
    expect(replayed.text).toContain('Sign-in did not finish');
    expect(replayed.setCookies.some((c) => c.startsWith('bhs_portal_session='))).toBe(false);
    expect(world.oidc.tokenRequests.length).toBe(asked + 1);
  });

  test('a state that never started here is refused, even in a validly signed cookie of another sign-in', async () => {
    // Two sign-ins started in two browsers; the second's callback comes with the first's cookie.
    const first = new HttpClient();
    await reachCallback(world, first, 'erin');
    const second = new HttpClient();
    const secondCallback = await reachCallback(world, second, 'frank');
    second.setCookie(world.portal, 'bhs_portal_sign_in', first.cookie(world.portal, 'bhs_portal_sign_in')!);
    expect((await second.request(secondCallback)).status).toBe(400);
  });

  test('signing in gives a new session id and ends the one the browser had (no fixation)', async () => {
    const client = new HttpClient();
    await signInOverHttp(world, client, 'erin');
    const before = client.cookie(world.portal, 'bhs_portal_session')!;
    const callbackUrl = await reachCallback(world, client, 'erin');
    // The provider sends the browser back from another site: a SameSite=Strict cookie stays back.
    client.jar.get(new URL(world.portal).origin)!.delete('bhs_portal_session');
    expect((await client.request(callbackUrl)).status).toBe(200);
    const after = client.cookie(world.portal, 'bhs_portal_session')!;
    expect(after).not.toBe(before);
    const old = new HttpClient();
    old.setCookie(world.portal, 'bhs_portal_session', before);
    expect((await old.request(world.portal)).text).toContain('Your session has ended');
    const current = new HttpClient();
    current.setCookie(world.portal, 'bhs_portal_session', after);
    expect((await current.request(world.portal)).text).toContain('Signed in as');
  });

  test('back-channel logout: only a logout token signed by the provider, for us, with the event, ends a session', async () => {
    const client = new HttpClient();
    await signInOverHttp(world, client, 'frank');
    expect((await client.request(world.portal)).text).toContain('Signed in as');
    const storage = world.app.homeserver.services.storage;
    const row = await storage.db.selectFrom('portal_sessions').selectAll().where('owner_id', '=', '@frank:example.org').executeTakeFirstOrThrow();
    expect(row.sid).toBeTruthy();

    const providerKey = await importJWK(world.oidc.signingKey, 'RS256');
    const { privateKey: otherKey } = await generateKeyPair('RS256');
    const claims = (extra: JWTPayload = {}): JWTPayload => ({
      iss: world.oidc.issuer,
      aud: world.oidc.clientId,
      jti: `jti-${Math.random()}`,
      sid: row.sid!,
      sub: 'frank',
      events: { 'http://schemas.openid.net/event/backchannel-logout': {} },
      ...extra,
    });
    const token = (payload: JWTPayload, key = providerKey, iat = Math.floor(Date.now() / 1000)) =>
      new SignJWT(payload).setProtectedHeader({ alg: 'RS256', kid: world.oidc.signingKey.kid, typ: 'logout+jwt' }).setIssuedAt(iat).sign(key);
    const send = async (logoutToken: string) => (await fetch(`${world.portal}backchannel-logout/test-idp`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams({ logout_token: logoutToken }) })).status;

    expect(await send(await token(claims(), otherKey))).toBe(400); // not the provider's key
    expect(await send(await token(claims({ events: {} })))).toBe(400); // no logout event
    expect(await send(await token(claims({ nonce: 'n' })))).toBe(400); // an ID token's nonce
    expect(await send(await token(claims({ aud: 'another-client' })))).toBe(400); // not for us
    expect(await send(await token(claims({ iss: 'https://elsewhere.example/' })))).toBe(400); // another issuer
    expect(await send(await token(claims({ sid: undefined, sub: undefined })))).toBe(400); // nobody named
    expect(await send(await token(claims(), providerKey, Math.floor(Date.now() / 1000) - 3600))).toBe(400); // old
    const [header, payload] = (await token(claims())).split('.');
    expect(await send(`${header}.${payload}.`)).toBe(400); // unsigned
    expect((await client.request(world.portal)).text).toContain('Signed in as');

    expect(await send(await token(claims()))).toBe(200);
    expect((await client.request(world.portal)).text).toContain('Your session has ended');
  });

  test('signing out needs the form’s CSRF token, and ends the session on the server', async () => {
    const client = new HttpClient();
    await signInOverHttp(world, client, 'erin');
    const home = await client.request(world.portal);
    const sessionCookie = client.cookie(world.portal, 'bhs_portal_session')!;
    // A page elsewhere that posts the sign-out form: no token, no sign-out.
    expect((await client.request(`${world.portal}sign-out`, { form: {} })).status).toBe(403);
    expect((await client.request(world.portal)).text).toContain('Signed in as');
    const out = await client.request(`${world.portal}sign-out`, { form: { _csrf: csrfTokenOf(home) } });
    expect(out.status).toBe(200);
    expect(out.text).toContain('You are signed out here');
    // The old cookie, kept by someone, names no session any more.
    const kept = new HttpClient();
    kept.setCookie(world.portal, 'bhs_portal_session', sessionCookie);
    expect((await kept.request(world.portal)).text).toContain('Your session has ended');
  });
});
