/**
 * matrix-js-sdk's Rust crypto across two federated instances of this server: a client of A and a
 * client of B exchange encrypted messages, each decrypting what the other sent. Keys are queried
 * and claimed across servers, room keys travel as to-device EDUs. The room is made with the invite
 * in `createRoom` and the invitee's client joins the moment the invite arrives, as bots do.
 */
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as sdk from 'matrix-js-sdk';
import { logger } from 'matrix-js-sdk/lib/logger.js';
import { createUser, startFederation, type Federation } from '../support/federation.js';
import { fetchTrusting, testCertificates } from '../support/tls.js';
import { encryptedRoomWith, exchangeEncrypted, startCryptoClient } from '../support/crypto-clients.js';

let federation: Federation;
const clients: sdk.MatrixClient[] = [];
beforeAll(async () => {
  federation = await startFederation(['a.test', 'b.test']);
  (logger as unknown as { disableAll(): void }).disableAll();
});
afterAll(async () => {
  for (const client of clients) client.stopClient();
  await federation?.close();
});

async function startClient(serverName: string, localpart: string): Promise<sdk.MatrixClient> {
  const server = federation.servers.get(serverName)!;
  const client = await startCryptoClient(server.server.url.replace(/\/$/, ''), await createUser(server.hs, localpart), fetchTrusting(readFileSync(testCertificates().caPath)));
  clients.push(client);
  return client;
}

describe('matrix-js-sdk with Rust crypto across servers', () => {
  it('a client of A and a client of B exchange encrypted messages', { timeout: 60_000 }, async () => {
    const alice = await startClient('a.test', 'alice');
    const bob = await startClient('b.test', 'bob');
    const roomId = await encryptedRoomWith(alice, bob.getUserId()!);
    const seen = await exchangeEncrypted(alice, bob, roomId, 'across servers, encrypted', 'and back again');
    expect(seen.getWireType()).toBe('m.room.encrypted');
  });
});
