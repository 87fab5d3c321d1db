/**
 * `bot-homeserver dev --fixtures FILE`: what a Python or Go test runs. The built CLI as a real
 * process; its one line of JSON must be enough to act as the users and bots it names.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const BIN = join(resolve(import.meta.dirname, '../..'), 'bin/bot-homeserver.js');
let dir: string;
let child: ChildProcess | undefined;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'bhs-dev-'));
});
afterAll(() => {
  if (child && child.exitCode === null) child.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

function fixtures(text: string): string {
  const file = join(dir, `fixtures-${Math.random().toString(36).slice(2)}.yaml`);
  writeFileSync(file, text);
  return file;
}

describe('bot-homeserver dev', () => {
  it('creates the fixtures, prints them as one JSON line, and stops on SIGTERM', async () => {
    const file = fixtures(
      [
        'users:',
        '  - alice',
        '  - {name: bob, password: hunter2, display_name: Bob}',
        'bots: [echo]',
        'rooms:',
        '  lobby: {owner: alice, name: Lobby, alias: lobby, preset: public_chat, members: [echo], invite: [bob]}',
        '',
      ].join('\n'),
    );
    child = spawn(process.execPath, [BIN, 'dev', '--fixtures', file, '--server-name', 'dev.test'], { stdio: ['ignore', 'pipe', 'pipe'] });
    const exited = new Promise<number | null>((resolvePromise) => child!.once('exit', (code) => resolvePromise(code)));
    const line = await new Promise<string>((resolvePromise, reject) => {
      createInterface({ input: child!.stdout! }).once('line', resolvePromise);
      void exited.then((code) => reject(new Error(`dev exited with ${code}`)));
    });
    const out = JSON.parse(line);
    expect(out).toMatchObject({
      base_url: expect.stringMatching(/^http:\/\/127\.0\.0\.1:\d+$/),
      server_name: 'dev.test',
      users: { alice: { user_id: '@alice:dev.test' }, bob: { user_id: '@bob:dev.test', password: 'hunter2' } },
      bots: { echo: { user_id: '@echo:dev.test' } },
      rooms: { lobby: { room_id: expect.stringMatching(/^!/), alias: '#lobby:dev.test' } },
    });

    const as = (token: string) => ({ headers: { Authorization: `Bearer ${token}` } });
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    const json = async (res: Promise<Response>): Promise<any> => (await res).json();
    const whoami = await json(fetch(`${out.base_url}/_matrix/client/v3/account/whoami`, as(out.bots.echo.access_token)));
    expect(whoami.user_id).toBe('@echo:dev.test');
    const joined = await json(fetch(`${out.base_url}/_matrix/client/v3/joined_rooms`, as(out.bots.echo.access_token)));
    expect(joined.joined_rooms).toEqual([out.rooms.lobby.room_id]);
    const members = await json(fetch(`${out.base_url}/_matrix/client/v3/rooms/${encodeURIComponent(out.rooms.lobby.room_id)}/members`, as(out.users.alice.access_token)));
    const memberships = Object.fromEntries(members.chunk.map((e: { state_key: string; content: { membership: string } }) => [e.state_key, e.content.membership]));
    expect(memberships).toEqual({ '@alice:dev.test': 'join', '@echo:dev.test': 'join', '@bob:dev.test': 'invite' });
    // The printed password works for a fresh login, as a bot in another language would do.
    const login = await fetch(`${out.base_url}/_matrix/client/v3/login`, {
      method: 'POST',
      body: JSON.stringify({ type: 'm.login.password', identifier: { type: 'm.id.user', user: 'echo' }, password: out.bots.echo.password }),
    });
    expect(login.status).toBe(200);

    child.kill('SIGTERM');
    expect(await exited).toBe(0);
  });

  it('refuses bad fixtures with every problem at once, each naming its key', () => {
    const run = (text: string) => spawnSync(process.execPath, [BIN, 'dev', '--fixtures', fixtures(text)], { encoding: 'utf8' });
    const bad = run('users: [alice, alice]\nrooms: {x: {owner: alcie, topik: red}}\n');
    expect(bad.status).toBe(1);
    expect(bad.stderr).toContain('invalid fixtures in ');
    expect(bad.stderr).toContain('  rooms.x.topik: unknown key; did you mean topic?');
    expect(bad.stderr).toContain('  users[1]: alice is already listed as users[0]');
    expect(bad.stderr).toContain('  rooms.x.owner names alcie, which is not in users or bots; did you mean alice?');
    expect(bad.stderr).not.toMatch(/\n\s+at /);
    // A refusal while creating names the entry it came from.
    const badBot = run('bots: [ok-bot, Bad Name]\n');
    expect(badBot.stderr).toContain('fixtures: bots[1] (Bad Name): createBot("Bad Name")');
    expect(badBot.stderr).not.toMatch(/\n\s+at /);
  });

  it('stops when the pipe on its stdin closes (the parent closed it or died)', async () => {
    const proc = spawn(process.execPath, [BIN, 'dev'], { stdio: ['pipe', 'pipe', 'pipe'] });
    const exited = new Promise<number | null>((resolvePromise) => proc.once('exit', (code) => resolvePromise(code)));
    const out = JSON.parse(await firstLine(proc, exited));
    expect((await fetch(`${out.base_url}/_matrix/client/versions`)).status).toBe(200);
    proc.stdin!.end();
    expect(await withDeadline(exited, 10_000, () => proc.kill('SIGKILL'))).toBe(0);
  });

  it('stops when its parent goes away, and not before (stdin from /dev/null is not a closed pipe)', async () => {
    // sh starts dev in the background (stdin /dev/null, as in any script), prints its pid, waits.
    const shell = spawn('/bin/sh', ['-c', `"${process.execPath}" "${BIN}" dev & echo "pid $!"; wait`], { stdio: ['ignore', 'pipe', 'pipe'] });
    const shellExited = new Promise<number | null>((resolvePromise) => shell.once('exit', (code) => resolvePromise(code)));
    const lines = createInterface({ input: shell.stdout! });
    const seen: string[] = [];
    const ready = new Promise<void>((resolvePromise) =>
      lines.on('line', (line) => {
        seen.push(line);
        if (seen.some((l) => l.startsWith('pid ')) && seen.some((l) => l.startsWith('{'))) resolvePromise();
      }),
    );
    await withDeadline(ready, 15_000, () => shell.kill('SIGKILL'));
    const pid = Number(seen.find((l) => l.startsWith('pid '))!.slice(4));
    const out = JSON.parse(seen.find((l) => l.startsWith('{'))!);
    try {
      // Still serving a second later: its stdin is /dev/null, which is not a pipe to watch.
      await new Promise((r) => setTimeout(r, 1000));
      expect((await fetch(`${out.base_url}/_matrix/client/versions`)).status).toBe(200);
      shell.kill('SIGKILL');
      await shellExited;
      const deadline = Date.now() + 10_000;
      while (isAlive(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
      expect(isAlive(pid)).toBe(false);
    } finally {
      if (isAlive(pid)) process.kill(pid, 'SIGKILL');
    }
  });
});

function firstLine(proc: ChildProcess, exited: Promise<number | null>): Promise<string> {
  return new Promise<string>((resolvePromise, reject) => {
    createInterface({ input: proc.stdout! }).once('line', resolvePromise);
    void exited.then((code) => reject(new Error(`dev exited with ${code}`)));
  });
}

async function withDeadline<T>(promise: Promise<T>, ms: number, onTimeout: () => void): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      onTimeout();
      reject(new Error(`not done within ${ms} ms`));
    }, ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Running, not a zombie (whoever adopted it may not have reaped it yet). */
function isAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}
