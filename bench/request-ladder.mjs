#!/usr/bin/env node
/**
 * Server CPU per request for three requests of rising weight, on one server, one after another:
 * `GET /versions` (routing, hooks, the answer: what every request pays), `GET /account/whoami`
 * (the same with the access token checked) and `PUT .../send` (a message: all of the above, the
 * body, and the send path). With `bench/send-inprocess.mjs` (the send path alone, no HTTP, at a
 * given batch size) it splits a send's CPU into what HTTP and our framework cost and what the send
 * itself costs (docs/benchmarks.md, "The send path, fifth look").
 *
 *   node bench/request-ladder.mjs [--synchronous normal|full] [--concurrency 1,10] [--seconds 4]
 *
 * The clients run in this process (node:http, keep-alive, one connection each); the server is the
 * compiled one (`npm run build` first), its CPU read from /proc.
 */
import http from 'node:http';
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import { startServer } from './lib/server.mjs';
import { registerUsers, roomWith } from './lib/setup.mjs';

const { values: args } = parseArgs({
  options: {
    synchronous: { type: 'string', default: 'normal' },
    concurrency: { type: 'string', default: '1,10' },
    seconds: { type: 'string', default: '4' },
  },
});
const levels = args.concurrency.split(',').map(Number);
const windowMs = Number(args.seconds) * 1000;
const repoDir = new URL('..', import.meta.url).pathname;
const sharedSecret = randomBytes(16).toString('hex');
const server = await startServer({ repoDir, synchronous: args.synchronous, sharedSecret });
try {
  const ctx = { server, sharedSecret };
  const users = await registerUsers(ctx, 'ladder', Math.max(...levels));
  const roomId = await roomWith(ctx, users);
  const url = new URL(server.baseUrl);
  const agents = users.map(() => new http.Agent({ keepAlive: true, maxSockets: 1 }));
  let txn = 0;
  const request = (i, method, path, body) =>
    new Promise((resolve, reject) => {
      const headers = { authorization: `Bearer ${users[i].access_token}`, ...(body ? { 'content-type': 'application/json' } : {}) };
      const req = http.request({ agent: agents[i], host: url.hostname, port: url.port, method, path, headers }, (res) => {
        res.resume();
        res.on('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`${method} ${path}: ${res.statusCode}`))));
      });
      req.on('error', reject);
      req.end(body);
    });
  const requests = {
    'GET /versions': (i) => request(i, 'GET', '/_matrix/client/versions'),
    'GET /account/whoami': (i) => request(i, 'GET', '/_matrix/client/v3/account/whoami'),
    'PUT /send (a message)': (i) => {
      const id = txn++;
      return request(i, 'PUT', `/_matrix/client/v3/rooms/${encodeURIComponent(roomId)}/send/m.room.message/ladder${id}`, JSON.stringify({ msgtype: 'm.text', body: `message ${id}` }));
    },
  };
  /** Each of `clients` sends back to back for `ms`; answers how many requests were made. */
  const load = async (send, clients, ms) => {
    const end = performance.now() + ms;
    let done = 0;
    await Promise.all(
      Array.from({ length: clients }, async (_, i) => {
        while (performance.now() < end) {
          await send(i);
          done += 1;
        }
      }),
    );
    return done;
  };
  console.log(`| request | clients | requests/s | server CPU ms per request |  (synchronous=${args.synchronous})`);
  console.log('|---|--:|--:|--:|');
  for (const clients of levels) {
    for (const [name, send] of Object.entries(requests)) {
      await load(send, clients, 1000);
      const cpuFrom = server.cpuMs();
      const done = await load(send, clients, windowMs);
      const cpu = server.cpuMs() - cpuFrom;
      console.log(`| ${name} | ${clients} | ${Math.round(done / (windowMs / 1000))} | ${(cpu / done).toFixed(3)} |`);
    }
  }
} finally {
  await server.stop();
}
