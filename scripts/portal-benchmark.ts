/**
 * The bot portal's page loads, for docs/benchmarks.md: the server's time per page (median and
 * 95th percentile of repeated loads over loopback, the default argon2 cost for creating a bot)
 * and the requests a browser makes per page (Chromium, first visit and with its cache).
 *
 *   npx tsx scripts/portal-benchmark.ts
 */
import type { Page } from 'playwright-core';
import { launchChromium, signIn, startPortalWorld } from '../test/support/portal.js';

const RUNS = 50;

// The default password hashing (argon2id, 19 MiB, t=2): creating a bot or a secret costs one hash.
const world = await startPortalWorld({ max_bots_per_owner: 1000 }, { password_hashing: { memory_cost_kib: 19_456, time_cost: 2, parallelism: 1 } });
const browser = await launchChromium();
const rows: string[] = [];
try {
  const context = await browser.newContext();
  await context.route((url) => url.hostname !== '127.0.0.1', (route) => route.abort());
  const page = await context.newPage();
  let requests = 0;
  page.on('request', () => requests++);
  const count = async (go: (page: Page) => Promise<unknown>): Promise<number> => {
    requests = 0;
    await go(page);
    await page.waitForLoadState('networkidle');
    return requests;
  };
  const signInRequests = await count((p) => p.goto(world.portal));
  await signIn(page, world, 'alice');
  await page.waitForURL(world.portal);
  const homeFirst = await count((p) => p.reload());
  const formRequests = await count((p) => p.goto(`${world.portal}bots/new`));
  await page.getByLabel('User name').fill('bench-bot');
  await page.getByLabel("What it's for").fill('Benchmark.');
  const createRequests = await count((p) => p.getByRole('button', { name: 'Create bot' }).click());
  const botRequests = await count((p) => p.goto(`${world.portal}bots/bench-bot`));

  const cookie = (await context.cookies()).map((c) => `${c.name}=${c.value}`).join('; ');
  const csrf = await page.locator('input[name=_csrf]').first().inputValue();
  const time = async (label: string, request: (i: number) => Promise<Response>): Promise<void> => {
    const samples: number[] = [];
    for (let i = 0; i < RUNS; i++) {
      const start = performance.now();
      const res = await request(i);
      await res.arrayBuffer();
      if (res.status !== 200) throw new Error(`${label}: ${res.status}`);
      samples.push(performance.now() - start);
    }
    samples.sort((a, b) => a - b);
    const at = (q: number) => samples[Math.min(samples.length - 1, Math.floor(q * samples.length))]!.toFixed(1);
    rows.push(`| ${label} | ${at(0.5)} | ${at(0.95)} |`);
  };
  const get = (path: string, withCookie = true) => () => fetch(`${world.portal}${path}`, { headers: withCookie ? { cookie } : {} });
  await time('sign-in page (signed out)', get('', false));
  await time('your bots (1 bot)', get(''));
  await time('create a bot: the form', get('bots/new'));
  await time("a bot's page", get('bots/bench-bot'));
  await time('create a bot: POST (argon2id hash, insert, audit)', (i) =>
    fetch(`${world.portal}bots`, { method: 'POST', headers: { cookie, 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams({ _csrf: csrf, username: `bench-${i}`, description: 'Benchmark.' }) }),
  );
  await time('your bots (51 bots)', get(''));
  await time('stylesheet', get('assets/portal.css', false));
  console.log('| page | server time, median (ms) | 95th percentile (ms) |\n|---|---|---|');
  console.log(rows.join('\n'));
  console.log('\nrequests per page in Chromium:');
  console.log({ signInRequests, homeFirst, formRequests, createRequests, botRequests });
} finally {
  await browser.close();
  await world.close();
}
