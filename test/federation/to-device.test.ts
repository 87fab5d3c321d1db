/** To-device messages between servers, as m.direct_to_device EDUs. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { client, type Json, type TestClient } from '../support/client.js';
import { createUser, startFederation, type Federation } from '../support/federation.js';

let federation: Federation;
let botA: TestClient;
let aliceB: TestClient;
let carolC: TestClient;
let txn = 0;

beforeAll(async () => {
  // b.test's inboxes are small, so that a flood fills them in a few messages.
  federation = await startFederation(['a.test', 'b.test', 'c.test'], (name) => (name === 'b.test' ? { to_device: { max_per_sender: 5, max_per_device: 12 } } : {}));
  const a = federation.servers.get('a.test')!.hs;
  const b = federation.servers.get('b.test')!.hs;
  const c = federation.servers.get('c.test')!.hs;
  botA = client(a, await createUser(a, 'bot'));
  aliceB = client(b, await createUser(b, 'alice'));
  carolC = client(c, await createUser(c, 'carol'));
});
afterAll(() => federation?.close());

/** One transaction to b.test carrying these to-device EDUs; b.test has applied them when it returns. */
async function edusFrom(origin: string, edus: Json[]): Promise<void> {
  await federation.servers.get(origin)!.services.federation.client.request('b.test', {
    method: 'PUT',
    path: `/_matrix/federation/v1/send/edus-${++txn}`,
    body: { origin, origin_server_ts: Date.now(), pdus: [], edus: edus.map((content) => ({ edu_type: 'm.direct_to_device', content })) },
  });
}
const edusFromA = (edus: Json[]) => edusFrom('a.test', edus);

function flood(sender: string, to: TestClient, count: number, devices: (i: number) => Json = (i) => ({ [to.user.deviceId]: { i } })): Json[] {
  return Array.from({ length: count }, (_, i) => ({ sender, type: 'm.flood', message_id: `m${++txn}`, messages: { [to.userId]: devices(i) } }));
}

async function inboxOf(user: TestClient): Promise<number> {
  return federation.servers.get('b.test')!.services.storage.deviceInbox.countFor(user.userId, user.user.deviceId);
}

/** Syncs until a to-device message of `type` arrives; every to-device message seen on the way. */
async function receiveUntil(user: TestClient, type: string): Promise<Json[]> {
  const seen: Json[] = [];
  await user.syncUntil((sync) => {
    seen.push(...((sync.to_device as { events: Json[] }).events ?? []));
    return seen.some((event) => event.type === type) ? true : undefined;
  });
  return seen;
}

describe('to-device across servers', () => {
  it('reaches a device of another server, and only from the server of its sender', async () => {
    const since = (await aliceB.sync()).next_batch as string;
    await botA.ok('PUT', '/sendToDevice/m.room_key_request/fed1', { messages: { [aliceB.userId]: { [aliceB.user.deviceId]: { over: 'federation' } } } });
    const got = await aliceB.syncUntil((sync) => ((sync.to_device as { events: unknown[] }).events.length > 0 ? sync : undefined));
    expect((got.to_device as { events: unknown[] }).events).toEqual([{ sender: botA.userId, type: 'm.room_key_request', content: { over: 'federation' } }]);
    expect(since).toEqual(expect.any(String));

    // b.test refuses an EDU whose sender is not a user of the server that sent it.
    const b = federation.servers.get('b.test')!.hs;
    await b.services.toDevice.receiveRemote('a.test', { sender: '@mallory:c.test', type: 'm.x', messages: { [aliceB.userId]: { '*': { forged: true } } } });
    expect(await b.services.storage.deviceInbox.countFor(aliceB.userId, aliceB.user.deviceId)).toBe(1);
  });

  it('keeps a flood from one remote user from blocking another sender\u2019s key', async () => {
    const b = federation.servers.get('b.test')!.hs;
    const dave = client(b, await createUser(b, 'dave'));
    await dave.sync();
    // One transaction of 30 EDUs from one user: only that user's share (5) is kept.
    await edusFromA(flood('@mallory:a.test', dave, 30));
    expect(await inboxOf(dave)).toBe(5);
    // Another user of the same server still gets a key through, and it arrives.
    await botA.ok('PUT', '/sendToDevice/m.room_key/key-dave', { messages: { [dave.userId]: { [dave.user.deviceId]: { session_id: 'S1' } } } });
    const seen = await receiveUntil(dave, 'm.room_key');
    expect(seen.filter((event) => event.type === 'm.room_key')).toEqual([{ sender: botA.userId, type: 'm.room_key', content: { session_id: 'S1' } }]);
    expect(seen.filter((event) => event.type === 'm.flood')).toHaveLength(5);
  });

  it('keeps a flood from one remote server (many made-up users) from blocking another server\u2019s key', async () => {
    const b = federation.servers.get('b.test')!.hs;
    const erin = client(b, await createUser(b, 'erin'));
    await erin.sync();
    // 40 users of a.test, three messages each: the device fills up (12) and stays bounded.
    for (let round = 0; round < 3; round++) await edusFromA(Array.from({ length: 40 }, (_, u) => flood(`@m${u}:a.test`, erin, 1)[0]!));
    expect(await inboxOf(erin)).toBe(12);
    // A key from c.test makes room (a.test holds everything) and arrives. Sent as c.test's
    // sender would, but awaited, so that erin cannot make room by syncing before it lands.
    await edusFrom('c.test', [{ sender: carolC.userId, type: 'm.room_key', message_id: 'key-erin', messages: { [erin.userId]: { [erin.user.deviceId]: { session_id: 'S2' } } } }]);
    expect(await inboxOf(erin)).toBe(12);
    const seen = await receiveUntil(erin, 'm.room_key');
    expect(seen.filter((event) => event.type === 'm.room_key')).toEqual([{ sender: carolC.userId, type: 'm.room_key', content: { session_id: 'S2' } }]);
    expect(seen.filter((event) => event.type === 'm.flood').length).toBeLessThanOrEqual(12);
    expect(await inboxOf(erin)).toBeLessThanOrEqual(12);
  });

  it('applies the cap across one EDU: a device named twice cannot overshoot it', async () => {
    const b = federation.servers.get('b.test')!.hs;
    const frank = client(b, await createUser(b, 'frank'));
    await edusFromA(flood('@mallory:a.test', frank, 4));
    // "*" and the device's id in one EDU: two messages for the device, of which one fits.
    await edusFromA(flood('@mallory:a.test', frank, 1, () => ({ '*': { star: true }, [frank.user.deviceId]: { named: true } })));
    expect(await inboxOf(frank)).toBe(5);
  });
});
