// Run by test/e2e/runners.test.ts with `node --test`: the test double under node:test.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startTestHomeserver } from 'bot-homeserver/testing';

let hs;
before(async () => {
  hs = await startTestHomeserver();
});
after(() => hs.close());

test('the test double serves a node:test test', async () => {
  const alice = await hs.createUser('alice');
  const room = await hs.createRoom(alice);
  const sent = await hs.send(alice, room, 'hello from node:test');
  assert.equal((await hs.waitFor(room, (e) => e.event_id === sent)).content.body, 'hello from node:test');
});
