/**
 * The bot portal's world for browser tests and the screenshot script: a real OpenID provider
 * (test/support/oidc-provider.ts), a homeserver with the portal on a real loopback port, and
 * Chromium (Debian's, at /usr/bin/chromium) driven through playwright-core.
 */
import { chromium, type Browser, type Page } from 'playwright-core';
import { buildApp, type App } from '../../src/app.js';
import { FakeClock, testConfig } from './homeserver.js';
import { startOidcProvider, type TestOidcProvider } from './oidc-provider.js';
import { freePort } from './ports.js';
import { releaseSchema } from './test-schemas.js';

export const PORTAL_PATH = '/_bot_homeserver/portal/';
export const REQUEST_ACCESS_URL = 'https://tickets.example.org/new?topic=bot-accounts';
export const IDP_NAME = 'Example Sign-In';

export interface PortalWorld {
  app: App;
  clock: FakeClock;
  oidc: TestOidcProvider;
  /** http://127.0.0.1:<port>/ */
  base: string;
  portal: string;
  close(): Promise<void>;
}

export async function startPortalWorld(portalOverrides: Record<string, unknown> = {}, configOverrides: Record<string, unknown> = {}): Promise<PortalWorld> {
  const port = await freePort();
  const base = `http://127.0.0.1:${port}/`;
  const oidc = await startOidcProvider({ portalBaseUrl: () => base });
  const clock = new FakeClock(Date.now());
  const config = testConfig({
    public_baseurl: base,
    listen: { host: '127.0.0.1', port },
    portal: {
      people_server_name: 'example.org',
      request_access_url: REQUEST_ACCESS_URL,
      creator_attribute_requirements: [{ attribute: 'groups', value: 'bot-creators' }],
      max_bots_per_owner: 3,
      session_idle_timeout: '15m',
      oidc_providers: [
        {
          idp_id: 'test-idp',
          idp_name: IDP_NAME,
          issuer: oidc.issuer,
          client_id: oidc.clientId,
          client_secret: oidc.clientSecret,
          scopes: ['openid', 'profile', 'email', 'groups'],
          // The test provider speaks plain HTTP on loopback.
          skip_verification: true,
          user_mapping_provider: { config: { localpart_template: '{{ user.preferred_username }}', display_name_template: '{{ user.name }}' } },
          attribute_requirements: [{ attribute: 'groups', one_of: ['staff', 'contractors'] }],
          backchannel_logout_enabled: true,
        },
      ],
      ...portalOverrides,
    },
    ...configOverrides,
  });
  const app = await buildApp(config, { clock });
  await app.listen({ host: '127.0.0.1', port });
  return {
    app,
    clock,
    oidc,
    base,
    portal: `${base}${PORTAL_PATH.slice(1)}`,
    close: async () => {
      await app.close();
      await oidc.close();
      await releaseSchema(config.database);
    },
  };
}

/**
 * Debian's Chromium, headless. Playwright starts it with a new empty profile of its own
 * (--user-data-dir in a fresh temporary folder, removed on close); it refuses that flag in `args`.
 */
export async function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}

/** Signs in through the provider's (development) sign-in form; any password does. */
export async function signIn(page: Page, world: PortalWorld, who: string): Promise<void> {
  await page.goto(world.portal);
  await page.getByRole('link', { name: `Sign in with ${IDP_NAME}` }).click();
  await page.locator('input[name=login]').fill(who);
  await page.locator('input[name=password]').fill('any password');
  await page.locator('button[type=submit]').click();
}
