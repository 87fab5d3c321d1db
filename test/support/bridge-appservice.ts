/**
 * The bridge as an application service of a second instance (standing for the organisation's
 * main homeserver): the bridge's config, and the main homeserver started with its registration.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startTestHomeserver, type TestHomeserver } from '../../src/testing/index.js';
import { bridgeRegistration } from '../../src/bridge-app.js';
import { finishConfig, type Config } from '../../src/config/index.js';
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
