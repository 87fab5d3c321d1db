/**
 * matrix-js-sdk's Rust crypto across two federated instances of this server: a client of A and a
 * client of B exchange encrypted messages, each decrypting what the other sent. Keys are queried
 * and claimed across servers, room keys travel as to-device EDUs. The room is made with the invite
 * in `createRoom` and the invitee's client joins the moment the invite arrives, as bots do.
 */
import { request as httpsRequest } from 'node:https';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as sdk from 'matrix-js-sdk';
import { logger } from 'matrix-js-sdk/lib/logger.js';
import { createUser, startFederation, type Federation } from '../support/federation.js';
import { testCertificates } from '../support/tls.js';

/** A fetch for the SDK that trusts the test CA (the servers listen with TLS under it). */
function fetchTrusting(ca: Buffer): typeof fetch {
  return (async (input: string | URL | Request, init?: RequestInit) => {
    const url = new URL(typeof input === 'string' || input instanceof URL ? input : input.url);
    const headers = Object.fromEntries(new Headers(init?.headers).entries());
    const body = init?.body === undefined || init.body === null ? undefined : typeof init.body === 'string' ? init.body : Buffer.from(init.body as ArrayBuffer);
    return new Promise<Response>((resolve, reject) => {
      const req = httpsRequest(url, { method: init?.method ?? 'GET', headers, ca, signal: init?.signal ?? undefined }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => {
          const status = res.statusCode ?? 500;
          const responseHeaders = new Headers();
          for (const [name, value] of Object.entries(res.headers)) if (typeof value === 'string') responseHeaders.set(name, value);
          resolve(new Response(status === 204 || status === 304 ? null : Buffer.concat(chunks), { status, headers: responseHeaders }));
        });
        res.on('error', reject);
      });
      req.on('error', reject);
      req.end(body);
    });
  }) as typeof fetch;
}

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
  const account = await createUser(server.hs, localpart);
  const client = sdk.createClient({
    baseUrl: server.server.url.replace(/\/$/, ''),
    userId: account.userId,
    deviceId: account.deviceId,
    accessToken: account.accessToken,
    fetchFn: fetchTrusting(readFileSync(testCertificates().caPath)),
  });
  await client.initRustCrypto({ useIndexedDB: false });
  const prepared = new Promise<void>((resolve) => client.on(sdk.ClientEvent.Sync, (state) => state === sdk.SyncState.Prepared && resolve()));
  client.on(sdk.RoomMemberEvent.Membership, (_event, member) => {
    if (member.userId === account.userId && member.membership === 'invite') void client.joinRoom(member.roomId);
  });
  await client.startClient({ initialSyncLimit: 10 });
  await prepared;
  clients.push(client);
  return client;
}

function decrypted(client: sdk.MatrixClient, roomId: string, sender: string, body: string): Promise<sdk.MatrixEvent> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${client.getUserId()} did not decrypt "${body}" within 30 s`)), 30_000);
    const check = async (event: sdk.MatrixEvent) => {
      if (event.getRoomId() !== roomId || event.getSender() !== sender) return;
      await client.decryptEventIfNeeded(event);
      if (event.isEncrypted() && event.getContent().body === body) {
        clearTimeout(timer);
        resolve(event);
      }
    };
    client.on(sdk.RoomEvent.Timeline, (event) => void check(event));
    client.on(sdk.MatrixEventEvent.Decrypted, (event) => void check(event));
  });
}

describe('matrix-js-sdk with Rust crypto across servers', () => {
  it('a client of A and a client of B exchange encrypted messages', { timeout: 60_000 }, async () => {
    const alice = await startClient('a.test', 'alice');
    const bob = await startClient('b.test', 'bob');
    const { room_id: roomId } = await alice.createRoom({
      preset: sdk.Preset.PrivateChat,
      invite: [bob.getUserId()!],
      initial_state: [{ type: 'm.room.encryption', state_key: '', content: { algorithm: 'm.megolm.v1.aes-sha2' } }],
    });
    await new Promise<void>((resolve) => {
      const poll = setInterval(() => {
        if (alice.getRoom(roomId)?.getMember(bob.getUserId()!)?.membership === 'join') {
          clearInterval(poll);
          resolve();
        }
      }, 50);
    });
    const bobGets = decrypted(bob, roomId, alice.getUserId()!, 'across servers, encrypted');
    await alice.sendMessage(roomId, { msgtype: sdk.MsgType.Text, body: 'across servers, encrypted' });
    expect((await bobGets).getWireType()).toBe('m.room.encrypted');
    const aliceGets = decrypted(alice, roomId, bob.getUserId()!, 'and back again');
    await bob.sendMessage(roomId, { msgtype: sdk.MsgType.Text, body: 'and back again' });
    await aliceGets;
  });
});
