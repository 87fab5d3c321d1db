/**
 * Several homeservers in one test, each with its own server name and database, listening with TLS
 * on loopback and finding each other through name-resolution hooks (no DNS): `a.test` is
 * 127.0.0.1 and its SRV record names the port it listens on. They trust the test CA and nothing
 * else, and allow loopback addresses (which production refuses).
 */
import type { LookupAddress } from 'node:dns';
import { readFileSync } from 'node:fs';
import { startServer, type RunningServer } from '../../src/server.js';
import type { Services } from '../../src/services.js';
import { createUser, testConfig, type TestHomeserver } from './homeserver.js';
import { testCertificates } from './tls.js';
import supertest from 'supertest';

export interface FederatedServer {
  name: string;
  server: RunningServer;
  services: Services;
  /** supertest on the server's own (TLS) port. */
  http: ReturnType<typeof supertest.agent>;
  /** The shape the client helpers take. */
  hs: TestHomeserver;
  stop(): Promise<void>;
}

export interface Federation {
  servers: Map<string, FederatedServer>;
  /** Cuts the network between two servers (both ways) until `heal`. */
  partition(a: string, b: string): void;
  heal(): void;
  /** Makes a server listening elsewhere (a fake one) findable by name, at `port` on 127.0.0.1. */
  addPeer(name: string, port: number): void;
  /** The name resolution a server of this federation uses (what `addPeer` feeds). */
  hooksFor(self: string): { resolveHost: (hostname: string) => Promise<LookupAddress[]>; resolveSrv: (name: string) => Promise<Array<{ name: string; port: number; priority: number; weight: number }>> };
  /** Starts (or starts again, on the same database) a server of the federation. */
  start(name: string, overrides?: Record<string, unknown>): Promise<FederatedServer>;
  close(): Promise<void>;
}

export async function startFederation(names: string[], overrides: (name: string) => Record<string, unknown> = () => ({})): Promise<Federation> {
  const tls = testCertificates();
  const ports = new Map<string, number>();
  const servers = new Map<string, FederatedServer>();
  const cut = new Set<string>();
  const reachable = (from: string, to: string) => !cut.has(`${from} ${to}`);
  // Each server resolves names through its own hooks, so a partition can hide one from another.
  const hooksFor = (self: string) => ({
    resolveHost: async (hostname: string): Promise<LookupAddress[]> => (ports.has(hostname) && reachable(self, hostname) ? [{ address: '127.0.0.1', family: 4 }] : []),
    resolveSrv: async (name: string) => {
      const host = name.replace(/^_matrix(-fed)?\._tcp\./, '');
      const port = ports.get(host);
      return name.startsWith('_matrix-fed._tcp.') && port !== undefined && reachable(self, host) ? [{ name: host, port, priority: 0, weight: 0 }] : [];
    },
  });
  const federation: Federation = {
    servers,
    addPeer(name, port) {
      ports.set(name, port);
    },
    hooksFor,
    partition(a, b) {
      cut.add(`${a} ${b}`);
      cut.add(`${b} ${a}`);
      // Connections already open would carry on: close them, as a real partition would.
      for (const name of [a, b]) servers.get(name)?.services.federation.client.dropConnections();
    },
    heal() {
      cut.clear();
    },
    async start(name, extra = {}) {
      const config = testConfig({
        server_name: name,
        public_baseurl: `https://${name}/`,
        listen: { host: '127.0.0.1', port: 0 },
        tls_certificate_path: tls.certPath,
        tls_private_key_path: tls.keyPath,
        federation_custom_ca_list: [tls.caPath],
        ip_range_blacklist: [],
        ...overrides(name),
        ...extra,
      });
      const server = await startServer(config, { federation: hooksFor(name) });
      ports.set(name, server.port);
      const http = supertest.agent(server.url.replace(/\/$/, '')).ca(readFileSync(tls.caPath));
      const hs = { app: server.app, services: server.app.homeserver.services, config, http } as unknown as TestHomeserver;
      const entry: FederatedServer = {
        name,
        server,
        services: server.app.homeserver.services,
        http,
        hs,
        stop: async () => {
          await server.close();
          ports.delete(name);
        },
      };
      servers.set(name, entry);
      return entry;
    },
    async close() {
      await Promise.all([...servers.values()].map((entry) => entry.stop().catch(() => undefined)));
    },
  };
  for (const name of names) await federation.start(name);
  return federation;
}

export { createUser };
