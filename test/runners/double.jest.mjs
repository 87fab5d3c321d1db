// Run by test/e2e/runners.test.ts under jest (ESM mode): the test double as a jest user imports it.
import { startTestHomeserver } from 'bot-homeserver/testing';

let hs;
beforeAll(async () => {
  hs = await startTestHomeserver();
});
afterAll(() => hs.close());

test('the test double serves a jest test', async () => {
  const alice = await hs.createUser('alice');
  const room = await hs.createRoom(alice);
  const sent = await hs.send(alice, room, 'hello from jest');
  const seen = await hs.waitFor(room, (e) => e.event_id === sent);
  expect(seen.content.body).toBe('hello from jest');
});
