/**
 * matrix-js-sdk clients with Rust crypto for the encryption tests: started, synced, joining the
 * rooms they are invited to, and waiting for a message they can decrypt.
 */
import * as sdk from 'matrix-js-sdk';

export interface CryptoAccount {
  userId: string;
  deviceId: string;
  accessToken: string;
}

/** A client with Rust crypto (keys in memory), after its first sync; it joins what it is invited to. */
export async function startCryptoClient(baseUrl: string, account: CryptoAccount, fetchFn?: typeof fetch): Promise<sdk.MatrixClient> {
  const client = sdk.createClient({ baseUrl, userId: account.userId, deviceId: account.deviceId, accessToken: account.accessToken, ...(fetchFn ? { fetchFn } : {}) });
  await client.initRustCrypto({ useIndexedDB: false });
  const prepared = new Promise<void>((resolve, reject) => {
    client.on(sdk.ClientEvent.Sync, (state) => {
      if (state === sdk.SyncState.Prepared) resolve();
      if (state === sdk.SyncState.Error) reject(new Error(`${account.userId}'s first sync failed`));
    });
  });
  client.on(sdk.RoomMemberEvent.Membership, (_event, member) => {
    if (member.userId === account.userId && member.membership === 'invite') void client.joinRoom(member.roomId);
  });
  await client.startClient({ initialSyncLimit: 10 });
  await prepared;
  return client;
}

/** Resolves with the first message of `sender` in `roomId` that the client decrypts to `body`. */
export function decrypted(client: sdk.MatrixClient, roomId: string, sender: string, body: string, explain = () => ''): Promise<sdk.MatrixEvent> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${client.getUserId()} did not decrypt "${body}" within 30 s${explain()}`)), 30_000);
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

/** An encrypted room `creator` makes, inviting `invitee` (with `extra` options); resolves once the invitee has joined. */
export async function encryptedRoomWith(creator: sdk.MatrixClient, invitee: string, extra: Partial<sdk.ICreateRoomOpts> = {}): Promise<string> {
  const { room_id: roomId } = await creator.createRoom({
    preset: sdk.Preset.PrivateChat,
    invite: [invitee],
    initial_state: [{ type: 'm.room.encryption', state_key: '', content: { algorithm: 'm.megolm.v1.aes-sha2' } }],
    ...extra,
  });
  await new Promise<void>((resolve) => {
    const poll = setInterval(() => {
      if (creator.getRoom(roomId)?.getMember(invitee)?.membership === 'join') {
        clearInterval(poll);
        resolve();
      }
    }, 50);
  });
  return roomId;
}

/**
 * Waits until the client's crypto has taken in the room's `m.room.encryption` (it does so a little
 * after the sync that brought it); sending before that fails with "unconfigured room".
 */
export async function encryptionReady(client: sdk.MatrixClient, roomId: string, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await client.getCrypto()!.isEncryptionEnabledInRoom(roomId))) {
    if (Date.now() > deadline) {
      const known = client.getRoom(roomId)?.currentState.getStateEvents('m.room.encryption', '');
      throw new Error(`${client.getUserId()} never saw ${roomId} as encrypted (its room state ${known ? 'holds' : 'lacks'} m.room.encryption)`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** Each sends an encrypted message and the other decrypts it; resolves with the event the second client saw first. */
export async function exchangeEncrypted(alice: sdk.MatrixClient, bob: sdk.MatrixClient, roomId: string, there: string, back: string): Promise<sdk.MatrixEvent> {
  const bobGets = decrypted(bob, roomId, alice.getUserId()!, there);
  await encryptionReady(alice, roomId);
  await alice.sendMessage(roomId, { msgtype: sdk.MsgType.Text, body: there });
  const seen = await bobGets;
  const aliceGets = decrypted(alice, roomId, bob.getUserId()!, back);
  await encryptionReady(bob, roomId);
  await bob.sendMessage(roomId, { msgtype: sdk.MsgType.Text, body: back });
  await aliceGets;
  return seen;
}

/**
 * Resolves with the first event in `roomId` (any room, when the function answers undefined) from
 * `sender` that decrypts to a body `accept` takes, among those seen so far or to come.
 */
export function decryptedWhere(client: sdk.MatrixClient, roomId: string | (() => string | undefined), sender: string, accept: (body: string) => boolean, what: string): Promise<sdk.MatrixEvent> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${client.getUserId()} did not decrypt ${what} within 60 s`)), 60_000);
    const check = async (event: sdk.MatrixEvent) => {
      const room = typeof roomId === 'string' ? roomId : roomId();
      if ((room !== undefined && event.getRoomId() !== room) || event.getSender() !== sender) return;
      await client.decryptEventIfNeeded(event);
      const body = event.getContent().body;
      if (process.env.DEBUG_BRIDGE_E2EE) console.log('seen', event.getRoomId(), event.getSender(), event.getWireType(), body);
      if (event.isEncrypted() && typeof body === 'string' && accept(body)) {
        clearTimeout(timer);
        resolve(event);
      }
    };
    const seen = () => {
      for (const room of client.getRooms()) for (const event of room.getLiveTimeline().getEvents()) void check(event);
    };
    client.on(sdk.RoomEvent.Timeline, (event) => void check(event));
    client.on(sdk.MatrixEventEvent.Decrypted, (event) => void check(event));
    seen();
  });
}

/** `creator`'s encrypted room with the bridge (`bridgeId`) joined and made Moderator. */
export async function encryptedRoomWithBridge(creator: sdk.MatrixClient, bridgeId: string): Promise<string> {
  const roomId = await encryptedRoomWith(creator, bridgeId);
  await creator.setPowerLevel(roomId, bridgeId, 50);
  await encryptionReady(creator, roomId);
  return roomId;
}

/**
 * `!bridge webhook <name>` sent encrypted; resolves with the URL from the bridge's encrypted DM
 * (the first line starting with `urlStart`).
 */
export async function bridgeWebhookUrl(client: sdk.MatrixClient, roomId: string, bridgeId: string, name: string, urlStart = 'http'): Promise<string> {
  const dm = decryptedWhere(client, () => undefined, bridgeId, (body) => body.includes(`Your webhook "${name}"`), 'the webhook DM');
  const reply = decryptedWhere(client, roomId, bridgeId, (body) => body.includes(`Created the webhook "${name}"`), 'the reply to the command');
  await client.sendMessage(roomId, { msgtype: sdk.MsgType.Text, body: `!bridge webhook ${name}` });
  await reply;
  const url = (await dm).getContent().body.split('\n').find((line: string) => line.startsWith(urlStart));
  if (url === undefined) throw new Error(`the bridge's DM for "${name}" has no URL starting with ${urlStart}`);
  return url;
}
