/**
 * The bridge alone (`bot-homeserver bridge`), as an application service of another homeserver: a
 * second instance of this server stands for the organisation's main homeserver, with the bridge's
 * registration installed, and the bridge runs as a separate process, so the two talk only HTTP.
 * People there invite the bridge, ask for a webhook, get its URL by DM, and what is posted to it
 * (and a new feed item) appears in their room, also after the bridge restarts.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startTestHomeserver, type TestHomeserver } from '../../src/testing/index.js';
import { startFeedServer, type FeedServer } from '../support/feed-server.js';
import { freePort } from '../support/ports.js';

const ROOT = resolve(import.meta.dirname, '../..');
const BIN = join(ROOT, 'bin/bot-homeserver.js');

beforeAll(() => {
  if (!existsSync(join(ROOT, 'dist/bundle/main.mjs'))) throw new Error('build first: npm run build (npm test does it)');
});

/** Starts `bot-homeserver bridge` and resolves once it has logged that it is ready. */
function startBridgeProcess(configFile: string): Promise<ChildProcess> {
  const child = spawn(process.execPath, [BIN, 'bridge', '--config', configFile], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, BOT_HOMESERVER_CONFIG: '' } });
  return new Promise((resolvePromise, reject) => {
    let stderr = '';
    child.stderr!.on('data', (chunk) => (stderr += chunk));
    child.once('exit', (code) => reject(new Error(`the bridge exited with ${code}: ${stderr}`)));
    createInterface({ input: child.stdout! }).on('line', (line) => {
      if ((JSON.parse(line) as { msg?: string }).msg === 'bridge ready') resolvePromise(child);
    });
  });
}

async function stopProcess(child: ChildProcess | undefined): Promise<void> {
  if (!child || child.exitCode !== null) return;
  const exited = new Promise((resolvePromise) => child.once('exit', resolvePromise));
  child.kill('SIGTERM');
  await exited;
}

const rss = (items: Array<{ guid: string; title: string }>) =>
  `<?xml version="1.0"?><rss version="2.0"><channel><title>Releases</title><link>https://releases.example/</link>${items
    .map((item) => `<item><title>${item.title}</title><link>https://releases.example/${item.guid}</link><guid isPermaLink="false">${item.guid}</guid></item>`)
    .join('')}</channel></rss>`;

describe('the bridge as an application service of the main homeserver', () => {
  let dir: string;
  let main: TestHomeserver;
  let bridge: ChildProcess | undefined;
  let feeds: FeedServer;
  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'bhs-bridge-as-'));
    feeds = await startFeedServer();
  });
  afterEach(async () => {
    await stopProcess(bridge);
    await main?.close();
    await feeds.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('joins when invited, hands out webhooks by DM, posts what they and a feed bring, across a restart', async () => {
    const port = await freePort();
    const mainPort = await freePort();
    const configFile = join(dir, 'bridge.yaml');
    writeFileSync(
      configFile,
      [
        `database: { path: ${JSON.stringify(join(dir, 'bridge.db'))} }`,
        `listen: { host: 127.0.0.1, port: ${port} }`,
        'logging: { level: info }',
        'ratelimiting_enabled: false',
        'bridge:',
        '  feeds: { poll_interval_seconds: 1, allow_private_addresses: true }',
        '  appservice:',
        `    homeserver_url: http://127.0.0.1:${mainPort}`,
        '    server_name: localhost',
        '    as_token: bridge-as-token-0123456789',
        '    hs_token: bridge-hs-token-0123456789',
        `    url: http://127.0.0.1:${port}`,
        '',
      ].join('\n'),
    );
    const registration = join(dir, 'bridge-registration.yaml');
    const printed = spawnSync(process.execPath, [BIN, 'bridge', 'registration', '--config', configFile], { encoding: 'utf8', env: { ...process.env, BOT_HOMESERVER_CONFIG: '' } });
    expect(printed.status).toBe(0);
    writeFileSync(registration, printed.stdout);
    main = await startTestHomeserver({
      port: mainPort,
      config: { app_service_config_files: [registration], bridge: { enabled: false }, federation: { min_retry_interval: '20ms', max_retry_interval: '200ms' } },
    });
    bridge = await startBridgeProcess(configFile);

    const person = await main.createUser('person');
    const roomId = await main.createRoom(person, { preset: 'public_chat', invite: ['@bridge:localhost'] });
    await main.setState(person, roomId, 'm.room.power_levels', '', { users: { [person.userId]: 100, '@bridge:localhost': 50 } });
    await main.waitFor(roomId, (e) => e.sender === '@bridge:localhost' && e.type === 'm.room.message' && String(e.content.body).includes('!bridge help'));

    await main.send(person, roomId, '!bridge webhook alerts');
    await main.waitFor(roomId, (e) => e.sender === '@bridge:localhost' && String(e.content.body).startsWith('Created the webhook "alerts"'));
    const direct = await main.services.accountData.get('@bridge:localhost', undefined, 'm.direct');
    const dm = (direct[person.userId] as string[])[0]!;
    const credentials = await main.waitFor(dm, (e) => e.sender === '@bridge:localhost' && String(e.content.body).includes('/webhook/'));
    const url = /(http:\/\/\S+\/webhook\/\S+)/.exec(String(credentials.content.body))![1]!;
    expect(url.startsWith(`http://127.0.0.1:${port}/webhook/`)).toBe(true);

    const posted = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ text: 'deploy finished' }) });
    expect(posted.status).toBe(200);
    await main.waitFor(roomId, (e) => e.sender === '@bridge:localhost' && e.content.body === 'deploy finished');

    // A feed: what is there when it is added is not posted; a new item is.
    feeds.serve('/releases.xml', { body: rss([{ guid: 'v1', title: 'Version 1' }]) });
    await main.send(person, roomId, `!bridge feed ${feeds.url('/releases.xml')}`);
    await main.waitFor(roomId, (e) => e.sender === '@bridge:localhost' && String(e.content.body).startsWith('This room now follows'));
    feeds.serve('/releases.xml', { body: rss([{ guid: 'v2', title: 'Version 2' }, { guid: 'v1', title: 'Version 1' }]) });
    await main.waitFor(roomId, (e) => e.sender === '@bridge:localhost' && String(e.content.body).includes('Version 2'), { timeout: 15_000 });

    // The bridge restarts: its webhooks are in its own database; what the room says meanwhile
    // reaches it by the main homeserver's retries.
    await stopProcess(bridge);
    await main.send(person, roomId, '!bridge webhook list');
    bridge = await startBridgeProcess(configFile);
    await main.waitFor(roomId, (e) => e.sender === '@bridge:localhost' && e.content.body === 'Webhooks in this room: alerts');
    const again = await fetch(url, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ text: 'still here' }) });
    expect(again.status).toBe(200);
    await main.waitFor(roomId, (e) => e.sender === '@bridge:localhost' && e.content.body === 'still here');

    // Only the main homeserver may push transactions.
    const forged = await fetch(`http://127.0.0.1:${port}/_matrix/app/v1/transactions/x`, { method: 'PUT', headers: { 'content-type': 'application/json', authorization: 'Bearer wrong' }, body: '{"events":[]}' });
    expect(forged.status).toBe(403);
  });
});
