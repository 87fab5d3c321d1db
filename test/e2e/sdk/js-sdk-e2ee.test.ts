/**
 * matrix-js-sdk with its Rust crypto (WebAssembly, installs offline): two clients on this server
 * exchange encrypted messages in an encrypted room, each decrypting what the other sent. The
 * server only stores and routes keys and to-device messages; any failure here is a server bug.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import * as sdk from 'matrix-js-sdk';
import { logger } from 'matrix-js-sdk/lib/logger.js';
import { startTestHomeserver, type TestHomeserver } from '../../../src/testing/index.js';

async function startClient(hs: TestHomeserver, name: string): Promise<sdk.MatrixClient> {
  const account = await hs.createUser(name);
  const client = sdk.createClient({ baseUrl: hs.baseUrl, userId: account.userId, deviceId: account.deviceId, accessToken: account.accessToken });
  await client.initRustCrypto({ useIndexedDB: false });
  const prepared = new Promise<void>((resolve, reject) => {
    client.on(sdk.ClientEvent.Sync, (state) => {
      if (state === sdk.SyncState.Prepared) resolve();
      if (state === sdk.SyncState.Error) reject(new Error(`${name}'s first sync failed`));
    });
  });
  client.on(sdk.RoomMemberEvent.Membership, (_event, member) => {
    if (member.userId === account.userId && member.membership === 'invite') void client.joinRoom(member.roomId);
  });
  await client.startClient({ initialSyncLimit: 10 });
  await prepared;
  return client;
}

/** Resolves with the clear text of the first message of `sender` in `roomId` that decrypts to `body`. */
function decrypted(client: sdk.MatrixClient, roomId: string, sender: string, body: string): Promise<sdk.MatrixEvent> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${client.getUserId()} did not decrypt "${body}" within 20 s`)), 20_000);
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

describe('matrix-js-sdk with Rust crypto', () => {
  let hs: TestHomeserver;
  const clients: sdk.MatrixClient[] = [];
  beforeEach(async () => {
    hs = await startTestHomeserver();
    (logger as unknown as { disableAll(): void }).disableAll();
  });
  afterEach(async () => {
    for (const client of clients.splice(0)) client.stopClient();
    await hs.close();
  });

  /** Alice opens an encrypted room with Bob (with `extra` creation options); each sends, the other decrypts. */
  async function exchange(extra: Partial<sdk.ICreateRoomOpts>): Promise<void> {
    const alice = await startClient(hs, 'alice');
    const bob = await startClient(hs, 'bob');
    clients.push(alice, bob);
    const { room_id: roomId } = await alice.createRoom({
      invite: [bob.getUserId()!],
      initial_state: [{ type: 'm.room.encryption', state_key: '', content: { algorithm: 'm.megolm.v1.aes-sha2' } }],
      ...extra,
    });
    await new Promise<void>((resolve) => {
      const poll = setInterval(() => {
        if (alice.getRoom(roomId)?.getMember(bob.getUserId()!)?.membership === 'join') {
          clearInterval(poll);
          resolve();
        }
      }, 50);
    });

    const bobGets = decrypted(bob, roomId, alice.getUserId()!, 'hello, encrypted');
    await alice.sendMessage(roomId, { msgtype: sdk.MsgType.Text, body: 'hello, encrypted' });
    const seen = await bobGets;
    expect(seen.getWireType()).toBe('m.room.encrypted');

    const aliceGets = decrypted(alice, roomId, bob.getUserId()!, 'and back');
    await bob.sendMessage(roomId, { msgtype: sdk.MsgType.Text, body: 'and back' });
    await aliceGets;

    // What the server stored is ciphertext only.
    const stored = await hs.timeline(roomId);
    expect(stored.filter((e) => e.type === 'm.room.message')).toEqual([]);
    expect(JSON.stringify(stored)).not.toContain('hello, encrypted');
  }

  it('two clients exchange encrypted messages in an encrypted room, each decrypting the other', async () => {
    await exchange({ preset: sdk.Preset.PrivateChat });
  });

  it('and in an encrypted direct message, as Element creates them', async () => {
    await exchange({ preset: sdk.Preset.TrustedPrivateChat, is_direct: true });
  });
});
