#!/usr/bin/env node
// Reads `perf script` output (a `perf record -g -p <server pid>` of the server during a bench
// window; start the server with NODE_OPTIONS=--perf-basic-prof so JIT frames have names) and
// sums CPU samples by what the send path is doing: each sample goes to the first category, in
// the order below, whose pattern matches any frame of its stack. Unlike a V8 CPU profile this
// counts CPU only (a blocked fsync is not a sample), including SQLite's C and the kernel.
//   perf script -i perf.data | node bench/perf-categories.mjs [--ops N] [--hz 999]
import { createInterface } from 'node:readline';

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) : dflt;
};
const ops = opt('--ops', 0);
const hz = opt('--hz', 999);

// Most specific first: a sample inside signing that also has the writer's flush on its stack is signing.
const CATEGORIES = [
  // OpenSSL's (signOneShot, ed25519_*) or libsodium's (sodium-native: ge25519_*, fe25519_*, sc25519_*, its SHA-512).
  ['signing (ed25519)', /signOneShot|ed25519|ge25519_|fe25519_|sc25519_|crypto_sign|SHA512_Transform|crypto_hash_sha512/],
  ['content hash, reference hash, canonical JSON', /contentHash|essentialBytes|canonicalJson|redactPdu|eventIdFromHash|finishPdu/],
  ['auth rules', /checkEventAuth|authEventKeys/],
  // Checkpoints run in a thread of their own (storage/sqlite-checkpoints.ts), with no commit on their stack.
  ['SQLite commit and checkpoints (WAL write, fsync)', /commitTransaction|sqlite3VdbeHalt|walWriteOneFrame|pagerWalFrames|sqlite3WalFrames|walCheckpoint/],
  ['search index (after commit)', /indexSearchAfter|setSearchIndexedUpTo|SearchIndexer|catchUp/],
  ['SQL: event insert + room head', /insertEvents|setRoomHead/],
  ['SQL: transaction id lookup', /findEventByTxn|findEventsByTxns|TxnLookups/],
  ['SQL: other statements', /executeQuery|sqlite3_step|sqlite3VdbeExec/],
  ['access token (auth)', /authenticate|findAccessToken|hashToken|requireAccessToken/],
  ['building the event, snapshot', /prepareOne|buildPdu|\bbuild |advanceHead|rowFromEvent|assertEventSize|RoomSnapshot|reweigh/],
  ['federation / appservice fan-out', /enqueueHook|destinationsFor|commitListener|FederationSender|AppServiceSender/],
  ['notify (wake syncs)', /notify|Notifier/],
  ['metrics (prom-client)', /observe|prom-client|Histogram|Counter\b/],
  ['request logging', /onResponse|redactUrl|pino/],
  ['JSON body parse + validation', /parseJsonSafely|ContentTypeParser|validate|preValidation|Ajv|ajv/],
  ['routing, hooks, reply (Fastify)', /fastify|Reply\.|routeHandler|Router\.|hookRunner|onSendHook|handleRequest|chunk-IPXPDOKE/],
  ['V8 compiler and GC threads', /v8::internal::compiler|ConcurrentMarking|v8::platform|CompileLazy/],
  ['HTTP parse and socket I/O (node, kernel)', /parserOn|_http_|writev|tcp_|sock_|sys_read|epoll|uv__|Socket/],
  ['GC', /Scavenge|MarkCompact|GCTracer|Heap::|v8::internal::Scavenger|Sweeper/],
];

let total = 0;
const counts = new Map();
let frames = [];
let inSample = false;
const flush = () => {
  if (!inSample) return;
  total += 1;
  const stack = frames.join('\n');
  let cat = 'other';
  for (const [name, re] of CATEGORIES) {
    if (re.test(stack)) {
      cat = name;
      break;
    }
  }
  counts.set(cat, (counts.get(cat) ?? 0) + 1);
  frames = [];
  inSample = false;
};
const rl = createInterface({ input: process.stdin });
for await (const line of rl) {
  if (line.trim() === '') {
    flush();
    continue;
  }
  if (!line.startsWith('\t') && !line.startsWith(' ')) {
    flush();
    inSample = true;
    continue;
  }
  frames.push(line.trim());
}
flush();
const ms = (n) => (n * 1000) / hz;
console.log(`${total} samples = ${(ms(total) / 1000).toFixed(2)} s of server CPU${ops ? `, ${ops} ops: ${((ms(total) * 1000) / ops).toFixed(0)} µs/op` : ''}`);
console.log('| where | share | ' + (ops ? 'µs per send |' : 'ms |'));
console.log('|---|--:|--:|');
for (const [name, n] of [...counts].sort((a, b) => b[1] - a[1])) {
  console.log(`| ${name} | ${((100 * n) / total).toFixed(1)}% | ${ops ? ((ms(n) * 1000) / ops).toFixed(0) : ms(n).toFixed(0)} |`);
}
