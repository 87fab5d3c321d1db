/**
 * An appservice built with matrix-bot-sdk's `Appservice` class against this server, unchanged: it
 * registers a user of its namespace, gets the room's events by transaction, answers as that user,
 * and loses nothing while it is down.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startTestHomeserver, type TestHomeserver } from '../../../src/testing/index.js';
import { freePort } from '../../support/ports.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
const silent = { info() {}, warn() {}, error() {}, debug() {}, trace() {} };

async function until<T>(check: () => T | undefined | false, what: string): Promise<T> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const value = check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

describe('matrix-bot-sdk Appservice', () => {
  let dir: string;
  let hs: TestHomeserver;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'bhs-botsdk-as-'));
  });
  afterEach(async () => {
    await hs?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('registers its user, receives the room by transactions and answers as its user', async () => {
    const sdk = (await import('matrix-bot-sdk')) as typeof import('matrix-bot-sdk');
    sdk.LogService.setLogger(silent);
    sdk.LogService.setLevel(sdk.LogLevel.ERROR);
    const port = await freePort();
    const registration = {
      id: 'echo-service',
      url: `http://127.0.0.1:${port}`,
      as_token: 'bot-sdk-as-token',
      hs_token: 'bot-sdk-hs-token',
      sender_localpart: 'echoservice',
      rate_limited: false,
      namespaces: { users: [{ exclusive: true, regex: '@_echo_.*:localhost' }], aliases: [], rooms: [] },
    };
    const file = join(dir, 'echo.yaml');
    writeFileSync(file, JSON.stringify(registration)); // JSON is YAML too
    hs = await startTestHomeserver({ config: { app_service_config_files: [file], federation: { min_retry_interval: '20ms', max_retry_interval: '200ms' } } });

    const seen: Array<{ roomId: string; event: Json }> = [];
    const makeAppservice = () => {
      const appservice = new sdk.Appservice({
        port,
        bindAddress: '127.0.0.1',
        homeserverName: 'localhost',
        homeserverUrl: hs.baseUrl,
        registration: registration as never,
        storage: new sdk.MemoryStorageProvider(),
      });
      appservice.on('room.invite', (roomId: string, event: Json) => {
        void appservice.getIntentForUserId(event.state_key).joinRoom(roomId);
      });
      appservice.on('room.message', (roomId: string, event: Json) => {
        seen.push({ roomId, event });
        const body = event.content?.body;
        if (typeof body === 'string' && body.startsWith('!echo ') && !event.sender.startsWith('@_echo_')) {
          void appservice.getIntentForSuffix('alice').sendText(roomId, `echo: ${body.slice(6)}`);
        }
      });
      return appservice;
    };
    let appservice = makeAppservice();
    await appservice.begin();
    const alice = appservice.getIntentForSuffix('alice');
    await alice.ensureRegistered();
    expect(alice.userId).toBe('@_echo_alice:localhost');

    const person = await hs.createUser('person');
    const roomId = await hs.createRoom(person, { preset: 'public_chat', invite: [alice.userId] });
    // The invite reaches the appservice by transaction; its user joins.
    await hs.waitFor(roomId, (e) => e.type === 'm.room.member' && e.state_key === alice.userId && e.content.membership === 'join');
    await hs.send(person, roomId, '!echo hello');
    const reply = await until(() => seen.find((s) => s.event.sender === alice.userId && s.event.content.body === 'echo: hello'), 'the echo');
    expect(reply.roomId).toBe(roomId);

    // The appservice goes away; what is sent meanwhile reaches it once it is back.
    await appservice.stop();
    await hs.send(person, roomId, '!echo while you were away');
    appservice = makeAppservice();
    await appservice.begin();
    await until(() => seen.find((s) => s.event.content.body === 'echo: while you were away'), 'the echo after the restart');
    const bodies = seen.filter((s) => s.event.sender === person.userId).map((s) => s.event.content.body);
    expect(bodies).toEqual(['!echo hello', '!echo while you were away']);
    await appservice.stop();
  });
});
