// Run by test/e2e/runners.test.ts: a CommonJS jest test, on Node with require(esm) (24.9+).
const { startTestHomeserver } = require('bot-homeserver/testing');

let hs;
beforeAll(async () => {
  hs = await startTestHomeserver();
});
afterAll(() => hs.close());

test('the test double serves a CommonJS jest test', async () => {
  const alice = await hs.createUser('alice');
  const room = await hs.createRoom(alice);
  const sent = await hs.send(alice, room, 'hello from jest (CommonJS)');
  expect((await hs.waitFor(room, (e) => e.event_id === sent)).content.body).toBe('hello from jest (CommonJS)');
});
