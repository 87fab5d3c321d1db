/**
 * The alert recipe's request, checked against a local receiver standing in for the bridge's
 * webhook (the bridge itself arrives in another branch; then this points at the real hook).
 */
import { spawnSync } from 'node:child_process';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, expect, it } from 'vitest';

const SCRIPT = fileURLToPath(new URL('./send-alert.mjs', import.meta.url));
const received: Array<{ method: string; type: string | undefined; body: unknown }> = [];
let status = 200;
const receiver = createServer((req: IncomingMessage, res) => {
  let text = '';
  req.on('data', (c: Buffer) => (text += c));
  req.on('end', () => {
    received.push({ method: req.method!, type: req.headers['content-type'], body: JSON.parse(text) });
    res.writeHead(status, { 'Content-Type': 'application/json' }).end(status === 200 ? '{}' : '{"errcode":"M_FORBIDDEN","error":"bad hook"}');
  });
});
let url: string;

beforeAll(async () => {
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook/abc`;
});
afterAll(() => new Promise<void>((resolve) => receiver.close(() => resolve())));

it('posts the alert as JSON and reports a refusal with a non-zero exit', async () => {
  const run = (...args: string[]) =>
    new Promise<{ status: number | null; stderr: string }>((resolve) => {
      // Async spawn: the receiver runs in this process and must keep answering.
      import('node:child_process').then(({ spawn }) => {
        const child = spawn(process.execPath, [SCRIPT, ...args], { env: { ...process.env, WEBHOOK_URL: url, SEVERITY: 'critical' } });
        let stderr = '';
        child.stderr.on('data', (c: Buffer) => (stderr += c));
        child.on('exit', (code) => resolve({ status: code, stderr }));
      });
    });
  expect((await run('disk', 'almost', 'full')).status).toBe(0);
  expect(received).toEqual([{ method: 'POST', type: 'application/json', body: { text: 'disk almost full', severity: 'critical', source: 'send-alert' } }]);

  status = 403;
  const refused = await run('again');
  expect(refused.status).toBe(1);
  expect(refused.stderr).toContain('the webhook answered 403');

  expect(spawnSync(process.execPath, [SCRIPT], { encoding: 'utf8', env: { ...process.env, WEBHOOK_URL: '' } }).status).toBe(2);
});
