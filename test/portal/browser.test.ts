/**
 * The bot portal in a real browser (Debian's Chromium through playwright-core) against a real
 * OpenID provider (oidc-provider): the stories of issue 32, one browser for the whole file.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { Browser, BrowserContext, Locator, Page } from 'playwright-core';
import { launchChromium, REQUEST_ACCESS_URL, signIn, startPortalWorld, type PortalWorld } from '../support/portal.js';

const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

let world: PortalWorld;
let browser: Browser;

beforeAll(async () => {
  [world, browser] = await Promise.all([startPortalWorld(), launchChromium()]);
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await world?.close();
});

/** A fresh browser profile's worth of cookies per story. */
async function newPage(): Promise<{ context: BrowserContext; page: Page }> {
  const context = await browser.newContext({ baseURL: world.base });
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: world.base.slice(0, -1) });
  // Only this machine: the provider's development pages ask for a web font, which would wait on DNS.
  await context.route((url) => url.hostname !== '127.0.0.1', (route) => route.abort());
  return { context, page: await context.newPage() };
}

/** axe-core's violations of serious or critical impact on the page as it is. */
async function seriousViolations(page: Page): Promise<string[]> {
  // Evaluated through the DevTools protocol: the page's CSP (rightly) refuses inline scripts.
  await page.evaluate(axeSource);
  const results = (await page.evaluate('axe.run(document)')) as {
    violations: Array<{ id: string; impact: string | null; nodes: Array<{ target: unknown }> }>;
  };
  return results.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical').map((v) => `${v.id}: ${JSON.stringify(v.nodes.map((n) => n.target))}`);
}

/** Waits for the page's one h1 to say `name`. */
async function heading(page: Page, name: string): Promise<void> {
  await page.getByRole('heading', { level: 1, name, exact: true }).waitFor();
}

/** The element's text, once it is there. */
async function textOf(locator: Locator): Promise<string> {
  await locator.first().waitFor();
  return (await locator.first().innerText()).trim();
}

async function matrixLogin(user: string, password: string): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${world.base}_matrix/client/v3/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ type: 'm.login.password', identifier: { type: 'm.id.user', user }, password }),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

async function matrix(token: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${world.base}_matrix/client/v3${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

/** Creates a bot through the form and returns what the credentials page shows. */
async function createBot(page: Page, username: string, description: string): Promise<{ userId: string; secret: string }> {
  await page.getByRole('link', { name: 'Create a bot' }).click();
  await page.getByLabel('User name').fill(username);
  await page.getByLabel('Display name (optional)').fill(`${username} display`);
  await page.getByLabel("What it's for").fill(description);
  await page.getByRole('button', { name: 'Create bot' }).click();
  await heading(page, `${username} display is ready`);
  return { userId: await page.locator('#user-id').inputValue(), secret: await page.locator('#secret').inputValue() };
}

// Generous: the whole suite runs files side by side on two cores.
describe('the bot portal in Chromium', { timeout: 60_000 }, () => {
  /** Alice's browser: her stories follow one another in one sign-in, as a person's visit would. */
  let alice: { context: BrowserContext; page: Page };
  afterAll(async () => alice?.context.close());

  test('sign in, create a bot, read its secret once, log in as it and send a message; pages pass axe', async () => {
    alice = await newPage();
    const { page } = alice;
    {
      await page.goto(world.portal);
      expect(await seriousViolations(page)).toEqual([]);
      await signIn(page, world, 'alice');
      await page.waitForURL(world.portal);
      await heading(page, 'Your bots');
      await page.getByText('Signed in as Alice Example').waitFor();
      expect(await seriousViolations(page)).toEqual([]);

      // A mistake in the form is shown beside its field, and the page still passes axe.
      await page.getByRole('link', { name: 'Create a bot' }).click();
      expect(await seriousViolations(page)).toEqual([]);
      await page.getByLabel('User name').fill('Admin');
      await page.getByRole('button', { name: 'Create bot' }).click();
      expect(await textOf(page.locator('#username-error'))).toContain('lower-case');
      expect(await textOf(page.locator('#description-error'))).toContain('what the bot is for');
      expect(await page.getByLabel('User name').getAttribute('aria-invalid')).toBe('true');
      expect(await seriousViolations(page)).toEqual([]);
      await page.getByRole('link', { name: 'Back to your bots' }).click();

      const { userId, secret } = await createBot(page, 'hello-bot', 'Says hello in the team room.');
      expect(userId).toBe('@hello-bot:test.local');
      expect(secret).toMatch(/^[A-Za-z0-9_-]{43}$/);
      expect(await textOf(page.locator('#login-example'))).toContain(`"password":"${secret}"`);
      expect(await seriousViolations(page)).toEqual([]);
      // The copy button (shown by the script) puts the secret on the clipboard.
      await page.getByRole('button', { name: 'Copy secret' }).click();
      await page.locator('#copy-status', { hasText: 'Copied.' }).waitFor({ state: 'attached' });
      expect(await page.evaluate('navigator.clipboard.readText()')).toBe(secret);

      // The bot logs in with what the page showed and sends a message.
      const login = await matrixLogin('hello-bot', secret);
      expect(login.status).toBe(200);
      const token = login.body.access_token as string;
      const room = await matrix(token, 'POST', '/createRoom', { name: 'hello' });
      expect(room.status).toBe(200);
      const sent = await matrix(token, 'PUT', `/rooms/${encodeURIComponent(room.body.room_id as string)}/send/m.room.message/t1`, { msgtype: 'm.text', body: 'Hello from the portal' });
      expect(sent.status).toBe(200);
      expect(sent.body.event_id).toMatch(/^\$/);

      // The secret is never shown again: the bot's page and the list show no secret.
      await page.getByRole('link', { name: 'Done, I have saved the secret' }).click();
      expect(await page.content()).not.toContain(secret);
      expect(await seriousViolations(page)).toEqual([]);
      await page.goto(world.portal);
      expect(await page.content()).not.toContain(secret);
      expect(await page.locator('.bots .card').count()).toBe(1);
      expect(await textOf(page.locator('.bots .card'))).toContain('Says hello in the team room.');
      // Its last sign-in is shown (the login above).
      expect(await textOf(page.locator('.bots .card'))).not.toContain('Last signed in Never');

      // The operator sees the owner and the audit entry.
      const services = world.app.homeserver.services;
      expect(await services.bots.ownerOf(userId)).toBe('@alice:example.org');
      const [entry] = await services.bots.auditLog({ limit: 1, target: userId });
      expect(entry).toMatchObject({ actor: '@alice:example.org', action: 'create', target: userId });
    }
  });

  test('rotating a secret refuses the old one and ends the bot’s sessions; deactivating stops it for good', async () => {
    const { page } = alice;
    {
      await page.goto(world.portal);
      const { secret: oldSecret } = await createBot(page, 'rotating-bot', 'Shows that rotation works.');
      const oldLogin = await matrixLogin('rotating-bot', oldSecret);
      expect(oldLogin.status).toBe(200);

      await page.getByRole('link', { name: 'Done, I have saved the secret' }).click();
      await page.getByRole('button', { name: 'Make a new secret' }).click();
      await heading(page, 'New secret for rotating-bot display');
      const newSecret = await page.locator('#secret').inputValue();
      expect(newSecret).not.toBe(oldSecret);
      expect((await matrixLogin('rotating-bot', oldSecret)).status).toBe(403);
      expect((await matrix(oldLogin.body.access_token as string, 'GET', '/account/whoami')).status).toBe(401);
      expect((await matrixLogin('rotating-bot', newSecret)).status).toBe(200);

      // Deactivation asks for confirmation first.
      await page.getByRole('link', { name: 'Done, I have saved the secret' }).click();
      await page.getByRole('button', { name: 'Deactivate bot' }).click();
      // The browser itself asks for the box (it is required); without it the server asks too.
      await heading(page, 'rotating-bot display');
      await page.getByLabel('Yes, deactivate rotating-bot display for good').check();
      await page.getByRole('button', { name: 'Deactivate bot' }).click();
      await page.waitForURL(`${world.portal}?done=deactivated`);
      expect(await textOf(page.getByRole('status'))).toContain('The bot has been deactivated.');
      expect(await textOf(page.locator('.card', { hasText: 'rotating-bot' }))).toContain('Deactivated');
      expect((await matrixLogin('rotating-bot', newSecret)).status).toBe(403);
      const actions = (await world.app.homeserver.services.bots.auditLog({ limit: 10, target: '@rotating-bot:test.local' })).map((e) => e.action);
      expect(actions).toEqual(['deactivate', 'rotate', 'create']);
    }
  });

  test('a person without the right is refused and shown where to ask; a grant gives it', async () => {
    const { context, page } = await newPage();
    try {
      await signIn(page, world, 'bob');
      await page.waitForURL(world.portal);
      await page.getByRole('heading', { name: "You can't create bots yet" }).waitFor();
      expect(await page.getByRole('link', { name: 'Ask for permission to create bots' }).getAttribute('href')).toBe(REQUEST_ACCESS_URL);
      expect(await page.getByRole('link', { name: 'Create a bot' }).count()).toBe(0);
      expect(await seriousViolations(page)).toEqual([]);
      // The form's address does not help either.
      await page.goto(`${world.portal}bots/new`);
      await page.waitForURL(world.portal);

      // An operator grants the right (as `bot-homeserver owners grant` does): it holds at once.
      await world.app.homeserver.services.bots.grant('@bob:example.org', 'cli:operator', 'ticket 1234');
      await page.reload();
      await page.getByRole('link', { name: 'Create a bot' }).waitFor();
    } finally {
      await context.close();
    }
  });

  test('someone the provider does not allow cannot sign in, and is shown where to ask', async () => {
    const { context, page } = await newPage();
    try {
      await signIn(page, world, 'mallory');
      await heading(page, 'You cannot use this page');
      expect(await page.getByRole('link', { name: 'Ask for access' }).getAttribute('href')).toBe(REQUEST_ACCESS_URL);
      expect(await seriousViolations(page)).toEqual([]);
    } finally {
      await context.close();
    }
  });

  test('a form posted without its CSRF token is refused', async () => {
    const { page } = alice;
    {
      await page.goto(world.portal);
      // A form of our own origin, but without the token (as a page that found a way to post would be).
      // (Scripts are evaluated as text: the test files are type-checked without the DOM's types.)
      await page.evaluate(`(() => {
        const form = document.createElement('form');
        form.method = 'post';
        form.action = '/_bot_homeserver/portal/bots';
        for (const [name, value] of [['username', 'forged-bot'], ['description', 'forged']]) {
          const input = document.createElement('input');
          input.name = name;
          input.value = value;
          form.append(input);
        }
        document.body.append(form);
        form.submit();
      })()`);
      await heading(page, 'This form has expired');
      expect(await world.app.homeserver.services.accounts.getUser('@forged-bot:test.local')).toBeUndefined();
    }
  });

  test('an expired session goes back to sign-in', async () => {
    const { page } = alice;
    {
      await page.goto(world.portal);
      await page.getByRole('link', { name: 'Create a bot' }).click();
      // Idle longer than session_idle_timeout (15 minutes here).
      world.clock.advance(16 * 60_000);
      await page.getByLabel('User name').fill('late-bot');
      await page.getByLabel("What it's for").fill('Too late.');
      await page.getByRole('button', { name: 'Create bot' }).click();
      await page.getByRole('link', { name: /^Sign in with/ }).waitFor();
      expect(await textOf(page.getByRole('status'))).toBe('Your session has ended. Please sign in again.');
      expect(await world.app.homeserver.services.accounts.getUser('@late-bot:test.local')).toBeUndefined();
    }
  });

  test('signing out at the provider ends the session here (back-channel); signing out here ends it there too', async () => {
    const { context, page } = await newPage();
    try {
      await signIn(page, world, 'carol');
      await page.waitForURL(world.portal);
      // Carol signs out at the provider itself: it tells the portal through the back channel.
      await page.goto(`${world.oidc.issuer}/session/end`);
      await page.getByRole('button', { name: /Yes, sign me out/i }).click();
      await page.waitForURL((url) => url.href.startsWith(world.oidc.issuer));
      expect(world.oidc.backchannel).toEqual(['ok']);
      await page.goto(world.portal);
      expect(await textOf(page.getByRole('status'))).toBe('Your session has ended. Please sign in again.');

      // Signing out here (RP-initiated logout): the provider confirms, then sends her back.
      await signIn(page, world, 'carol');
      await page.waitForURL(world.portal);
      await page.getByRole('button', { name: 'Sign out' }).click();
      await page.getByRole('button', { name: /Yes, sign me out/i }).click();
      await page.waitForURL(`${world.portal}?signed_out=1`);
      expect(await textOf(page.getByRole('status'))).toBe('You have signed out.');
    } finally {
      await context.close();
    }
  });
});
