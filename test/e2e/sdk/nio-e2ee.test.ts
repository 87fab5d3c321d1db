/**
 * matrix-nio with libolm (Debian's python3-matrix-nio and python3-olm) and matrix-js-sdk's Rust
 * crypto in one encrypted room: the js-sdk client asks the nio bot to echo, the bot decrypts the
 * command and answers encrypted, and the js-sdk client decrypts the answer.
 */
import { spawn, spawnSync, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import * as sdk from 'matrix-js-sdk';
import { logger } from 'matrix-js-sdk/lib/logger.js';
import { startTestHomeserver, type TestHomeserver } from '../../../src/testing/index.js';
import { decrypted, startCryptoClient } from '../../support/crypto-clients.js';

const PYTHON = '/usr/bin/python3';
const SCRIPT = fileURLToPath(new URL('./nio_e2ee_bot.py', import.meta.url));

beforeAll(() => {
  if (!existsSync(PYTHON)) throw new Error(`${PYTHON} is missing: apt-get install python3-matrix-nio`);
  const probe = spawnSync(PYTHON, ['-c', 'import nio, olm'], { encoding: 'utf8' });
  if (probe.status !== 0) throw new Error(`matrix-nio with olm is not installed for ${PYTHON}: apt-get install python3-matrix-nio python3-olm\n${probe.stderr}`);
});

describe('matrix-nio (libolm) and matrix-js-sdk (Rust crypto)', () => {
  let hs: TestHomeserver;
  let bot: ChildProcessWithoutNullStreams | undefined;
  let client: sdk.MatrixClient | undefined;
  beforeEach(async () => {
    hs = await startTestHomeserver();
    (logger as unknown as { disableAll(): void }).disableAll();
  });
  afterEach(async () => {
    client?.stopClient();
    if (bot && bot.exitCode === null) {
      const exited = new Promise((resolve) => bot!.once('exit', resolve));
      bot.kill('SIGTERM');
      await exited;
    }
    await hs.close();
  });

  it('talk encrypted: the nio bot decrypts a command and its encrypted answer is decrypted', async () => {
    const botAccount = await hs.createUser('niobot');
    let stderr = '';
    bot = spawn(PYTHON, [SCRIPT, hs.baseUrl, 'niobot', botAccount.password], { stdio: 'pipe' });
    bot.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const ready = await new Promise<{ user_id: string }>((resolve, reject) => {
      bot!.once('exit', (code) => reject(new Error(`the nio bot exited with ${code}:\n${stderr}`)));
      createInterface({ input: bot!.stdout }).on('line', (line) => {
        const message = JSON.parse(line) as { ready?: boolean; user_id: string };
        if (message.ready) resolve(message);
      });
    });

    client = await startCryptoClient(hs.baseUrl, await hs.createUser('alice'));
    const { room_id: roomId } = await client.createRoom({
      preset: sdk.Preset.PrivateChat,
      invite: [ready.user_id],
      initial_state: [{ type: 'm.room.encryption', state_key: '', content: { algorithm: 'm.megolm.v1.aes-sha2' } }],
    });
    await hs.waitFor(roomId, (e) => e.type === 'm.room.member' && e.state_key === ready.user_id && e.content.membership === 'join');

    const echoed = decrypted(client, roomId, ready.user_id, 'echo: secret plans', () => `; the bot said:\n${stderr}`);
    await client.sendMessage(roomId, { msgtype: sdk.MsgType.Text, body: '!echo secret plans' });
    expect((await echoed).getWireType()).toBe('m.room.encrypted');
    expect(JSON.stringify(await hs.timeline(roomId))).not.toContain('secret plans');
  });
});
