/**
 * Webhook ingress: posts/s to one webhook from closed-loop senders (as send-throughput), and
 * webhook-to-sync latency: from the start of a POST to a room member's long-polling /sync
 * answering with the bridge's message. The webhook is made the way a room member makes one:
 * invite the bridge, give it Moderator, say `!bridge webhook bench`, read the URL from its DM.
 * The same latency again in encrypted rooms (issue 31) with 10 and 100 member devices, each with
 * signed identity and one-time keys: the bridge queries their keys, makes Olm sessions and shares
 * its room key on the first post (a warm-up round), then encrypts each post with Megolm.
 */
import { generateKeyPairSync } from 'node:crypto';
import { Client, CS, roomPath } from '../lib/http-client.mjs';
import { newIdentity } from './e2e-keys.mjs';
import { closedLoop } from '../lib/load.mjs';
import { registerUsers } from '../lib/setup.mjs';
import { measure as measureWake } from './sync-wake.mjs';

export const name = 'webhook';

const BRIDGE = '@bridge:bench.local';
/** Setup steps wait for the bridge (it acts from its own sync loop) this long at most. */
const SETUP_TIMEOUT_MS = 10_000;

/** @param {import('../run.mjs').Context} ctx */
export async function run(ctx) {
  const [owner] = await registerUsers(ctx, 'hookowner', 1);
  const { roomId, webhookPath } = await createWebhook(ctx, owner);
  const { warmupMs, durationMs, iterations } = ctx.settings.webhook;
  const variant = '10 concurrent posters';
  const load = await closedLoop({
    server: ctx.server,
    target: { method: 'POST', path: webhookPath, body: 'webhook', expect: 'event_id' },
    tokens: Array.from({ length: 10 }, () => undefined),
    processes: 2,
    sendersPerProcess: 5,
    warmupMs,
    durationMs,
    tag: `${ctx.runId}-hook`,
  });
  const throughput = { scenario: name, variant, synchronous: ctx.synchronous, ...load };
  // The room member long-polls; each round posts one message to the webhook.
  const wake = await measureWake(ctx, roomId, owner, owner, 0, [], {
    scenario: name,
    variant: 'webhook to sync',
    webhookPath,
    iterations,
  });
  const encrypted = [];
  for (const devices of ENCRYPTED_MEMBER_DEVICES) {
    const members = await registerUsers(ctx, `hookenc${devices}u`, devices);
    const room = await encryptedWebhookRoom(ctx, members);
    encrypted.push(
      await measureWake(ctx, room.roomId, members[0], members[0], 0, [], {
        scenario: name,
        variant: `webhook to sync, encrypted, ${devices} member devices`,
        webhookPath: room.webhookPath,
        encrypted: true,
        iterations,
      }),
    );
  }
  return [throughput, wake, ...encrypted];
}

/** Member devices (one per user) of the encrypted rooms measured. */
const ENCRYPTED_MEMBER_DEVICES = [10, 100];

/**
 * A room of `members` (each device with uploaded, signed keys) with a webhook, then encrypted: the
 * webhook is made while the room is not yet encrypted, so its URL comes in a plain DM the bench
 * can read (a room may be encrypted at any time; what the bridge posts follows).
 */
async function encryptedWebhookRoom(ctx, members) {
  const client = new Client(ctx.server.baseUrl, { maxSockets: 4 });
  try {
    for (const member of members) await uploadDeviceKeys(client, member);
    const { roomId, webhookPath } = await createWebhook(ctx, members[0], `bench${members.length}`);
    for (const member of members.slice(1)) await client.ok('POST', `${CS}/join/${roomPath(roomId)}`, { token: member.access_token, body: {} });
    await client.ok('PUT', `${CS}/rooms/${roomPath(roomId)}/state/m.room.encryption/`, { token: members[0].access_token, body: { algorithm: 'm.megolm.v1.aes-sha2' } });
    return { roomId, webhookPath };
  } finally {
    client.close();
  }
}

/** A member's device keys: real ed25519 and curve25519 (x25519) keys, five signed one-time keys. */
async function uploadDeviceKeys(client, member) {
  const { device_id: deviceId } = await client.ok('GET', `${CS}/account/whoami`, { token: member.access_token });
  const device = { userId: member.user_id, deviceId };
  const identity = newIdentity(device);
  const curve = () => unpadded(generateKeyPairSync('x25519').publicKey.export({ format: 'der', type: 'spki' }).subarray(-32));
  const keys = identity.deviceKeys();
  const { signatures, ...unsigned } = keys;
  const deviceKeys = identity.signed({ ...unsigned, keys: { ...unsigned.keys, [`curve25519:${device.deviceId}`]: curve() } });
  const oneTimeKeys = Object.fromEntries(Array.from({ length: 5 }, (_, i) => [`signed_curve25519:B${i}`, identity.signed({ key: curve() })]));
  await client.ok('POST', `${CS}/keys/upload`, { token: member.access_token, body: { device_keys: deviceKeys, one_time_keys: oneTimeKeys } });
}

const unpadded = (bytes) => Buffer.from(bytes).toString('base64').replace(/=+$/, '');

/** Sets up a room with the bridge and a webhook through the Client-Server API; returns its path. */
async function createWebhook(ctx, owner, webhookName = 'bench') {
  const client = new Client(ctx.server.baseUrl);
  const token = owner.access_token;
  try {
    const { room_id: roomId } = await client.ok('POST', `${CS}/createRoom`, { token, body: { preset: 'public_chat', name: 'webhook bench' } });
    const room = roomPath(roomId);
    let { next_batch: since } = await client.ok('GET', `${CS}/sync?timeout=0`, { token });
    await client.ok('POST', `${CS}/rooms/${room}/invite`, { token, body: { user_id: BRIDGE } });
    await until('the bridge to join the room', async () => {
      const { joined } = await client.ok('GET', `${CS}/rooms/${room}/joined_members`, { token });
      return joined?.[BRIDGE] !== undefined;
    });
    const levels = await client.ok('GET', `${CS}/rooms/${room}/state/m.room.power_levels/`, { token });
    levels.users = { ...levels.users, [BRIDGE]: 50 };
    await client.ok('PUT', `${CS}/rooms/${room}/state/m.room.power_levels/`, { token, body: levels });
    await client.ok('PUT', `${CS}/rooms/${room}/send/m.room.message/${ctx.runId}-hook-create-${webhookName}`, {
      token,
      body: { msgtype: 'm.text', body: `!bridge webhook ${webhookName}` },
    });
    // The bridge invites the requester to a DM room and sends the URL there, on its own line.
    let dmRoom;
    await until('the bridge to invite us to a direct-message room', async () => {
      const body = await client.ok('GET', `${CS}/sync?timeout=1000&since=${encodeURIComponent(since)}`, { token });
      since = body.next_batch;
      dmRoom = Object.keys(body.rooms?.invite ?? {})[0];
      return dmRoom !== undefined;
    });
    await client.ok('POST', `${CS}/join/${roomPath(dmRoom)}`, { token, body: {} });
    let webhookPath;
    await until('the webhook URL in the direct message', async () => {
      const { chunk } = await client.ok('GET', `${CS}/rooms/${roomPath(dmRoom)}/messages?dir=b&limit=20`, { token });
      for (const event of chunk ?? []) {
        const match = /^https?:\/\/\S*?(\/webhook\/\S+)$/m.exec(event.content?.body ?? '');
        if (event.sender === BRIDGE && match) webhookPath = match[1];
      }
      return webhookPath !== undefined;
    });
    return { roomId, webhookPath };
  } finally {
    client.close();
  }
}

async function until(what, check) {
  const deadline = Date.now() + SETUP_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`webhook setup: gave up waiting for ${what} after ${SETUP_TIMEOUT_MS / 1000} s`);
}
