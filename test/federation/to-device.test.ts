/** To-device messages between servers, as m.direct_to_device EDUs. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { client, type TestClient } from '../support/client.js';
import { createUser, startFederation, type Federation } from '../support/federation.js';

let federation: Federation;
let botA: TestClient;
let aliceB: TestClient;

beforeAll(async () => {
  federation = await startFederation(['a.test', 'b.test']);
  const a = federation.servers.get('a.test')!.hs;
  const b = federation.servers.get('b.test')!.hs;
  botA = client(a, await createUser(a, 'bot'));
  aliceB = client(b, await createUser(b, 'alice'));
});
afterAll(() => federation?.close());

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
});
