/**
 * The issues' targets (6: speed; 14: a large feed; 16: federation; 20: PostgreSQL; 34: the send path's CPU), checked against one run's results, and our
 * send rates as fractions of the machine's limits (bare Fastify, bare SQLite). Both go into the JSON and the printed summary.
 * A target whose scenario did not run (or ran at smaller sizes, in quick mode) says so.
 */
import { round } from './server.mjs';

const find = (results, scenario, variant, synchronous) =>
  results.find((r) => r.scenario === scenario && (variant instanceof RegExp ? variant.test(r.variant) : r.variant === variant) && (!synchronous || r.synchronous === synchronous));

const ms = (x) => (x === null || x === undefined ? '–' : `${x} ms`);
const pct = (x) => `${round(x * 100, 0)}%`;

/** @returns {{ id: string, target: string, measured: string, met: boolean|null }[]} */
export function evaluateTargets(results, settings) {
  // What one request to a bare route costs in the same rhythm (after silence), for reading the wake figures.
  const floor = find(results, 'limits', /after each \d+ ms of silence/);
  const withFloor = (p50) => `${ms(p50)}${floor ? ` (a bare Fastify request after the same silence: ${ms(floor.latency_ms.p50)})` : ''}`;
  const targets = [];
  const add = (id, target, measured, met) => targets.push({ id, target, measured, met });

  const idle = find(results, 'idle-syncs', /syncs parked$/);
  if (idle) {
    const count = idle.params.parked_syncs;
    // With fewer than 10,000 parked (quick mode), extrapolate from the per-1,000 figure.
    const at10k = count >= 10_000 ? idle.idle.rss_mb_parked : round(idle.idle.rss_mb_before_parking + idle.idle.rss_mb_per_1000_parked * 10, 1);
    add('idle-10k-rss', '10,000 parked syncs under 160 MB RSS', `${at10k} MB${count >= 10_000 ? '' : ` (extrapolated from ${count})`}`, at10k < 160);
    const quiet = idle.idle.quiet_s ? ` (after ${idle.idle.quiet_s} s idle; ${idle.idle.fresh_server_rss_mb_at_once} MB right after start)` : ' (right after start)';
    add('idle-fresh-rss', 'idle RSS of a fresh server under 60 MB', `${idle.idle.fresh_server_rss_mb} MB${quiet}`, idle.idle.fresh_server_rss_mb < 60);
  }

  for (const sync of ['full', 'normal']) {
    const posts = find(results, 'webhook', '10 concurrent posters', sync);
    if (posts) add(`webhook-rate-${sync}`, `webhook ≥ 4,000 posts/s (${sync})`, `${posts.rate_per_s}/s`, posts.rate_per_s >= 4000);
    const wake = find(results, 'webhook', 'webhook to sync', sync);
    if (wake) add(`webhook-wake-${sync}`, `webhook-to-sync p50 < 0.5 ms (${sync})`, withFloor(wake.latency_ms.p50), wake.latency_ms.p50 < 0.5);
  }

  const start = find(results, 'startup', 'process spawn to first /versions');
  if (start) add('startup-process', 'process start to first /versions < 300 ms (median)', ms(start.latency_ms.p50), start.latency_ms.p50 < 300);
  const further = find(results, 'startup', 'startTestHomeserver, further instances');
  if (further) add('startup-test-double', 'a further startTestHomeserver() < 25 ms (median)', ms(further.latency_ms.p50), further.latency_ms.p50 < 25);

  const sizes = settings.growth?.sizes ?? [];
  const small = sizes[0];
  const large = sizes.at(-1);
  if (small && large && small !== large) {
    const at = (what, size) => results.find((r) => r.scenario === 'growth' && r.variant.startsWith(`${what}, `) && r.params.rooms === size.rooms && r.params.events === size.events);
    const quick = large.rooms < 1000 || large.events < 1_000_000 ? ` (at ${large.rooms} rooms, ${large.events} events: quick mode)` : '';
    for (const what of ['send', 'incremental sync']) {
      const a = at(what, small);
      const b = at(what, large);
      if (a && b && a.latency_ms.p50 && b.latency_ms.p50) {
        const ratio = round(b.latency_ms.p50 / a.latency_ms.p50, 2);
        add(`growth-${what.replace(' ', '-')}`, `${what} p50 with 1,000 rooms and 1M events within 2x of empty${quick}`, `${ms(b.latency_ms.p50)} vs ${ms(a.latency_ms.p50)} (${ratio}x)`, ratio <= 2);
      }
    }
    const initial = at('initial sync', large);
    if (initial) add('growth-initial-sync', `a bot's initial sync in 1,000 rooms under 1 s (median)${quick}`, ms(initial.latency_ms.p50), initial.latency_ms.p50 < 1000);
  }

  const bare = find(results, 'limits', /^bare Fastify/);
  for (const sync of ['full', 'normal']) {
    const send = find(results, 'send-throughput', '10 concurrent senders', sync);
    if (bare && send) {
      const f = send.rate_per_s / bare.rate_per_s;
      add(`send-vs-fastify-${sync}`, `send (10 senders, ${sync}) ≥ 40% of bare Fastify`, `${pct(f)} (${send.rate_per_s} vs ${bare.rate_per_s}/s)`, f >= 0.4);
    }
  }

  const feed = find(results, 'feed-parse', /^\/versions while/);
  if (feed) add('feed-parse-versions', '/versions answers in under 50 ms while a 5 MiB feed is parsed (max)', `${ms(feed.latency_ms.max)} (p99 ${ms(feed.latency_ms.p99)}, ${feed.latency_ms.n} answers; subscribed in ${ms(feed.subscribe_ms)})`, feed.latency_ms.max < 50);

  for (const sync of ['full', 'normal']) {
    const wake = find(results, 'sync-wake', 'no other syncs', sync);
    if (wake) add(`wake-${sync}`, `send-to-sync wake p50 < 0.5 ms (${sync})`, withFloor(wake.latency_ms.p50), wake.latency_ms.p50 < 0.5);
  }

  // Issue 16 (federation): a local send, now hashed and signed, and the federation scenarios.
  const sendFull = find(results, 'send-throughput', '10 concurrent senders', 'full');
  if (sendFull) {
    add('send-cpu-signed-full', 'server CPU per send ≤ 0.25 ms (full), events hashed and signed', ms(sendFull.server.cpu_ms_per_op), sendFull.server.cpu_ms_per_op <= 0.25);
    add('send-rate-signed-full', '10 concurrent senders ≥ 2,500/s (full)', `${sendFull.rate_per_s}/s`, sendFull.rate_per_s >= 2500);
  }
  // Issue 20: one process on PostgreSQL against SQLite in full mode, from the same run (the
  // machine's speed swings between minutes; only a ratio of neighbouring measurements means much).
  const sendPostgres = find(results, 'send-throughput', '10 concurrent senders', 'postgres');
  if (sendFull && sendPostgres) {
    const ratio = sendPostgres.rate_per_s / sendFull.rate_per_s;
    // Quick mode's 3 s windows measure PostgreSQL lower than full mode's 20 s (seen: 38-45 % against 52-60 %).
    const quick = settings.send.durationMs < 20_000 ? ` (quick mode: ${settings.send.durationMs / 1000} s windows)` : '';
    add('postgres-half-of-sqlite', `10 concurrent senders on PostgreSQL (one process) ≥ 50% of SQLite (full)${quick}`, `${sendPostgres.rate_per_s}/s, ${pct(ratio)} of ${sendFull.rate_per_s}/s`, ratio >= 0.5);
  }
  // Issue 34: the send path's CPU, beside what this machine's bare references cost in the same run
  // (a bare Fastify request in the same rhythm, a bare SQLite commit): their sum is a floor no
  // send can go under here, whatever the targets say.
  const bareSeq = find(results, 'limits', 'bare Fastify route, 1 sequential sender');
  for (const sync of ['full', 'normal']) {
    const one = find(results, 'send-throughput', '1 sequential sender', sync);
    const ten = find(results, 'send-throughput', '10 concurrent senders', sync);
    const commit = find(results, 'limits', /^bare SQLite/, sync);
    // A sequential send pays a whole commit; ten senders share one per group commit.
    const floorOf = (request, shared) => {
      const parts = [];
      if (request) parts.push(`bare Fastify ${ms(round(request.server.cpu_ms_per_op, 3))}`);
      if (commit) parts.push(`${shared ? 'a share of ' : ''}a bare SQLite commit (${ms(round(commit.server.cpu_ms_per_op, 3))})`);
      return parts.length ? ` (floor here: ${parts.join(' + ')})` : '';
    };
    if (one) add(`send-cpu-one-${sync}`, `one sender: server CPU per send ≤ 0.40 ms (${sync})`, `${ms(one.server.cpu_ms_per_op)}${floorOf(bareSeq, false)}`, one.server.cpu_ms_per_op <= 0.4);
    if (one && sync === 'normal') add('send-p50-one-normal', 'one sender: send p50 < 0.5 ms (normal)', ms(one.latency_ms.p50), one.latency_ms.p50 < 0.5);
    if (ten) add(`send-cpu-ten-${sync}`, `ten senders: server CPU per send ≤ 0.16 ms (${sync}), signing included`, `${ms(ten.server.cpu_ms_per_op)}${floorOf(bare, true)}`, ten.server.cpu_ms_per_op <= 0.16);
    const wake = find(results, 'sync-wake', 'no other syncs', sync);
    if (wake && floor) {
      const ratio = wake.latency_ms.p50 / floor.latency_ms.p50;
      add(`wake-vs-bare-${sync}`, `send-to-sync wake p50 ≤ 1.5x a bare Fastify request after the same silence (${sync})`, `${ms(wake.latency_ms.p50)} vs ${ms(floor.latency_ms.p50)} (${round(ratio, 2)}x)`, ratio <= 1.5);
    }
  }
  if (sendFull && sendPostgres) {
    const ratio = sendPostgres.rate_per_s / sendFull.rate_per_s;
    add('postgres-80-of-sqlite', '10 concurrent senders on PostgreSQL (one process) ≥ 80% of SQLite (full)', `${pct(ratio)}`, ratio >= 0.8);
  }
  const acrossServers = find(results, 'federation', 'send on A → long-poll on B');
  if (acrossServers) add('federation-wake', 'send on A → long-poll on B p50 < 10 ms (loopback)', ms(acrossServers.latency_ms.p50), acrossServers.latency_ms.p50 < 10);
  const txn = find(results, 'federation', /^inbound transaction of 50 PDUs/);
  if (txn) add('federation-txn-50', 'inbound transaction of 50 PDUs applied < 25 ms (p50)', ms(txn.latency_ms.p50), txn.latency_ms.p50 < 25);
  const join = find(results, 'federation', /^join a room of/);
  if (join) {
    const quick = /of 1000 members and 100k/.test(join.variant) ? '' : ` (${join.variant.replace(/^join /, '')}: quick mode)`;
    add('federation-big-join', `a room of 1,000 members and 100k events joined over federation < 5 s${quick}`, ms(join.latency_ms.p50), join.latency_ms.p50 < 5000);
  }
  return targets;
}

/** Send and webhook rates as fractions of the bare references measured in the same run. */
export function referenceComparisons(results) {
  const out = [];
  const bare = find(results, 'limits', /^bare Fastify/);
  for (const r of results) {
    if (!['send-throughput', 'webhook'].includes(r.scenario) || !r.rate_per_s) continue;
    const sqlite = find(results, 'limits', /^bare SQLite/, r.synchronous);
    const parts = [];
    const entry = { scenario: r.scenario, variant: r.variant, synchronous: r.synchronous, rate_per_s: r.rate_per_s };
    if (bare) {
      entry.of_bare_fastify = round(r.rate_per_s / bare.rate_per_s, 3);
      parts.push(`${pct(entry.of_bare_fastify)} of bare Fastify (${bare.rate_per_s}/s)`);
    }
    if (sqlite) {
      entry.of_bare_sqlite = round(r.rate_per_s / sqlite.rate_per_s, 3);
      parts.push(`${pct(entry.of_bare_sqlite)} of bare SQLite transactions at synchronous=${r.synchronous} (${sqlite.rate_per_s}/s)`);
    }
    if (!parts.length) continue;
    entry.text = `${r.scenario} / ${r.variant} (${r.synchronous}): ${r.rate_per_s}/s is ${parts.join(' and ')}`;
    out.push(entry);
  }
  return out;
}
