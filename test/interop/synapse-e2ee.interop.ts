/**
 * Encrypted conversations with a real Synapse, both ways: this server (started here, with TLS,
 * under the name `INTEROP_SERVER_NAME`) federates with a Synapse that is already running, and
 * matrix-js-sdk clients with Rust crypto on each side exchange messages that the other decrypts,
 * in a room Synapse hosts and in a DM this server hosts.
 *
 * Not part of `npm test`: it needs a Synapse you run yourself. `docs/federation.md` ("Checking
 * against Synapse") says how to set one up and run this with `npm run test:interop`.
 */
import { readFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as sdk from 'matrix-js-sdk';
import { logger } from 'matrix-js-sdk/lib/logger.js';
import supertest from 'supertest';
import { startServer, type RunningServer } from '../../src/server.js';
import { createUser, testConfig, type TestHomeserver } from '../support/homeserver.js';
import { encryptedRoomWith, exchangeEncrypted, startCryptoClient } from '../support/crypto-clients.js';
import { fetchTrusting } from '../support/tls.js';

function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set; see docs/federation.md, "Checking against Synapse"`);
  return value;
}

const synapseUrl = required('SYNAPSE_URL').replace(/\/$/, '');
const serverName = required('INTEROP_SERVER_NAME');
const [host, port] = required('INTEROP_LISTEN').split(':');
const caPath = required('INTEROP_CA');

let server: RunningServer;
const clients: sdk.MatrixClient[] = [];
beforeAll(async () => {
  (logger as unknown as { disableAll(): void }).disableAll();
  const config = testConfig({
    server_name: serverName,
    public_baseurl: `https://${serverName}/`,
    database: { path: ':memory:' },
    listen: { host, port: Number(port) },
    tls_certificate_path: required('INTEROP_CERT'),
    tls_private_key_path: required('INTEROP_KEY'),
    federation_custom_ca_list: [caPath],
    ip_range_blacklist: [],
    logging: { level: process.env.INTEROP_LOG_LEVEL ?? 'silent' },
  });
  server = await startServer(config);
});
afterAll(async () => {
  for (const client of clients) client.stopClient();
  await server?.close();
});

/** A new user of the Synapse (its registration must be open, as a test Synapse's is). */
async function synapseUser(localpart: string): Promise<{ userId: string; deviceId: string; accessToken: string }> {
  const response = await fetch(`${synapseUrl}/_matrix/client/v3/register`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ username: localpart, password: randomBytes(12).toString('hex'), auth: { type: 'm.login.dummy' } }),
  });
  const body = (await response.json()) as { user_id: string; device_id: string; access_token: string };
  if (!response.ok) throw new Error(`registering on Synapse failed: ${response.status} ${JSON.stringify(body)}`);
  return { userId: body.user_id, deviceId: body.device_id, accessToken: body.access_token };
}

async function clientHere(localpart: string): Promise<sdk.MatrixClient> {
  // By name, not address: the certificate names the server.
  const baseUrl = `https://${serverName}:${port}`;
  const http = supertest.agent(baseUrl).ca(readFileSync(caPath));
  const hs = { app: server.app, services: server.app.homeserver.services, http } as unknown as TestHomeserver;
  const account = await createUser(hs, localpart);
  const client = await startCryptoClient(baseUrl, account, fetchTrusting(readFileSync(caPath)));
  clients.push(client);
  return client;
}

async function clientOnSynapse(localpart: string): Promise<sdk.MatrixClient> {
  const client = await startCryptoClient(synapseUrl, await synapseUser(localpart));
  clients.push(client);
  return client;
}

describe('encrypted conversations with Synapse', () => {
  const run = randomBytes(3).toString('hex');

  it('in an encrypted room on Synapse, a Synapse user and a bot here each decrypt the other', { timeout: 90_000 }, async () => {
    const person = await clientOnSynapse(`person-${run}`);
    const bot = await clientHere(`bot-${run}`);
    const roomId = await encryptedRoomWith(person, bot.getUserId()!);
    expect(roomId.endsWith(`:${person.getDomain()}`)).toBe(true);
    const seen = await exchangeEncrypted(person, bot, roomId, 'hello bot, from Synapse', 'hello person, from the bot server');
    expect(seen.getWireType()).toBe('m.room.encrypted');
  });

  it('in an encrypted DM made here, a bot and a Synapse user each decrypt the other', { timeout: 90_000 }, async () => {
    const bot = await clientHere(`dm-bot-${run}`);
    const person = await clientOnSynapse(`dm-person-${run}`);
    const roomId = await encryptedRoomWith(bot, person.getUserId()!, { is_direct: true, preset: sdk.Preset.TrustedPrivateChat });
    expect(roomId.endsWith(`:${serverName}`)).toBe(true);
    const seen = await exchangeEncrypted(bot, person, roomId, 'a DM from the bot server', 'and the answer from Synapse');
    expect(seen.getWireType()).toBe('m.room.encrypted');
  });
});
