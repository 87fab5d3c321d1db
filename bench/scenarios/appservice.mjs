/**
 * Application service transactions: how soon an event reaches an appservice, and how many events
 * per second reach it. An appservice (an HTTP listener in this process) is registered with the
 * server and has a user in a room; a user sends messages into the room.
 * - latency: one message at a time; the time runs from the send starting to the transaction that
 *   carries it arriving at the appservice.
 * - throughput: `concurrency` senders send `burst` messages as fast as the server takes them; the
 *   rate is messages delivered to the appservice per second, from the first send to the last
 *   delivery (transactions batch up to 100 events).
 */
import { writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { Client, CS, registerUser, roomPath } from '../lib/http-client.mjs';
import { round } from '../lib/server.mjs';
import { summarize } from '../lib/stats.mjs';
import { machineCpuOver, systemCpu } from '../lib/system.mjs';

export const name = 'appservice';
export const standalone = true;

const AS_TOKEN = 'bench-as-token';
const HS_TOKEN = 'bench-hs-token';
const WARMUP = 50;

/** @param {import('../run.mjs').StandaloneContext} ctx */
export async function run(ctx) {
  const { iterations, burst, concurrency } = ctx.settings.appservice;
  const receiver = await listen();
  let server;
  try {
    const dir = ctx.dbDir;
    const registration = join(dir, `bench-appservice-${ctx.runId}.yaml`);
    writeFileSync(
      registration,
      JSON.stringify({
        id: 'bench',
        url: `http://127.0.0.1:${receiver.port}`,
        as_token: AS_TOKEN,
        hs_token: HS_TOKEN,
        sender_localpart: 'benchservice',
        rate_limited: false,
        namespaces: { users: [{ exclusive: true, regex: '@_bench_.*' }], aliases: [], rooms: [] },
      }),
    );
    const config = join(dir, `bench-appservice-${ctx.runId}-config.yaml`);
    writeFileSync(config, `app_service_config_files:\n  - ${JSON.stringify(registration)}\n`);
    server = await ctx.startServer({ synchronous: 'full', env: { BOT_HOMESERVER_CONFIG: config } });
    const client = new Client(server.baseUrl, { maxSockets: concurrency });
    try {
      const sender = await registerUser(client, ctx.sharedSecret, 'asbench-sender', 'pw-asbench-sender');
      const { room_id: roomId } = await client.ok('POST', `${CS}/createRoom`, { token: sender.access_token, body: { preset: 'public_chat' } });
      await client.ok('POST', `${CS}/register`, { token: AS_TOKEN, body: { type: 'm.login.application_service', username: '_bench_listener', inhibit_login: true } });
      await client.ok('POST', `${CS}/join/${roomPath(roomId)}?user_id=${encodeURIComponent('@_bench_listener:bench.local')}`, { token: AS_TOKEN, body: {} });
      let txn = 0;
      const send = (body) => client.ok('PUT', `${CS}/rooms/${roomPath(roomId)}/send/m.room.message/as-${ctx.runId}-${++txn}`, { token: sender.access_token, body: { msgtype: 'm.text', body } });

      // Latency, one message at a time.
      const latencies = [];
      const latencyCpuFrom = server.cpuMs();
      for (let i = 0; i < WARMUP + iterations; i++) {
        const marker = `lat-${ctx.runId}-${i}`;
        const arrived = receiver.arrival(marker);
        const started = performance.now();
        await send(marker);
        const at = await arrived;
        if (i >= WARMUP) latencies.push(at - started);
      }
      const latencyRow = row('send → transaction latency', latencies, server, (server.cpuMs() - latencyCpuFrom) / (WARMUP + iterations));

      // Throughput: a burst from several senders at once.
      const markers = Array.from({ length: burst }, (_, i) => `burst-${ctx.runId}-${i}`);
      const all = Promise.all(markers.map((marker) => receiver.arrival(marker)));
      const cpuFrom = server.cpuMs();
      const machineFrom = systemCpu();
      const started = performance.now();
      let next = 0;
      await Promise.all(
        Array.from({ length: concurrency }, async () => {
          while (next < markers.length) await send(markers[next++]);
        }),
      );
      const sentMs = performance.now() - started;
      const deliveredMs = Math.max(...(await all)) - started;
      const cpuMs = server.cpuMs() - cpuFrom;
      server.assertAlive();
      const throughputRow = {
        scenario: name,
        variant: `throughput, ${concurrency} senders`,
        synchronous: 'full',
        params: { burst, concurrency },
        ops: burst,
        // Delivered to the appservice per second; the sends alone went at sends_per_s.
        rate_per_s: round(burst / (deliveredMs / 1000), 1),
        sends_per_s: round(burst / (sentMs / 1000), 1),
        latency_ms: summarize([]),
        transactions: receiver.transactionsSince(started),
        errors: 0,
        server: { cpu_ms_per_op: round(cpuMs / burst, 3), cpu_pct: round((cpuMs / deliveredMs) * 100, 1), rss_mb: server.memory().rssMb },
        machine_cpu: machineCpuOver(machineFrom, systemCpu(), deliveredMs, cpuMs, 0),
      };
      return [latencyRow, throughputRow];
    } finally {
      client.close();
    }
  } finally {
    await server?.stop();
    receiver.close();
  }
}

function row(variant, samples, server, cpuMsPerOp) {
  return {
    scenario: name,
    variant,
    synchronous: 'full',
    params: { iterations: samples.length, warmup_rounds: WARMUP },
    ops: samples.length,
    latency_ms: summarize(samples),
    errors: 0,
    // Per message: its send, its transaction, and the receiver's answer.
    server: { cpu_ms_per_op: round(cpuMsPerOp, 3), rss_mb: server.memory().rssMb },
  };
}

/** The appservice: answers every transaction at once and notes when each event body arrived. */
async function listen() {
  const waiting = new Map();
  const arrived = new Map();
  const transactionTimes = [];
  const server = createServer((req, res) => {
    const chunks = [];
    req.on('data', (chunk) => chunks.push(chunk));
    req.on('end', () => {
      const at = performance.now();
      if (req.headers.authorization !== `Bearer ${HS_TOKEN}`) return res.writeHead(403).end('{}');
      if (req.method === 'PUT' && req.url.startsWith('/_matrix/app/v1/transactions/')) {
        transactionTimes.push(at);
        for (const event of JSON.parse(Buffer.concat(chunks).toString()).events ?? []) {
          const body = event.content?.body;
          if (typeof body !== 'string') continue;
          const resolve = waiting.get(body);
          if (resolve) {
            waiting.delete(body);
            resolve(at);
          } else arrived.set(body, at);
        }
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: server.address().port,
    arrival(marker) {
      if (arrived.has(marker)) return Promise.resolve(arrived.get(marker));
      return new Promise((resolve, reject) => {
        waiting.set(marker, resolve);
        setTimeout(() => reject(new Error(`${marker} did not reach the appservice within 30 s`)), 30_000).unref();
      });
    },
    transactionsSince: (from) => transactionTimes.filter((t) => t >= from).length,
    close: () => server.close(),
  };
}
