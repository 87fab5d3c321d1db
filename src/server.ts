/** Starts the homeserver listening on `listen.host` / `listen.port` (0 picks a free port). */
import type { AddressInfo } from 'node:net';
import { buildApp, type App, type AppDependencies } from './app.js';
import type { Config } from './config/index.js';
import { baseUrlFor } from './server-info.js';
import { VERSION } from './version.js';

export interface RunningServer {
  app: App;
  /** The real port (useful with `listen.port: 0`). */
  port: number;
  /** `http://host:port/` as bound. */
  url: string;
  close(): Promise<void>;
}

export async function startServer(config: Config, deps: AppDependencies = {}): Promise<RunningServer> {
  const app = await buildApp(config, deps);
  try {
    await app.listen({
      host: config.listen.host,
      port: config.listen.port,
      // The version in the start line: which build wrote a log is the first thing to know of it.
      listenTextResolver: (address) => `bot-homeserver ${VERSION} listening on ${address}`,
    });
  } catch (err) {
    await app.close();
    throw err;
  }
  const { port } = app.server.address() as AddressInfo;
  const url = baseUrlFor(config.listen.host, port, config.tls_certificate_path !== null);
  const info = app.homeserver.server;
  if (!info.fixedBaseUrl) info.publicBaseUrl = url;
  app.log.info({ version: VERSION, port, server_name: config.server_name, public_baseurl: info.publicBaseUrl }, 'ready');
  return { app, port, url, close: () => app.close() };
}
