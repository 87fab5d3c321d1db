/**
 * The alert recipe against the real thing: a bridge webhook on the test double, created the way
 * a person would (a command in the room, the URL read from the bridge's direct message).
 */
import { spawn, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startTestHomeserver, type TestHomeserver } from 'bot-homeserver/testing';

const SCRIPT = fileURLToPath(new URL('./send-alert.mjs', import.meta.url));
let hs: TestHomeserver;
beforeAll(async () => {
  hs = await startTestHomeserver();
});
afterAll(() => hs.close());

function run(url: string, ...args: string[]): Promise<{ status: number | null; stdout: string; stderr: string }> {
  // Async spawn: the server runs in this process and must keep answering.
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [SCRIPT, ...args], { env: { ...process.env, WEBHOOK_URL: url, SEVERITY: 'critical' } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c));
    child.stderr.on('data', (c: Buffer) => (stderr += c));
    child.on('exit', (code) => resolve({ status: code, stdout, stderr }));
  });
}

it('posts an alert through a bridge webhook, and exits non-zero once the hook is removed', async () => {
  const ops = await hs.createUser('ops');
  const bridge = hs.bridgeUserId!;
  const roomId = await hs.createRoom(ops, { name: 'Alerts', invite: [bridge], extra: { power_level_content_override: { users: { [ops.userId]: 100, [bridge]: 50 } } } });
  await hs.waitFor(roomId, (e) => e.type === 'm.room.member' && e.state_key === bridge && e.content.membership === 'join');
  const asked = await hs.send(ops, roomId, '!bridge webhook alerts');
  await hs.waitFor(roomId, (e) => e.sender === bridge && String(e.content.body).startsWith('Created the webhook'), { after: asked });
  const direct = await hs.services.accountData.get(bridge, undefined, 'm.direct');
  const dm = (direct[ops.userId] as string[])[0]!;
  const details = await hs.waitFor(dm, (e) => e.sender === bridge && String(e.content.body).includes('/webhook/'));
  const url = String(details.content.body).split('\n').find((line) => line.includes('/webhook/'))!;

  const sent = await run(url, 'disk', 'almost', 'full', '<db-1>');
  expect(sent.status).toBe(0);
  const alert = await hs.waitFor(roomId, (e) => e.sender === bridge && String(e.content.body).includes('disk almost full'));
  expect(alert.content).toMatchObject({
    msgtype: 'm.notice',
    body: 'send-alert: [CRITICAL] disk almost full <db-1>',
    formatted_body: '<strong>send-alert</strong>: <strong>[CRITICAL]</strong> disk almost full &lt;db-1&gt;',
  });
  expect(sent.stdout).toContain(alert.event_id);

  await hs.send(ops, roomId, '!bridge webhook remove alerts');
  await hs.waitFor(roomId, (e) => e.sender === bridge && String(e.content.body).includes('no longer works'));
  const refused = await run(url, 'again');
  expect(refused.status).toBe(1);
  expect(refused.stderr).toContain('the webhook answered 404');

  expect(spawnSync(process.execPath, [SCRIPT], { encoding: 'utf8', env: { ...process.env, WEBHOOK_URL: '' } }).status).toBe(2);
});
