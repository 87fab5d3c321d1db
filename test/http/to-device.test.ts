/** To-device messages: /sendToDevice, to_device in /sync, deleted once acknowledged by a later since. */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createUser, startTestHomeserver, type TestHomeserver, type TestUser } from '../support/homeserver.js';
import { expectMatchesSpec } from '../support/spec-validator.js';
import { persistentDatabase } from '../support/test-schemas.js';

let hs: TestHomeserver;
afterEach(() => hs?.close());
const bearer = { type: 'bearer' } as const;

async function sendToDevice(from: TestUser, txnId: string, messages: Record<string, Record<string, object>>, type = 'm.room_key_request') {
  const res = await hs.http.put(`/_matrix/client/v3/sendToDevice/${type}/${txnId}`).auth(from.accessToken, bearer).send({ messages });
  expectMatchesSpec('PUT', `/_matrix/client/v3/sendToDevice/${type}/${txnId}`, res);
  expect(res.status).toBe(200);
}

async function sync(user: TestUser, since?: string, timeout = 0) {
  const res = await hs.http.get('/_matrix/client/v3/sync').query({ ...(since ? { since } : {}), timeout }).auth(user.accessToken, bearer);
  expect(res.status).toBe(200);
  return res.body as { next_batch: string; to_device: { events: Array<{ sender: string; type: string; content: Record<string, unknown> }> } };
}

describe('to-device messages', () => {
  it('are delivered to the named device, again until acknowledged, then never again', async () => {
    hs = await startTestHomeserver();
    const alice = await createUser(hs, 'alice');
    const bob = await createUser(hs, 'bob');
    const first = await sync(bob);
    await sendToDevice(alice, 't1', { [bob.userId]: { [bob.deviceId]: { hello: 1 } } });
    const got = await sync(bob, first.next_batch);
    expect(got.to_device.events).toEqual([{ sender: alice.userId, type: 'm.room_key_request', content: { hello: 1 } }]);
    // The answer was lost: the same since delivers it again.
    expect((await sync(bob, first.next_batch)).to_device.events).toHaveLength(1);
    // Acknowledged by syncing from the token of the answer that carried it: gone.
    const after = await sync(bob, got.next_batch);
    expect(after.to_device.events).toEqual([]);
    expect((await sync(bob, first.next_batch)).to_device.events).toEqual([]);
  });

  it('reaches every device with "*", wakes a parked sync, and is sent once per transaction id', async () => {
    hs = await startTestHomeserver();
    const alice = await createUser(hs, 'alice');
    const bob = await createUser(hs, 'bob');
    const phone = await hs.http.post('/_matrix/client/v3/login').send({ type: 'm.login.password', user: 'bob', password: bob.password, device_id: 'PHONE' });
    const bobPhone = { ...bob, accessToken: phone.body.access_token as string, deviceId: 'PHONE' };
    const since = (await sync(bob)).next_batch;
    const phoneSince = (await sync(bobPhone)).next_batch;
    const parked = sync(bob, since, 10_000);
    while (hs.services.notifier.parkedCount() === 0) await new Promise((r) => setTimeout(r, 5));
    await sendToDevice(alice, 'all', { [bob.userId]: { '*': { n: 1 } } });
    await sendToDevice(alice, 'all', { [bob.userId]: { '*': { n: 1 } } }); // a retry: not sent again
    expect((await parked).to_device.events).toEqual([{ sender: alice.userId, type: 'm.room_key_request', content: { n: 1 } }]);
    expect((await sync(bobPhone, phoneSince)).to_device.events).toEqual([{ sender: alice.userId, type: 'm.room_key_request', content: { n: 1 } }]);
    // Unknown devices and users are skipped, as Synapse does.
    await sendToDevice(alice, 'ghosts', { [bob.userId]: { NOPE: { x: 1 } }, '@nobody:test.local': { '*': { x: 1 } } });
  });

  it('comes 100 at a time, the rest in the next sync, and is gone with its device', async () => {
    hs = await startTestHomeserver();
    const alice = await createUser(hs, 'alice');
    const bob = await createUser(hs, 'bob');
    let since = (await sync(bob)).next_batch;
    for (let i = 0; i < 150; i++) await sendToDevice(alice, `one${i}`, { [bob.userId]: { [bob.deviceId]: { i } } });
    const counts: number[] = [];
    for (let round = 0; round < 4; round++) {
      const answer = await sync(bob, since);
      counts.push(answer.to_device.events.length);
      since = answer.next_batch;
    }
    expect(counts).toEqual([100, 50, 0, 0]);

    await sendToDevice(alice, 'late', { [bob.userId]: { [bob.deviceId]: { late: true } } });
    await hs.services.devices.delete(bob.userId, [bob.deviceId]);
    expect(await hs.services.storage.deviceInbox.countFor(bob.userId, bob.deviceId)).toBe(0);
  });

  it('refuses a sender over its share with 429 and stores nothing of that request', async () => {
    hs = await startTestHomeserver({ to_device: { max_per_sender: 5, max_per_device: 12 } });
    const mallory = await createUser(hs, 'mallory');
    const alice = await createUser(hs, 'alice');
    const bob = await createUser(hs, 'bob');
    const since = (await sync(bob)).next_batch;
    for (let i = 0; i < 5; i++) await sendToDevice(mallory, `flood${i}`, { [bob.userId]: { [bob.deviceId]: { i } } }, 'm.flood');
    const over = await hs.http.put('/_matrix/client/v3/sendToDevice/m.flood/flood5').auth(mallory.accessToken, bearer).send({ messages: { [bob.userId]: { [bob.deviceId]: { i: 5 } } } });
    expect(over.status).toBe(429);
    expect(over.body).toMatchObject({ errcode: 'M_LIMIT_EXCEEDED', retry_after_ms: 60_000 });
    expect(over.headers['retry-after']).toBe('60');
    // A key from someone else still gets in, and arrives.
    await sendToDevice(alice, 'key', { [bob.userId]: { [bob.deviceId]: { session_id: 'S1' } } }, 'm.room_key');
    const got = await sync(bob, since);
    expect(got.to_device.events.map((e) => e.type)).toEqual(['m.flood', 'm.flood', 'm.flood', 'm.flood', 'm.flood', 'm.room_key']);
    // Once bob has synced past them, the refused request can be sent again under the same id.
    await sync(bob, got.next_batch);
    await sendToDevice(mallory, 'flood5', { [bob.userId]: { [bob.deviceId]: { i: 5 } } }, 'm.flood');
    expect(await hs.services.storage.deviceInbox.countFor(bob.userId, bob.deviceId)).toBe(1);
  });

  it('counts a whole request against the cap: a device named twice cannot overshoot it', async () => {
    hs = await startTestHomeserver({ to_device: { max_per_sender: 5, max_per_device: 12 } });
    const mallory = await createUser(hs, 'mallory');
    const bob = await createUser(hs, 'bob');
    for (let i = 0; i < 4; i++) await sendToDevice(mallory, `flood${i}`, { [bob.userId]: { [bob.deviceId]: { i } } }, 'm.flood');
    // "*" and the device's id: two messages for one device, one more than fits. Neither is stored.
    const both = await hs.http.put('/_matrix/client/v3/sendToDevice/m.flood/both').auth(mallory.accessToken, bearer).send({ messages: { [bob.userId]: { '*': { a: 1 }, [bob.deviceId]: { b: 1 } } } });
    expect(both.status).toBe(429);
    expect(await hs.services.storage.deviceInbox.countFor(bob.userId, bob.deviceId)).toBe(4);
  });

  it('keeps a full device open to a sender who holds less than the others: the biggest holder makes room', async () => {
    hs = await startTestHomeserver({ to_device: { max_per_sender: 5, max_per_device: 12 } });
    const [mallory, eve, trudy, alice, bob] = await Promise.all(['mallory', 'eve', 'trudy', 'alice', 'bob'].map((name) => createUser(hs, name)));
    const since = (await sync(bob!)).next_batch;
    const to = (content: object) => ({ [bob!.userId]: { [bob!.deviceId]: content } });
    for (let i = 0; i < 5; i++) await sendToDevice(mallory!, `m${i}`, to({ i }), 'm.flood');
    for (let i = 0; i < 5; i++) await sendToDevice(eve!, `e${i}`, to({ i }), 'm.flood');
    await sendToDevice(alice!, 'key1', to({ session_id: 'S1' }), 'm.room_key');
    await sendToDevice(trudy!, 't0', to({ i: 0 }), 'm.flood');
    // The device is full (12). alice's next key pushes out the oldest flood message, not her own.
    await sendToDevice(alice!, 'key2', to({ session_id: 'S2' }), 'm.room_key');
    expect(await hs.services.storage.deviceInbox.countFor(bob!.userId, bob!.deviceId)).toBe(12);
    // trudy holds as little as alice did, but now alice holds more: trudy still gets in.
    await sendToDevice(trudy!, 't1', to({ i: 1 }), 'm.flood');
    const got = await sync(bob!, since);
    const keys = got.to_device.events.filter((e) => e.type === 'm.room_key').map((e) => e.content.session_id);
    expect(keys).toEqual(['S1', 'S2']);
    expect(got.to_device.events).toHaveLength(12);
    expect(got.to_device.events.filter((e) => e.sender === trudy!.userId)).toHaveLength(2);
  });

  it('survives a restart until delivered, and tokens keep moving forward', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'bhs-todevice-'));
    try {
      const overrides = { ...persistentDatabase(join(dir, 'hs.db')) };
      hs = await startTestHomeserver(overrides);
      const alice = await createUser(hs, 'alice');
      const bob = await createUser(hs, 'bob');
      const since = (await sync(bob)).next_batch;
      await sendToDevice(alice, 'kept', { [bob.userId]: { [bob.deviceId]: { kept: true } } });
      const delivered = await sync(bob, since);
      await sendToDevice(alice, 'kept2', { [bob.userId]: { [bob.deviceId]: { kept: 2 } } });
      await hs.close();
      hs = await startTestHomeserver(overrides);
      const again = await sync(bob, delivered.next_batch);
      expect(again.to_device.events.map((e) => e.content)).toEqual([{ kept: 2 }]);
      // The stream went on past every token handed out before the restart.
      expect(Number(again.next_batch.slice(1).split('_')[0])).toBeGreaterThan(Number(delivered.next_batch.slice(1).split('_')[0]));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
