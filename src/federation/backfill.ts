/**
 * Filling gaps in rooms' timelines from the servers in the room (`/backfill`), as Synapse does:
 * when /messages pages back over a gap (rooms/room-reader.ts), and in the background right after
 * a gap opens in a room with members here, so that a client paging back usually finds the events
 * already here. Each fill asks one server at a time (those with the most members first) for at
 * most 100 events before the gaps' missing events; what comes back is checked (format,
 * signatures, hashes, that it hangs below the gaps asked about, then its auth events) and stored
 * as backfilled history (rooms/remote-events.ts `backfill`). A room is filled by one fill at a
 * time; a gap no server could fill is left alone for a while; every request counts against the
 * asked server's fetch bucket (federation.inbound_fetch.per_origin), so a member server that
 * keeps opening gaps cannot make us fetch without end.
 */
import type { FastifyBaseLogger } from 'fastify';
import type { Clock } from '../core/clock.js';
import { BoundedCache } from '../core/bounded-cache.js';
import type { RateLimiter } from '../ratelimit/rate-limiter.js';
import type { RemoteEvents } from '../rooms/remote-events.js';
import type { GapFiller } from '../rooms/remote-rooms.js';
import type { RoomCache } from '../rooms/room-cache.js';
import type { BackwardExtremity, Storage } from '../storage/index.js';
import { FetchBudget, type FetchLimits } from './fetch-budget.js';
import type { FederationClient } from './http-client.js';
import type { KeyRing } from './key-ring.js';
import { FederatedEventSource, verifyPdus } from './remote-source.js';

/** Events asked for in one /backfill (Synapse asks for, and serves, at most 100). */
const BACKFILL_LIMIT = 100;
/** Missing events named in one /backfill request. */
const EXTREMITIES_PER_REQUEST = 5;
/** Servers tried for one fill before giving up for now. */
const SERVERS_PER_FILL = 3;
/** A gap no server could fill is left alone this long, doubling up to an hour. */
const FIRST_PAUSE_MS = 30_000;
const MAX_PAUSE_MS = 3_600_000;
/** How long a closing server waits for the fill under way. */
const CLOSE_WAIT_MS = 5_000;
/** History visibility from the most open to the most closed. */
const VISIBILITY_ORDER = ['world_readable', 'shared', 'invited', 'joined'];

export interface BackfillerDeps {
  storage: Storage;
  cache: RoomCache;
  remote: RemoteEvents;
  client: FederationClient;
  keyRing: KeyRing;
  clock: Clock;
  serverName: string;
  /** Events filled in the background after a gap opens, per room (federation.backfill.background_events). */
  backgroundEvents: number;
  /** What one fill may fetch beyond the /backfill answer itself (auth events it lacks). */
  fetchLimits: FetchLimits;
  /** The fetch bucket per server (federation.inbound_fetch.per_origin), shared with inbound transactions. */
  perOrigin: RateLimiter | undefined;
  requestTimeoutMs: number;
  maxResponseBytes: number;
  log?: FastifyBaseLogger | undefined;
}

export class Backfiller implements GapFiller {
  private readonly filling = new Map<string, Promise<number>>();
  /**
   * Gaps no server could fill, left alone until `until`. One that only a background fill tried
   * (`byReader` false) is still tried when a reader pages back to it: the servers may know more
   * by then (the background fill comes right after the gap opens, perhaps before they do).
   */
  private readonly paused = new BoundedCache<string, { until: number; pauseMs: number; byReader: boolean }>(10_000);
  private readonly background = new Set<string>();
  private backgroundChain: Promise<void> = Promise.resolve();
  private closed = false;

  constructor(private readonly deps: BackfillerDeps) {}

  useLogger(log: FastifyBaseLogger): void {
    this.deps.log = log;
  }

  async fill(roomId: string, belowDepth: number, waitMs: number): Promise<'filled' | 'pending' | 'none'> {
    const filled = this.fillOnce(roomId, belowDepth, true).then((added): 'filled' | 'none' => (added > 0 ? 'filled' : 'none'));
    let timer: NodeJS.Timeout | undefined;
    const waited = new Promise<'pending'>((resolve) => (timer = setTimeout(() => resolve('pending'), waitMs)));
    try {
      return await Promise.race([filled, waited]);
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Fills a room's new gaps in the background, up to `backgroundEvents` events, one room after
   * another (never more than one background fill at a time: it is catch-up, not urgent).
   */
  fillInBackground(roomId: string): void {
    if (this.closed || this.deps.backgroundEvents === 0 || this.background.has(roomId)) return;
    const room = this.deps.cache.peek(roomId);
    if (room && !room.hasJoinedMember(this.deps.serverName)) return;
    this.background.add(roomId);
    this.backgroundChain = this.backgroundChain.then(async () => {
      try {
        let total = 0;
        while (!this.closed && total < this.deps.backgroundEvents) {
          const added = await this.fillOnce(roomId, Number.MAX_SAFE_INTEGER, false);
          if (added === 0) break;
          total += added;
        }
      } catch (err) {
        this.deps.log?.warn({ err, roomId }, 'federation: a background backfill failed');
      } finally {
        this.background.delete(roomId);
      }
    });
  }

  /** Waits for the fills under way (tests; a closing server waits at most a few seconds). */
  async idle(maxWaitMs = Number.POSITIVE_INFINITY): Promise<void> {
    const until = performance.now() + maxWaitMs;
    for (;;) {
      const chain = this.backgroundChain;
      const work = Promise.all([chain, ...[...this.filling.values()].map((fill) => fill.catch(() => 0))]);
      const left = until - performance.now();
      if (left <= 0) return;
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([work, new Promise((resolve) => (timer = setTimeout(resolve, left)))]);
      clearTimeout(timer);
      if (chain === this.backgroundChain && this.filling.size === 0) return;
    }
  }

  /** No new fills; what runs ends at its next step. Resolves once they have (or a few seconds passed). */
  async close(): Promise<void> {
    this.closed = true;
    await this.idle(CLOSE_WAIT_MS);
  }

  /** One fill of the room (shared by everyone asking meanwhile): how many events it added. */
  private fillOnce(roomId: string, belowDepth: number, forReader: boolean): Promise<number> {
    const running = this.filling.get(roomId);
    if (running) return running;
    const work = this.fillNow(roomId, belowDepth, forReader).finally(() => this.filling.delete(roomId));
    this.filling.set(roomId, work);
    return work;
  }

  private async fillNow(roomId: string, belowDepth: number, forReader: boolean): Promise<number> {
    if (this.closed) return 0;
    const now = this.deps.clock.now();
    const waiting = (eventId: string) => {
      const pause = this.paused.get(eventId);
      return pause !== undefined && pause.until > now && (pause.byReader || !forReader);
    };
    const gaps = (await this.deps.storage.rooms.backwardExtremities(roomId, 100, belowDepth)).filter((gap) => !waiting(gap.eventId));
    if (gaps.length === 0) return 0;
    const room = await this.deps.cache.room(roomId);
    if (!room || !room.hasJoinedMember(this.deps.serverName)) return 0;
    const asked = gaps.slice(0, EXTREMITIES_PER_REQUEST);
    const servers = room.serversByMembers().filter((server) => server !== this.deps.serverName).slice(0, SERVERS_PER_FILL);
    const query = `${asked.map((gap) => `v=${encodeURIComponent(gap.eventId)}`).join('&')}&limit=${BACKFILL_LIMIT}`;
    for (const server of servers) {
      if (this.closed) return 0;
      if (this.deps.perOrigin && !this.deps.perOrigin.check(server).allowed) continue;
      try {
        const answer = await this.deps.client.request<{ pdus?: unknown }>(server, {
          method: 'GET',
          path: `/_matrix/federation/v1/backfill/${encodeURIComponent(roomId)}?${query}`,
          timeoutMs: this.deps.requestTimeoutMs,
        });
        const raws = Array.isArray(answer.pdus) ? answer.pdus.slice(0, BACKFILL_LIMIT) : [];
        // What the answer makes us fetch (its signers' keys included) counts against one budget.
        const budget = new FetchBudget(this.deps.fetchLimits, this.deps.clock, server, this.deps.perOrigin, this.deps.requestTimeoutMs, this.deps.maxResponseBytes);
        const verified = await verifyPdus(raws, room.version, roomId, this.deps.keyRing, budget);
        if (verified.length === 0 || this.closed) continue;
        const source = new FederatedEventSource(this.deps.client, this.deps.keyRing, room.version, [server], budget);
        const added = await this.deps.remote.backfill(roomId, verified, source, { eventIds: asked.map((gap) => gap.eventId), ...shownAs(asked) });
        if (added > 0) {
          for (const gap of asked) this.paused.delete(gap.eventId);
          return added;
        }
      } catch (err) {
        this.deps.log?.debug({ err, roomId, server }, 'federation: a backfill request failed');
      }
    }
    // Nobody could help with these: they wait, the room's other gaps do not.
    for (const gap of asked) {
      const pauseMs = Math.min((this.paused.get(gap.eventId)?.pauseMs ?? FIRST_PAUSE_MS / 2) * 2, MAX_PAUSE_MS);
      this.paused.set(gap.eventId, { until: now + pauseMs, pauseMs, byReader: forReader || (this.paused.get(gap.eventId)?.byReader ?? false) });
    }
    return 0;
  }
}

/**
 * How the events of several gaps are shown: under the most closed history visibility of the
 * events above them (what was said then is never shown more openly than it was), judged at the
 * earliest of their positions.
 */
function shownAs(gaps: readonly BackwardExtremity[]): { historyVisibility: string; at: number } {
  let rank = 0;
  for (const gap of gaps) rank = Math.max(rank, VISIBILITY_ORDER.indexOf(gap.childVisibility));
  return { historyVisibility: VISIBILITY_ORDER[rank] ?? 'shared', at: Math.min(...gaps.map((gap) => gap.childStream)) };
}
