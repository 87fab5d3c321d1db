/**
 * Takes the screenshots of docs/portal.md: the bot portal in Debian's Chromium, signed in through
 * the test OpenID provider, on a phone-sized and a desktop-sized window.
 *
 *   npx tsx scripts/portal-screenshots.ts     (writes docs/images/portal-*.png)
 */
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { launchChromium, signIn, startPortalWorld } from '../test/support/portal.js';

const OUT = join(import.meta.dirname, '..', 'docs', 'images');
const PHONE = { width: 390, height: 844 };
const DESKTOP = { width: 1024, height: 768 };

async function shot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: join(OUT, `portal-${name}.png`), fullPage: true });
  console.log(`docs/images/portal-${name}.png`);
}

const world = await startPortalWorld();
const browser = await launchChromium();
try {
  const context = await browser.newContext({ viewport: DESKTOP, deviceScaleFactor: 1 });
  await context.route((url) => url.hostname !== '127.0.0.1', (route) => route.abort());
  const page = await context.newPage();
  await page.goto(world.portal);
  await shot(page, 'sign-in');
  await signIn(page, world, 'alice');
  await page.waitForURL(world.portal);
  await page.getByRole('link', { name: 'Create a bot' }).click();
  await page.getByLabel('User name').fill('Deploy Bot');
  await page.getByRole('button', { name: 'Create bot' }).click();
  await page.locator('#error-summary').waitFor();
  await shot(page, 'form-errors');
  await page.getByLabel('User name').fill('deploy-bot');
  await page.getByLabel('Display name (optional)').fill('Deploy bot');
  await page.getByLabel("What it's for").fill('Posts a message to #releases when a deployment finishes.');
  await page.getByRole('button', { name: 'Create bot' }).click();
  await page.locator('#secret').waitFor();
  await shot(page, 'secret');
  await page.getByRole('link', { name: 'Done, I have saved the secret' }).click();
  await shot(page, 'bot');
  await page.goto(world.portal);
  await shot(page, 'bots');

  const phone = await browser.newContext({ viewport: PHONE, deviceScaleFactor: 1, isMobile: true, hasTouch: true });
  await phone.route((url) => url.hostname !== '127.0.0.1', (route) => route.abort());
  const mobile = await phone.newPage();
  await signIn(mobile, world, 'alice');
  await mobile.waitForURL(world.portal);
  await shot(mobile, 'bots-phone');
  const phone2 = await browser.newContext({ viewport: PHONE, deviceScaleFactor: 1, isMobile: true, hasTouch: true });
  await phone2.route((url) => url.hostname !== '127.0.0.1', (route) => route.abort());
  const bob = await phone2.newPage();
  await signIn(bob, world, 'bob');
  await bob.waitForURL(world.portal);
  await shot(bob, 'no-right-phone');
} finally {
  await browser.close();
  await world.close();
}
