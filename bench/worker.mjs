/**
 * A load-generator process, forked by bench/run.mjs. It receives tasks over IPC
 * ({ id, task, args }) and answers { id, result } or { id, error }. Keep it cheap: it shares the
 * machine's CPUs with the server under test.
 */
import { Client, CS, registerUser, roomPath } from './lib/http-client.mjs';

/** Wall-clock milliseconds with sub-millisecond resolution, comparable across processes. */
const epochNow = () => performance.timeOrigin + performance.now();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const sleepUntil = (epochMs) => sleep(Math.max(0, epochMs - epochNow()));

/** Keeps the first few failures verbatim for the report; counts all of them. */
class Errors {
  constructor() {
    this.count = 0;
    this.samples = [];
  }
  add(what) {
    this.count++;
    if (this.samples.length < 5) this.samples.push(String(what).slice(0, 500));
  }
  fromResponse(method, path, res) {
    this.add(`${method} ${path.replace(/access_token=[^&]*/, 'access_token=<redacted>')} -> ${res.status} ${typeof res.body === 'string' ? res.body : JSON.stringify(res.body)}`);
  }
}

function cpuMsSince(start) {
  const d = process.cpuUsage(start);
  return (d.user + d.system) / 1000;
}

/** A sync answering this long after the send, without the message, was not woken by it. */
const NOT_WOKEN_MS = 5000;
/** Messages that never reach the sync before the wake test gives up. */
const MAX_MISSES = 3;

/** A webhook id is a credential: keep it out of the report. */
const redactWebhook = (path) => path.replace(/^\/webhook\/[^/?#]+/, '/webhook/<redacted>');

const tasks = {
  /** Answers once the process is up, so a measured window does not include node's start-up. */
  async ping() {
    return { pid: process.pid };
  },

  /**
   * Senders that each send requests back to back over their own keep-alive connection (see
   * closedLoop in lib/load.mjs for `target`). Requests completing inside
   * [startAt + warmupMs, startAt + warmupMs + durationMs] are measured.
   */
  async 'send-load'({ baseUrl, target, tokens, startAt, warmupMs, durationMs, tag }) {
    const measureFrom = startAt + warmupMs;
    const measureTo = measureFrom + durationMs;
    const latencies = [];
    const errors = new Errors();
    let completed = 0;
    let cpuStart;
    const cpuTimer = setTimeout(() => (cpuStart = process.cpuUsage()), Math.max(0, measureFrom - epochNow()));
    let genCpuMs = null;
    const cpuEndTimer = setTimeout(() => (genCpuMs = cpuStart ? cpuMsSince(cpuStart) : null), Math.max(0, measureTo - epochNow()));
    const withTxn = (target.paths?.[0] ?? target.path).endsWith('/');
    await sleepUntil(startAt);
    await Promise.all(
      tokens.map(async (token, s) => {
        const client = new Client(baseUrl);
        let seq = 0;
        try {
          while (epochNow() < measureTo) {
            const id = `${tag}-${process.pid}-${s}-${seq++}`;
            const base = target.paths ? target.paths[s] : target.path;
            const path = withTxn ? `${base}${id}` : base;
            const body = target.body === 'webhook' ? { text: `load ${id}` } : { msgtype: 'm.text', body: `load ${id}` };
            let res;
            try {
              res = await client.request(target.method, path, { token, body });
            } catch (err) {
              errors.add(err.message);
              await sleep(10); // a refused connection would otherwise spin
              continue;
            }
            const done = epochNow();
            if (res.status !== 200 || res.body?.[target.expect] === undefined) {
              errors.fromResponse(target.method, redactWebhook(path), res);
              continue;
            }
            if (done >= measureFrom && done <= measureTo) {
              completed++;
              latencies.push(res.ms);
            }
          }
        } finally {
          client.close();
        }
      }),
    );
    clearTimeout(cpuTimer);
    clearTimeout(cpuEndTimer);
    // The last answer can land just before the end timer would have fired.
    if (genCpuMs === null && cpuStart) genCpuMs = cpuMsSince(cpuStart);
    return { completed, latencies, errors: errors.count, errorSamples: errors.samples, genCpuMs };
  },

  /**
   * One request at a time, each after `gapMs` of silence: the wake scenario's rhythm, for a
   * reference server. Returns the latencies (request start to last byte).
   */
  async 'idle-requests'({ baseUrl, path, count, gapMs }) {
    const client = new Client(baseUrl);
    const errors = new Errors();
    const latencies = [];
    const cpuStart = process.cpuUsage();
    try {
      for (let i = -20; i < count; i++) {
        await sleep(gapMs);
        const res = await client.request('PUT', `${path}${i}`, { body: { msgtype: 'm.text', body: `idle ${i}` } });
        if (res.status !== 200) errors.fromResponse('PUT', path, res);
        else if (i >= 0) latencies.push(res.ms);
      }
    } finally {
      client.close();
    }
    return { latencies, errors: errors.count, errorSamples: errors.samples, genCpuMs: cpuMsSince(cpuStart) };
  },

  /**
   * One user long-polls /sync; another sends one message at a time once the poll has had
   * `parkDelayMs` to park. Measures from the send's start to the sync answer carrying that message.
   * With `webhookPath`, the message is posted to that webhook instead (the bridge writes it); with
   * `encrypted` too, the room is encrypted and the message is the bridge's next m.room.encrypted.
   */
  async 'wake-latency'({ baseUrl, senderBaseUrl, roomId, senderToken, syncerToken, warmup, iterations, parkDelayMs, tag, webhookPath, encrypted }) {
    // senderBaseUrl: the sender on another server (the federation scenario), the syncer on baseUrl.
    const sender = new Client(senderBaseUrl ?? baseUrl);
    const syncer = new Client(baseUrl);
    const errors = new Errors();
    const wake = [];
    const send = [];
    let earlyReturns = 0; // sync answers without the message that came before the send started
    let extraPolls = 0; // sync answers without the message after the send started
    let missed = 0; // messages never seen within the retry budget
    const room = roomPath(roomId);
    const cpuStart = process.cpuUsage();
    try {
      const first = await syncer.ok('GET', `${CS}/sync?timeout=0`, { token: syncerToken });
      let since = first.next_batch;
      // The first `warmup` rounds run the same path unmeasured, so the JIT has warmed up.
      for (let i = -warmup; i < iterations; i++) {
        const marker = `wake ${tag} ${i}`;
        let sendStarted = Infinity;
        const poll = async () => {
          // Re-poll until the marker arrives: an answer without it is counted, not measured.
          for (let attempt = 0; attempt < 5; attempt++) {
            const path = `${CS}/sync?timeout=30000&since=${encodeURIComponent(since)}`;
            const res = await syncer.request('GET', path, { token: syncerToken, timeoutMs: 40_000 });
            const gotAt = epochNow();
            if (res.status !== 200) {
              errors.fromResponse('GET', path, res);
              return null;
            }
            since = res.body.next_batch;
            const events = res.body.rooms?.join?.[roomId]?.timeline?.events ?? [];
            // Encrypted, the marker cannot be read: the bridge's next encrypted message is this round's.
            if (events.some((e) => (encrypted ? e.type === 'm.room.encrypted' : e.content?.body === marker))) return gotAt;
            if (gotAt < sendStarted) earlyReturns++;
            else if (gotAt - sendStarted > NOT_WOKEN_MS) return null; // it timed out: the send did not wake it
            else extraPolls++;
          }
          return null;
        };
        const polled = poll();
        await sleep(parkDelayMs);
        sendStarted = epochNow();
        const [method, path, options] = webhookPath
          ? ['POST', webhookPath, { body: { text: marker } }]
          : ['PUT', `${CS}/rooms/${room}/send/m.room.message/${tag}-${process.pid}-${i}`, { token: senderToken, body: { msgtype: 'm.text', body: marker } }];
        const sending = sender.request(method, path, options).then(
          (res) => {
            if (res.status !== 200) errors.fromResponse(method, redactWebhook(path), res);
            else send.push(res.ms);
            return res.status === 200;
          },
          (err) => {
            errors.add(err.message);
            return false;
          },
        );
        const [gotAt, sent] = await Promise.all([polled.catch((err) => (errors.add(err.message), null)), sending]);
        if (i < 0) {
          if (gotAt === null) throw new Error(`warm-up round ${i + warmup}: the message never reached the long-polling sync`);
          send.length = 0;
          continue;
        }
        if (!sent) continue;
        if (gotAt === null) {
          // Each miss costs a whole sync timeout; a few are enough to report the bug.
          if (++missed >= MAX_MISSES) break;
          continue;
        }
        wake.push(gotAt - sendStarted);
      }
    } finally {
      sender.close();
      syncer.close();
    }
    return { wake, send, errors: errors.count, errorSamples: errors.samples, earlyReturns, extraPolls, missed, genCpuMs: cpuMsSince(cpuStart) };
  },

  /**
   * Growth: the bot's initial sync (no `since`), `count` times one after another. Returns the
   * latencies, answer sizes, the joined rooms seen, and the last `next_batch` to go on from.
   */
  async 'growth-initial-sync'({ baseUrl, botToken, count }) {
    const client = new Client(baseUrl);
    const latencies = [];
    const bytes = [];
    const errors = new Errors();
    let since;
    let joinedRooms = 0;
    const cpuStart = process.cpuUsage();
    try {
      for (let i = 0; i < count; i++) {
        const path = `${CS}/sync?timeout=0`;
        const res = await client.request('GET', path, { token: botToken, timeoutMs: 120_000 });
        if (res.status !== 200) {
          errors.fromResponse('GET', path, res);
          continue;
        }
        latencies.push(res.ms);
        bytes.push(res.bytes);
        since = res.body.next_batch;
        joinedRooms = Object.keys(res.body.rooms?.join ?? {}).length;
      }
    } finally {
      client.close();
    }
    return { latencies, bytes, joinedRooms, since, errors: errors.count, errorSamples: errors.samples, genCpuMs: cpuMsSince(cpuStart) };
  },

  /**
   * Growth: `count` sends one after another by the poster, round-robin over `rooms`, or, with
   * `syncToken`, each send followed by that user's incremental `/sync?since=…&timeout=0`, timed
   * alone and checked to carry the message.
   */
  async 'growth-rounds'({ baseUrl, posterToken, syncToken, since, rooms, count, offset, tag }) {
    const poster = new Client(baseUrl);
    const syncer = new Client(baseUrl);
    const sendMs = [];
    const syncMs = [];
    const errors = new Errors();
    let missing = 0;
    const cpuStart = process.cpuUsage();
    try {
      for (let i = 0; i < count; i++) {
        const roomId = rooms[(offset + i) % rooms.length];
        const path = `${CS}/rooms/${roomPath(roomId)}/send/m.room.message/${tag}-${process.pid}-${i}`;
        const sent = await poster.request('PUT', path, { token: posterToken, body: { msgtype: 'm.text', body: `growth ${tag} ${i}` } });
        if (sent.status !== 200) {
          errors.fromResponse('PUT', path, sent);
          continue;
        }
        sendMs.push(sent.ms);
        if (!syncToken) continue;
        const syncPath = `${CS}/sync?timeout=0&since=${encodeURIComponent(since)}`;
        const res = await syncer.request('GET', syncPath, { token: syncToken });
        if (res.status !== 200) {
          errors.fromResponse('GET', syncPath, res);
          continue;
        }
        syncMs.push(res.ms);
        since = res.body.next_batch;
        const events = res.body.rooms?.join?.[roomId]?.timeline?.events ?? [];
        if (!events.some((e) => e.event_id === sent.body.event_id)) missing++;
      }
    } finally {
      poster.close();
      syncer.close();
    }
    return { sendMs, syncMs, since, missing, errors: errors.count, errorSamples: errors.samples, genCpuMs: cpuMsSince(cpuStart) };
  },

  /**
   * Registers `count` users (in no room), each with a first sync done, ready for 'park-start'.
   */
  async 'park-register'({ baseUrl, sharedSecret, count, prefix, concurrency }) {
    if (parked) throw new Error('parked syncs are already running');
    const client = new Client(baseUrl, { maxSockets: Infinity, maxFreeSockets: concurrency * 2 });
    parked = { client, users: new Array(count), stopped: false, errors: new Errors(), returns: 0, earlyReturns: 0, polls: 0 };
    const { users } = parked;
    let next = 0;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next < count) {
          const i = next++;
          users[i] = await registerUser(client, sharedSecret, `${prefix}${i}`, `pw-${prefix}${i}`);
          const first = await client.ok('GET', `${CS}/sync?timeout=0`, { token: users[i].access_token });
          users[i].since = first.next_batch;
        }
      }),
    );
    // Park over fresh connections only, so the server's socket count tells how many it holds.
    client.close();
    parked.client = new Client(baseUrl, { maxSockets: Infinity });
    return { registered: count };
  },

  /**
   * Parks one long-poll /sync for each registered user in [from, to), re-polling whenever one
   * returns. Resolves once those polls have been written to their sockets; the polls keep running
   * until 'park-stop'. The parent calls this a batch at a time and waits for the server to accept
   * each batch: a connect completes in the kernel before the server accepts it, so thousands at
   * once overflow the accept queue (backlog 511), and each dropped SYN costs a 1 s retransmit.
   */
  async 'park-batch'({ from, to, timeoutMs }) {
    const state = parked;
    if (!state) throw new Error('park-register first');
    await Promise.all(state.users.slice(from, to).map((user) => new Promise((sent) => parkLoop(state, user, timeoutMs, sent))));
    return { errors: state.errors.count, errorSamples: state.errors.samples };
  },

  async 'park-stop'() {
    const state = parked;
    if (!state) return null;
    state.stopped = true;
    state.client.close(); // destroys every socket; the server sees the clients go away
    parked = null;
    return { polls: state.polls, returns: state.returns, earlyReturns: state.earlyReturns, errors: state.errors.count, errorSamples: state.errors.samples };
  },

  /** Counters of the parked syncs while they run. */
  async 'park-status'() {
    const s = parked;
    return s && { polls: s.polls, returns: s.returns, earlyReturns: s.earlyReturns, errors: s.errors.count, errorSamples: s.errors.samples };
  },
};

let parked = null;

/** One user's endless long-poll. `sent` is called once the first poll is on the wire. */
function parkLoop(state, user, timeoutMs, sent) {
  if (state.stopped) return sent?.();
  const path = `${CS}/sync?timeout=${timeoutMs}&since=${encodeURIComponent(user.since)}`;
  const issuedAt = performance.now();
  state.polls++;
  state.client
    .request('GET', path, { token: user.access_token, timeoutMs: timeoutMs + 30_000, onSent: sent })
    .then(
      (res) => {
        if (state.stopped) return;
        state.returns++;
        if (res.status !== 200) {
          state.errors.fromResponse('GET', path, res);
        } else {
          // These users are in no room: an answer well before the timeout is a spurious wake-up.
          if (performance.now() - issuedAt < timeoutMs - 1000) state.earlyReturns++;
          user.since = res.body.next_batch;
        }
        parkLoop(state, user, timeoutMs);
      },
      (err) => {
        if (state.stopped) return;
        state.returns++;
        state.errors.add(err.message);
        setTimeout(() => parkLoop(state, user, timeoutMs), 100);
      },
    );
  if (sent) {
    // If the request fails before it is flushed, do not hold up the batch.
    setTimeout(sent, 10_000).unref();
  }
}

process.on('message', async (msg) => {
  const handler = tasks[msg.task];
  try {
    if (!handler) throw new Error(`unknown task ${msg.task}`);
    const result = await handler(msg.args ?? {});
    process.send({ id: msg.id, result });
  } catch (err) {
    process.send({ id: msg.id, error: err?.stack ?? String(err) });
  }
});

// The parent went away (finished, crashed or was interrupted): stop generating load.
process.on('disconnect', () => process.exit(0));
