/**
 * The bridge as an application service of a second instance (standing for the organisation's
 * main homeserver): the bridge's config, and the main homeserver started with its registration.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startTestHomeserver, type TestHomeserver } from '../../src/testing/index.js';
import { bridgeRegistration } from '../../src/bridge-app.js';
import { finishConfig, type Config } from '../../src/config/index.js';
import type { JsonObject } from '../../src/rooms/events.js';
import { startCountingProxy, type CountingProxy, type ProxiedRequest } from './counting-proxy.js';
import { freePort } from './ports.js';

/**
 * In `dir`: the config of a bridge process (its database there), and a main homeserver on a port
 * of its own that has the bridge's registration (`registrationText` to write another one).
 */
export async function mainWithBridgeRegistration(dir: string, registrationText: (config: Config) => string = bridgeRegistration): Promise<{ config: Config; main: TestHomeserver }> {
  const port = await freePort();
  const mainPort = await freePort();
  const config = finishConfig({
    database: { path: join(dir, 'bridge.db') },
    listen: { host: '127.0.0.1', port },
    logging: { level: 'silent' },
    ratelimiting_enabled: false,
    bridge: {
      appservice: {
        homeserver_url: `http://127.0.0.1:${mainPort}`,
        server_name: 'localhost',
        as_token: 'bridge-as-token-0123456789',
        hs_token: 'bridge-hs-token-0123456789',
        url: `http://127.0.0.1:${port}`,
      },
    },
  });
  const registration = join(dir, 'bridge-registration.yaml');
  writeFileSync(registration, registrationText(config));
  const main = await startTestHomeserver({ port: mainPort, config: { app_service_config_files: [registration], bridge: { enabled: false } } });
  return { config, main };
}

/**
 * The main homeserver with recording proxies on both ways: its transactions reach the bridge through
 * `transactions`, and the bridge (once started with `config`) asks it through `requests`.
 */
export async function mainAndProxies(dir: string): Promise<{ config: Config; main: TestHomeserver; requests: CountingProxy; transactions: CountingProxy }> {
  let bridgePort = 0;
  const transactions = await startCountingProxy(() => `http://127.0.0.1:${bridgePort}`);
  const { config, main } = await mainWithBridgeRegistration(dir, (config) =>
    bridgeRegistration({ ...config, bridge: { ...config.bridge, appservice: { ...config.bridge.appservice!, url: transactions.url } } }),
  );
  bridgePort = config.listen.port;
  const requests = await startCountingProxy(() => main.baseUrl);
  config.bridge.appservice!.homeserver_url = requests.url;
  return { config, main, requests, transactions };
}

/** Resolves once the bridge has taken (answered 200) a transaction holding the event. */
export function taken(transactions: CountingProxy, eventId: string): Promise<ProxiedRequest> {
  return transactions.answered((request) => request.status === 200 && ((request.body as { events?: JsonObject[] })?.events ?? []).some((event) => event.event_id === eventId));
}
