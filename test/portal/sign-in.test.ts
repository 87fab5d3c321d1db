/**
 * The bot portal's sign-in against a real OpenID provider, over plain HTTP (no browser): the
 * security properties of the round trip and of the sessions it makes. The stories a person sees
 * are in browser.test.ts.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { startPortalWorld, type PortalWorld } from '../support/portal.js';
import { csrfTokenOf, HttpClient, signInOverHttp } from '../support/portal-http.js';

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
});
