/**
 * matrix-nio (Debian's python3-matrix-nio, run with /usr/bin/python3) living the whole bot story.
 * nio speaks only r0 paths and sends its token as `?access_token=`. The bot is a Python process
 * (nio_bot.py) the test talks to over JSON lines; any difference from what nio expects is a
 * server bug.
 */
import { spawn, spawnSync, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startTestHomeserver, type TestHomeserver } from '../../../src/testing/index.js';
import { runBotStory, type StoryBot } from './story.js';

const PYTHON = '/usr/bin/python3';
const SCRIPT = fileURLToPath(new URL('./nio_bot.py', import.meta.url));

/** Runs nio_bot.py and speaks its JSON-lines protocol. */
async function startNioBot(baseUrl: string, localpart: string, password: string) {
  const child: ChildProcessWithoutNullStreams = spawn(PYTHON, [SCRIPT, baseUrl, localpart, password], { stdio: 'pipe' });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const waiting = new Map<number, { resolve: (value: unknown) => void; reject: (err: Error) => void }>();
  let ready!: (userId: string) => void;
  let failed!: (err: Error) => void;
  const readyPromise = new Promise<string>((resolve, reject) => ((ready = resolve), (failed = reject)));
  createInterface({ input: child.stdout }).on('line', (line) => {
    const message = JSON.parse(line) as { ready?: boolean; user_id?: string; id?: number; result?: unknown; error?: string };
    if (message.ready) return ready(message.user_id!);
    const pending = waiting.get(message.id!);
    waiting.delete(message.id!);
    if (message.error !== undefined) pending?.reject(new Error(`nio bot: ${message.error}\n${stderr}`));
    else pending?.resolve(message.result);
  });
  void exited.then((code) => {
    const err = new Error(`nio bot exited with ${code}:\n${stderr}`);
    failed(err);
    for (const pending of waiting.values()) pending.reject(err);
  });
  let nextId = 0;
  const call = <T>(op: string, args: Record<string, unknown>): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      const id = ++nextId;
      waiting.set(id, { resolve: resolve as (value: unknown) => void, reject });
      child.stdin.write(`${JSON.stringify({ id, op, ...args })}\n`);
    });
  const userId = await readyPromise;
  return {
    userId,
    call,
    async stop(): Promise<number | null> {
      child.stdin.write(`${JSON.stringify({ op: 'stop' })}\n`);
      return exited;
    },
    stderr: () => stderr,
  };
}

describe('matrix-nio', () => {
  beforeAll(() => {
    // Not skipped when missing: CI installs it (.ci/run), and a silent skip would prove nothing.
    if (!existsSync(PYTHON)) throw new Error(`${PYTHON} is missing: apt-get install python3-matrix-nio`);
    const probe = spawnSync(PYTHON, ['-c', 'import nio'], { encoding: 'utf8' });
    if (probe.status !== 0) throw new Error(`matrix-nio is not installed for ${PYTHON}: apt-get install python3-matrix-nio\n${probe.stderr}`);
  });

  let hs: TestHomeserver;
  beforeEach(async () => {
    hs = await startTestHomeserver();
  });
  afterEach(() => hs.close());

  it('lives the bot story', async () => {
    await runBotStory(hs, async ({ localpart, password }) => {
      const nio = await startNioBot(hs.baseUrl, localpart, password);
      const bot: StoryBot = {
        userId: nio.userId,
        sawJoin: (roomId, userId) => nio.call('saw_join', { room_id: roomId, user_id: userId }),
        createRoomAndInvite: (name, invite) => nio.call<string>('create_room', { name, invite }),
        openDm: (userId) => nio.call<string>('open_dm', { user_id: userId }),
        sendImage: (roomId, data, name, mimetype) => nio.call<string>('send_image', { room_id: roomId, data: data.toString('base64'), name, mimetype }),
        async stop() {
          const code = await nio.stop();
          // A clean exit: no traceback, no errors nio logged about our answers.
          expect(code, nio.stderr()).toBe(0);
          expect(nio.stderr()).not.toMatch(/Traceback|Error/);
        },
      };
      return bot;
    });
  });
});
