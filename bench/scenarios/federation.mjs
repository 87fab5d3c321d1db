/**
 * Federation between two server processes on loopback, over TLS (a certificate made for the run;
 * certificates are not checked, everything else is as in production):
 * - wake across servers: a user on B long-polls /sync, a user on A sends; from A's send starting
 *   to B's sync answer carrying the message;
 * - an inbound transaction of 50 PDUs from one origin: the bench signs 50 events as A (with A's
 *   key, which B fetches from A) and times B's answer to the PUT /send;
 * - a big room joined over federation: B hosts a room with many members and events; a bot on A
 *   joins it; the time of the join request (make_join, send_join with the state and auth chain,
 *   every signature and auth check, history, the write);
 * - one hostile transaction (issue 28): a fake server of the bench's own (its own key, joined to
 *   the room like any server) sends B 50 events each naming 20 events nobody has, and answers
 *   every question B asks with more: 20 more such events per get_missing_events, 2,000 events of
 *   state. What it costs B: the time to its answer, B's CPU, the requests B sends, the bytes it
 *   reads, B's memory after.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import { join, resolve } from 'node:path';
import { Client, CS, roomPath } from '../lib/http-client.mjs';
import { registerUsers } from '../lib/setup.mjs';
import { summarize } from '../lib/stats.mjs';
import { round } from '../lib/server.mjs';
import { Worker } from '../lib/workers.mjs';

export const name = 'federation';
export const standalone = true;

/** @param {import('../run.mjs').StandaloneContext} ctx */
export async function run(ctx) {
  const settings = ctx.settings.federation;
  const dir = mkdtempSync(join(ctx.dbDir, 'bhs-bench-federation-'));
  try {
    const cert = makeCertificate(dir);
    const [portA, portB] = await freePorts(2);
    const a = await startFederating(ctx, dir, cert, 'a', portA);
    const b = await startFederating(ctx, dir, cert, 'b', portB);
    const results = [];
    const [botA] = await registerUsers({ server: a, sharedSecret: ctx.sharedSecret }, 'fedbot', 1);
    const [aliceB] = await registerUsers({ server: b, sharedSecret: ctx.sharedSecret }, 'fedalice', 1);
    const clientA = new Client(a.baseUrl);
    const clientB = new Client(b.baseUrl);
    try {
      const { room_id: roomId } = await clientA.ok('POST', `${CS}/createRoom`, { token: botA.access_token, body: { preset: 'public_chat' } });
      await clientB.ok('POST', `${CS}/join/${roomPath(roomId)}?server_name=${encodeURIComponent(a.serverName)}`, { token: aliceB.access_token, body: {} });
      results.push(await wakeAcross(ctx, a, b, roomId, botA, aliceB, settings.wakeIterations));
      results.push(await inboundTransactions(ctx, a, b, dir, roomId, botA, aliceB, settings.transactions));
      results.push(await hostileTransactions(ctx, b, cert, roomId, settings.hostileTransactions ?? 3));
      results.push(await bigRoomJoin(ctx, a, b, settings.bigRoom));
    } finally {
      clientA.close();
      clientB.close();
    }
    return results;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function startFederating(ctx, dir, cert, label, port) {
  const serverName = `127.0.0.1:${port}`;
  const configPath = join(dir, `${label}.yaml`);
  writeFileSync(
    configPath,
    [
      `server_name: "${serverName}"`,
      `signing_key_path: "${join(dir, `${label}.signing.key`)}"`,
      `tls_certificate_path: "${cert.certPath}"`,
      `tls_private_key_path: "${cert.keyPath}"`,
      'federation_verify_certificates: false',
      // Both servers are on loopback, which production refuses to contact.
      'ip_range_blacklist: []',
      'bridge: { enabled: false }',
      '',
    ].join('\n'),
  );
  const server = await ctx.startServer({
    synchronous: 'full',
    tls: true,
    env: {
      BOT_HOMESERVER_CONFIG: configPath,
      BOT_HOMESERVER_SERVER_NAME: serverName,
      BOT_HOMESERVER_LISTEN__PORT: String(port),
      // rc_federation (Synapse's defaults: 10 requests a second per origin, then 500 ms each)
      // would measure the rate limit, not the server: the rounds here come 40 a second.
      BOT_HOMESERVER_RC_FEDERATION__SLEEP_LIMIT: '100000',
      BOT_HOMESERVER_RC_FEDERATION__CONCURRENT: '100',
      BOT_HOMESERVER_RC_FEDERATION__REJECT_LIMIT: '100000',
    },
  });
  server.serverName = serverName;
  server.signingKeyPath = join(dir, `${label}.signing.key`);
  return server;
}

/** Send on A, long-poll on B: the sync-wake worker with the sender on the other server. */
async function wakeAcross(ctx, a, b, roomId, botA, aliceB, iterations) {
  const worker = await Worker.start('federation-wake');
  try {
    const args = { baseUrl: b.baseUrl, senderBaseUrl: a.baseUrl, roomId, senderToken: botA.access_token, syncerToken: aliceB.access_token, parkDelayMs: 15, tag: `${ctx.runId}-fed` };
    await worker.run('wake-latency', { ...args, iterations: 0, warmup: 20, tag: `${args.tag}-warmup` });
    const cpuA = a.cpuMs();
    const cpuB = b.cpuMs();
    const measured = await worker.run('wake-latency', { ...args, iterations, warmup: 0 });
    const ops = measured.wake.length;
    return {
      scenario: name,
      variant: 'send on A → long-poll on B',
      synchronous: 'full',
      ops,
      latency_ms: summarize(measured.wake),
      send_latency_ms: summarize(measured.send),
      server: { cpu_ms_per_op: round((a.cpuMs() - cpuA + (b.cpuMs() - cpuB)) / Math.max(1, ops), 3), rss_mb: b.memory().rssMb },
      errors: measured.errors,
      missed: measured.missed,
      notes: ['latency from A\u2019s send starting to B\u2019s sync answer; CPU is both servers\u2019 together'],
    };
  } finally {
    worker.kill();
  }
}

/**
 * Transactions of 50 PDUs, signed as A (with A's own key) and sent to B, one at a time: each
 * builds on the last, so B checks, authorises and stores 50 new events per transaction.
 */
async function inboundTransactions(ctx, a, b, dir, roomId, botA, aliceB, rounds) {
  const dist = resolve(ctx.repoDir, 'dist/src');
  const { parseSigningKeyFile } = await import(`${dist}/federation/signing-key.js`);
  const { finishPdu } = await import(`${dist}/rooms/pdu.js`);
  const { knownRoomVersion } = await import(`${dist}/rooms/room-versions.js`);
  const { canonicalJsonBytes } = await import(`${dist}/core/canonical-json.js`);
  const signer = parseSigningKeyFile(readFileSync(a.signingKeyPath, 'utf8'), a.serverName);
  const federationRequest = (method, path, body) => signedRequest(signer, canonicalJsonBytes, b, method, path, body);

  const version = knownRoomVersion('10');
  const stateIds = await clientOk(b, aliceB, 'GET', `${CS}/rooms/${roomPath(roomId)}/state`);
  const idOf = (type, key) => stateIds.find((event) => event.type === type && event.state_key === key).event_id;
  const authEvents = [idOf('m.room.create', ''), idOf('m.room.power_levels', ''), idOf('m.room.member', botA.user_id)];
  const latest = await clientOk(b, aliceB, 'GET', `${CS}/rooms/${roomPath(roomId)}/messages?dir=b&limit=1`);
  let prev = latest.chunk[0].event_id;
  let depth = (await federationRequest('GET', `/_matrix/federation/v1/event/${encodeURIComponent(prev)}`)).pdus[0].depth;
  const times = [];
  const cpuBefore = b.cpuMs();
  for (let round = -2; round < rounds; round++) {
    const pdus = [];
    for (let i = 0; i < 50; i++) {
      const { pdu, eventId } = finishPdu(
        { room_id: roomId, sender: botA.user_id, type: 'm.room.message', content: { msgtype: 'm.text', body: `txn ${round} pdu ${i}` }, origin_server_ts: Date.now(), depth: ++depth, prev_events: [prev], auth_events: authEvents },
        version,
        signer,
      );
      pdus.push(pdu);
      prev = eventId;
    }
    const body = { origin: a.serverName, origin_server_ts: Date.now(), pdus, edus: [] };
    const started = performance.now();
    const answer = await federationRequest('PUT', `/_matrix/federation/v1/send/${ctx.runId}-${round}`, body);
    const ms = performance.now() - started;
    const failed = Object.values(answer.pdus ?? {}).filter((result) => result.error).length;
    if (failed > 0 || Object.keys(answer.pdus ?? {}).length !== 50) throw new Error(`B refused ${failed} of the 50 PDUs: ${JSON.stringify(answer).slice(0, 300)}`);
    if (round >= 0) times.push(ms);
  }
  return {
    scenario: name,
    variant: 'inbound transaction of 50 PDUs, one origin',
    synchronous: 'full',
    ops: times.length,
    latency_ms: summarize(times),
    server: { cpu_ms_per_op: round((b.cpuMs() - cpuBefore) / (rounds + 2), 2), rss_mb: b.memory().rssMb },
    errors: 0,
    notes: ['from the PUT /send going out to B\u2019s answer; every PDU checked (signature, hash, auth against its auth events, the state before it and the current state) and stored'],
  };
}

/**
 * A fake server that joins B's room and then sends transactions of bait: 50 events each naming 20
 * events nobody has. B may ask it (it has a member in the room); every answer names more missing
 * events. Each transaction comes under a new id, back to back, as an attacker would repeat it.
 */
async function hostileTransactions(ctx, b, cert, roomId, rounds) {
  const dist = resolve(ctx.repoDir, 'dist/src');
  const { ed25519Signer, signJson } = await import(`${dist}/core/signed-json.js`);
  const { finishPdu } = await import(`${dist}/rooms/pdu.js`);
  const { knownRoomVersion } = await import(`${dist}/rooms/room-versions.js`);
  const { canonicalJsonBytes } = await import(`${dist}/core/canonical-json.js`);
  const { randomBytes } = await import('node:crypto');
  const [port] = await freePorts(1);
  const serverName = `127.0.0.1:${port}`;
  const signer = ed25519Signer(serverName, 'evil', randomBytes(32));
  const mallory = `@mallory:${serverName}`;
  const fakeId = () => `$${randomBytes(32).toString('base64url')}`;
  let asked = 0;
  let bytesServed = 0;
  let bait = () => [];
  let state = [];
  const served = new Map();
  const answer = (res, status, body) => {
    const payload = Buffer.from(JSON.stringify(body));
    if (!status || status === 200) bytesServed += payload.length;
    res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': payload.length });
    res.end(payload);
  };
  const fake = https.createServer({ key: readFileSync(cert.keyPath), cert: readFileSync(cert.certPath) }, (req, res) => {
    req.resume();
    req.on('end', () => {
      const path = (req.url ?? '').split('?')[0];
      if (path.startsWith('/_matrix/key/v2/server')) {
        return answer(res, 200, signJson({ server_name: serverName, valid_until_ts: Date.now() + 3_600_000, verify_keys: { [signer.keyId]: { key: signer.publicKey } }, old_verify_keys: {} }, signer));
      }
      if (path.startsWith('/_matrix/federation/v1/send/')) return answer(res, 200, { pdus: {} });
      asked++;
      if (path.startsWith('/_matrix/federation/v1/get_missing_events/')) return answer(res, 200, { events: bait(20) });
      if (path.startsWith('/_matrix/federation/v1/state_ids/')) return answer(res, 200, { pdu_ids: state.map((event) => event.eventId), auth_chain_ids: [] });
      if (path.startsWith('/_matrix/federation/v1/state/')) return answer(res, 200, { pdus: state.map((event) => event.pdu), auth_chain: [] });
      const event = path.startsWith('/_matrix/federation/v1/event/') ? served.get(decodeURIComponent(path.slice('/_matrix/federation/v1/event/'.length))) : undefined;
      if (event) return answer(res, 200, { origin: serverName, origin_server_ts: Date.now(), pdus: [event] });
      answer(res, 404, { errcode: 'M_NOT_FOUND', error: 'no' });
    });
  });
  await new Promise((resolvePromise) => fake.listen(port, '127.0.0.1', resolvePromise));
  try {
    const request = (method, path, body) => signedRequest(signer, canonicalJsonBytes, b, method, path, body);
    const made = await request('GET', `/_matrix/federation/v1/make_join/${encodeURIComponent(roomId)}/${encodeURIComponent(mallory)}?ver=10`);
    const version = knownRoomVersion(made.room_version);
    const join = finishPdu({ ...made.event, origin_server_ts: Date.now() }, version, signer);
    const joined = await request('PUT', `/_matrix/federation/v2/send_join/${encodeURIComponent(roomId)}/${encodeURIComponent(join.eventId)}`, join.pdu);
    const { eventIdOf } = await import(`${dist}/rooms/pdu.js`);
    const idOfType = (type) => eventIdOf(joined.state.find((event) => event.type === type && event.state_key === ''), version);
    const baseAuth = [idOfType('m.room.create'), idOfType('m.room.power_levels')];
    const authEvents = [...baseAuth, join.eventId];
    const depth = made.event.depth;
    bait = (count) =>
      Array.from({ length: count }, (_, i) =>
        finishPdu(
          { room_id: roomId, sender: mallory, type: 'm.room.message', content: { msgtype: 'm.text', body: `bait ${i}` }, origin_server_ts: Date.now(), depth: depth + 1 + i, prev_events: Array.from({ length: 20 }, fakeId), auth_events: authEvents },
          version,
          signer,
        ).pdu,
      );
    state = Array.from({ length: 2000 }, (_, i) => {
      const user = `@sock${i}:${serverName}`;
      return finishPdu({ room_id: roomId, sender: user, type: 'm.room.member', state_key: user, content: { membership: 'join', displayname: 'x'.repeat(200) }, origin_server_ts: Date.now(), depth: 5, prev_events: [fakeId()], auth_events: baseAuth }, version, signer);
    });
    for (const event of state) served.set(event.eventId, event.pdu);
    const rssBefore = b.memory().rssMb;
    const times = [];
    const requests = [];
    const bytes = [];
    const cpuBefore = b.cpuMs();
    for (let round = 0; round < rounds; round++) {
      const askedBefore = asked;
      const bytesBefore = bytesServed;
      const started = performance.now();
      const reply = await request('PUT', `/_matrix/federation/v1/send/${ctx.runId}-hostile-${round}`, { origin: serverName, origin_server_ts: Date.now(), pdus: bait(50), edus: [] });
      times.push(performance.now() - started);
      requests.push(asked - askedBefore);
      bytes.push(bytesServed - bytesBefore);
      const accepted = Object.values(reply.pdus ?? {}).filter((result) => !result.error).length;
      if (accepted > 0) throw new Error(`B accepted ${accepted} of the bait events`);
    }
    return {
      scenario: name,
      variant: 'hostile transaction: 50 events each naming 20 unknown, every answer naming more',
      synchronous: 'full',
      ops: times.length,
      latency_ms: summarize(times),
      server: { cpu_ms_per_op: round((b.cpuMs() - cpuBefore) / rounds, 1), rss_mb: b.memory().rssMb },
      errors: 0,
      hostile: { requests_per_txn: requests, kib_read_per_txn: bytes.map((n) => Math.round(n / 1024)), rss_mb_before: rssBefore },
      notes: [`requests B sent the hostile server per transaction: ${requests.join(', ')}; KiB it read: ${bytes.map((n) => Math.round(n / 1024)).join(', ')}; B's RSS ${rssBefore} → ${b.memory().rssMb} MB; every bait event refused`],
    };
  } finally {
    await new Promise((resolvePromise) => fake.close(resolvePromise));
    fake.closeAllConnections?.();
  }
}

/** B hosts a room of `members` members and `events` events; a bot on A joins it. */
async function bigRoomJoin(ctx, a, b, { members, events }) {
  const users = await registerUsers({ server: b, sharedSecret: ctx.sharedSecret }, 'member', members);
  const client = new Client(b.baseUrl, { maxSockets: 10 });
  try {
    const { room_id: roomId } = await client.ok('POST', `${CS}/createRoom`, { token: users[0].access_token, body: { preset: 'public_chat' } });
    await inParallel(users.slice(1), 10, (user) => client.ok('POST', `${CS}/join/${roomPath(roomId)}`, { token: user.access_token, body: {} }));
    let sent = 0;
    const posters = users.slice(0, 10);
    await inParallel(posters, 10, async (user, index) => {
      for (let i = index; i < events - members; i += posters.length) {
        await client.ok('PUT', `${CS}/rooms/${roomPath(roomId)}/send/m.room.message/seed-${i}`, { token: user.access_token, body: { msgtype: 'm.text', body: `seed ${i}` } });
        sent++;
      }
    });
    ctx.log(`  seeded a room of ${members} members and ${sent + members + 5} events on B`);
    const [bot] = await registerUsers({ server: a, sharedSecret: ctx.sharedSecret }, 'bigjoiner', 1);
    const clientA = new Client(a.baseUrl);
    try {
      const cpuA = a.cpuMs();
      const cpuB = b.cpuMs();
      const started = performance.now();
      await clientA.ok('POST', `${CS}/join/${roomPath(roomId)}?server_name=${encodeURIComponent(b.serverName)}`, { token: bot.access_token, body: {}, timeoutMs: 120_000 });
      const ms = performance.now() - started;
      const joined = await clientA.ok('GET', `${CS}/rooms/${roomPath(roomId)}/joined_members`, { token: bot.access_token });
      return {
        scenario: name,
        variant: `join a room of ${members} members and ${Math.round((sent + members) / 1000)}k events over federation`,
        synchronous: 'full',
        ops: 1,
        latency_ms: summarize([ms]),
        server: { cpu_ms_per_op: round(a.cpuMs() - cpuA + (b.cpuMs() - cpuB), 0), rss_mb: a.memory().rssMb },
        errors: 0,
        notes: [`the join request on A, to the room being readable there (${Object.keys(joined.joined).length} members seen); CPU of both servers`],
      };
    } finally {
      clientA.close();
    }
  } finally {
    client.close();
  }
}

async function clientOk(server, user, method, path) {
  const client = new Client(server.baseUrl);
  try {
    const body = await client.ok(method, path, { token: user.access_token });
    // The bench client parses objects only (the answers it times); a list comes as text.
    return typeof body === 'string' ? JSON.parse(body) : body;
  } finally {
    client.close();
  }
}

async function inParallel(items, limit, work) {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length) {
        const index = next++;
        await work(items[index], index);
      }
    }),
  );
}

/** A request to B signed as A (X-Matrix), answered as JSON. */
function signedRequest(signer, canonicalJsonBytes, b, method, path, body) {
  const signed = { method, uri: path, origin: signer.serverName, destination: b.serverName, ...(body !== undefined ? { content: body } : {}) };
  const sig = signer.sign(canonicalJsonBytes(signed)).toString('base64').replace(/=+$/, '');
  const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
  const headers = {
    Authorization: `X-Matrix origin="${signer.serverName}",destination="${b.serverName}",key="${signer.keyId}",sig="${sig}"`,
    ...(payload ? { 'Content-Type': 'application/json', 'Content-Length': payload.length } : {}),
  };
  return new Promise((resolvePromise, reject) => {
    const req = https.request({ host: '127.0.0.1', port: b.port, method, path, headers, rejectUnauthorized: false }, (res) => {
      const chunks = [];
      res.on('data', (chunk) => chunks.push(chunk));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        if (res.statusCode !== 200) reject(new Error(`${method} ${path} -> ${res.statusCode}: ${text.slice(0, 300)}`));
        else resolvePromise(JSON.parse(text));
      });
    });
    req.on('error', reject);
    req.end(payload);
  });
}

function makeCertificate(dir) {
  const keyPath = join(dir, 'tls.key');
  const certPath = join(dir, 'tls.crt');
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', keyPath, '-out', certPath, '-days', '2', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1'], { stdio: 'ignore' });
  return { keyPath, certPath };
}

async function freePorts(count) {
  const servers = await Promise.all(
    Array.from({ length: count }, () => new Promise((resolvePromise) => {
      const server = net.createServer();
      server.listen(0, '127.0.0.1', () => resolvePromise(server));
    })),
  );
  const ports = servers.map((server) => server.address().port);
  await Promise.all(servers.map((server) => new Promise((resolvePromise) => server.close(resolvePromise))));
  return ports;
}

