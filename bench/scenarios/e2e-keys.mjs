/**
 * End-to-end encryption keys: `/keys/query` and `/keys/claim` for 100 devices (10 users with 10
 * devices each, every device with signed identity keys and one-time keys), and to-device delivery
 * latency: from the start of a `PUT /sendToDevice` to the receiving device's long-polling `/sync`
 * answering with the message.
 */
import { generateKeyPairSync, sign } from 'node:crypto';
import { Client, CS, registerUser } from '../lib/http-client.mjs';
import { round } from '../lib/server.mjs';
import { summarize } from '../lib/stats.mjs';

export const name = 'e2e-keys';

const USERS = 10;
const DEVICES_PER_USER = 10;
const WARMUP = 10;

/** @param {import('../run.mjs').Context} ctx */
export async function run(ctx) {
  const { iterations } = ctx.settings.e2eKeys;
  const client = new Client(ctx.server.baseUrl, { maxSockets: 4 });
  try {
    // 10 users, each logged in on 10 devices that upload their keys.
    const devices = [];
    for (let u = 0; u < USERS; u++) {
      const username = `keys${ctx.runId}u${u}`;
      const password = `pw-${username}`;
      await registerUser(client, ctx.sharedSecret, username, password);
      for (let d = 0; d < DEVICES_PER_USER; d++) {
        const login = await client.ok('POST', `${CS}/login`, { body: { type: 'm.login.password', identifier: { type: 'm.id.user', user: username }, password } });
        devices.push({ userId: login.user_id, deviceId: login.device_id, token: login.access_token });
      }
    }
    const oneTimeKeys = WARMUP + iterations;
    for (const device of devices) {
      const identity = newIdentity(device);
      await client.ok('POST', `${CS}/keys/upload`, {
        token: device.token,
        body: {
          device_keys: identity.deviceKeys(),
          one_time_keys: Object.fromEntries(Array.from({ length: oneTimeKeys }, (_, i) => [`signed_curve25519:K${String(i).padStart(4, '0')}`, identity.signed({ key: Buffer.alloc(32, i).toString('base64').replace(/=+$/, '') })])),
        },
      });
    }
    const asker = devices[0];
    const users = [...new Set(devices.map((d) => d.userId))];
    const queryBody = { device_keys: Object.fromEntries(users.map((u) => [u, []])) };
    const claimBody = { one_time_keys: {} };
    for (const d of devices) (claimBody.one_time_keys[d.userId] ??= {})[d.deviceId] = 'signed_curve25519';

    const timed = async (method, path, body, check) => {
      const samples = [];
      for (let i = 0; i < WARMUP + iterations; i++) {
        const started = performance.now();
        const answer = await client.ok(method, path, { token: asker.token, body });
        const ms = performance.now() - started;
        check(answer);
        if (i >= WARMUP) samples.push(ms);
      }
      return samples;
    };
    const query = await timed('POST', `${CS}/keys/query`, queryBody, (answer) => {
      const found = Object.values(answer.device_keys).reduce((n, forUser) => n + Object.keys(forUser).length, 0);
      if (found !== devices.length) throw new Error(`keys/query found ${found} devices, not ${devices.length}`);
    });
    const claim = await timed('POST', `${CS}/keys/claim`, claimBody, (answer) => {
      const claimed = Object.values(answer.one_time_keys).reduce((n, forUser) => n + Object.keys(forUser).length, 0);
      if (claimed !== devices.length) throw new Error(`keys/claim got ${claimed} keys, not ${devices.length}`);
    });
    const toDevice = await toDeviceLatency(ctx, client, devices[1], devices[DEVICES_PER_USER + 1], iterations);
    const row = (variant, samples, extra = {}) => ({
      scenario: name,
      variant,
      synchronous: ctx.synchronous,
      params: { devices: devices.length, warmup_rounds: WARMUP, ...extra },
      ops: samples.length,
      latency_ms: summarize(samples),
      errors: 0,
      server: { rss_mb: ctx.server.memory().rssMb },
    });
    return [row('keys/query, 100 devices', query), row('keys/claim, 100 devices', claim), row('to-device, send to long-poll', toDevice)];
  } finally {
    client.close();
  }
}

/** The receiving device long-polls; each round sends it one to-device message. */
async function toDeviceLatency(ctx, client, from, to, iterations) {
  const poller = new Client(ctx.server.baseUrl);
  try {
    let since = (await poller.ok('GET', `${CS}/sync?timeout=0`, { token: to.token })).next_batch;
    const samples = [];
    for (let i = 0; i < WARMUP + iterations; i++) {
      const polling = poller.ok('GET', `${CS}/sync?timeout=10000&since=${encodeURIComponent(since)}`, { token: to.token });
      await new Promise((resolve) => setTimeout(resolve, 15));
      const started = performance.now();
      await client.ok('PUT', `${CS}/sendToDevice/m.bench/${ctx.runId}-${i}`, { token: from.token, body: { messages: { [to.userId]: { [to.deviceId]: { round: i } } } } });
      let answer = await polling;
      // A sync may come back for something else first; the message is in the next one.
      while (!(answer.to_device?.events ?? []).some((e) => e.content?.round === i)) {
        answer = await poller.ok('GET', `${CS}/sync?timeout=10000&since=${encodeURIComponent(answer.next_batch)}`, { token: to.token });
      }
      if (i >= WARMUP) samples.push(performance.now() - started);
      since = answer.next_batch;
    }
    return samples.map((ms) => round(ms, 3));
  } finally {
    poller.close();
  }
}

export function newIdentity(device) {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  const publicKeyB64 = unpadded(publicKey.export({ format: 'der', type: 'spki' }).subarray(-32));
  const signed = (object) => {
    const signature = unpadded(sign(null, Buffer.from(canonical(object)), privateKey));
    return { ...object, signatures: { [device.userId]: { [`ed25519:${device.deviceId}`]: signature } } };
  };
  return {
    signed,
    deviceKeys: () =>
      signed({
        user_id: device.userId,
        device_id: device.deviceId,
        algorithms: ['m.olm.v1.curve25519-aes-sha2', 'm.megolm.v1.aes-sha2'],
        keys: { [`curve25519:${device.deviceId}`]: unpadded(Buffer.alloc(32, 7)), [`ed25519:${device.deviceId}`]: publicKeyB64 },
      }),
  };
}

const unpadded = (bytes) => Buffer.from(bytes).toString('base64').replace(/=+$/, '');

/** Canonical JSON for the plain objects signed here: keys sorted, no spaces. */
function canonical(value) {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value && typeof value === 'object') return `{${Object.keys(value).sort().map((k) => `${JSON.stringify(k)}:${canonical(value[k])}`).join(',')}}`;
  return JSON.stringify(value);
}
