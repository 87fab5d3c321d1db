/**
 * matrix-js-sdk with its Rust crypto (WebAssembly, installs offline): two clients on this server
 * exchange encrypted messages in an encrypted room, each decrypting what the other sent. The
 * server only stores and routes keys and to-device messages; any failure here is a server bug.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import * as sdk from 'matrix-js-sdk';
import { logger } from 'matrix-js-sdk/lib/logger.js';
import { startTestHomeserver, type TestHomeserver } from '../../../src/testing/index.js';
import { encryptedRoomWith, exchangeEncrypted, startCryptoClient } from '../../support/crypto-clients.js';

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
    const alice = await startCryptoClient(hs.baseUrl, await hs.createUser('alice'));
    const bob = await startCryptoClient(hs.baseUrl, await hs.createUser('bob'));
    clients.push(alice, bob);
    const roomId = await encryptedRoomWith(alice, bob.getUserId()!, extra);
    const seen = await exchangeEncrypted(alice, bob, roomId, 'hello, encrypted', 'and back');
    expect(seen.getWireType()).toBe('m.room.encrypted');

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
