/**
 * Filling gaps in rooms' timelines from the servers in the room (`/backfill`), as Synapse does:
 * when /messages pages back over a gap (rooms/room-reader.ts), and in the background right after
 * a gap opens in a room with members here, so that a client paging back usually finds the events
 * already here. Each fill asks one server at a time for at most 100 events before the gap's
 * missing events; what comes back is checked (format, signatures, hashes, then its auth events)
 * and stored as backfilled history (rooms/remote-events.ts `backfill`). A room is filled by one
 * fill at a time; a room whose servers could not fill it is left alone for a while.
 */
import type { FastifyBaseLogger } from 'fastify';
import type { Clock } from '../core/clock.js';
import { BoundedCache } from '../core/bounded-cache.js';
import type { RemoteEvents } from '../rooms/remote-events.js';
import type { GapFiller } from '../rooms/remote-rooms.js';
import type { RoomCache } from '../rooms/room-cache.js';
import type { Storage } from '../storage/index.js';
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
/** After a fill that no server could help with, the room is left alone this long (doubling up to an hour). */
const FIRST_PAUSE_MS = 30_000;
const MAX_PAUSE_MS = 3_600_000;

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
  requestTimeoutMs: number;
  maxResponseBytes: number;
  log?: FastifyBaseLogger | undefined;
}

export class Backfiller implements GapFiller {
  private readonly filling = new Map<string, Promise<number>>();
  private readonly paused = new BoundedCache<string, { until: number; pauseMs: number }>(10_000);
  private readonly background = new Set<string>();
  private closed = false;

  constructor(private readonly deps: BackfillerDeps) {}

  useLogger(log: FastifyBaseLogger): void {
    this.deps.log = log;
  }

  async fill(roomId: string, belowDepth: number, waitMs: number): Promise<boolean> {
    const filled = this.fillOnce(roomId, belowDepth);
    let timer: NodeJS.Timeout | undefined;
    const waited = new Promise<number>((resolve) => (timer = setTimeout(() => resolve(0), waitMs)));
    try {
      return (await Promise.race([filled, waited])) > 0;
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
          const added = await this.fillOnce(roomId, Number.MAX_SAFE_INTEGER);
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

  private backgroundChain: Promise<void> = Promise.resolve();

  /** Waits for the background fills under way (tests, and a graceful close). */
  async idle(): Promise<void> {
    for (;;) {
      const chain = this.backgroundChain;
      await chain;
      if (chain === this.backgroundChain && this.filling.size === 0) return;
      await Promise.all([...this.filling.values()].map((work) => work.catch(() => 0)));
    }
  }

  close(): void {
    this.closed = true;
  }

  /** One fill of the room (shared by everyone asking meanwhile): how many events it added. */
  private fillOnce(roomId: string, belowDepth: number): Promise<number> {
    const running = this.filling.get(roomId);
    if (running) return running;
    const work = this.fillNow(roomId, belowDepth).finally(() => this.filling.delete(roomId));
    this.filling.set(roomId, work);
    return work;
  }

  private async fillNow(roomId: string, belowDepth: number): Promise<number> {
    const now = this.deps.clock.now();
    const pause = this.paused.get(roomId);
    if (pause && pause.until > now) return 0;
    const gaps = (await this.deps.storage.rooms.backwardExtremities(roomId, 100)).filter((gap) => gap.childDepth <= belowDepth);
    if (gaps.length === 0) return 0;
    const room = await this.deps.cache.room(roomId);
    if (!room || !room.hasJoinedMember(this.deps.serverName)) return 0;
    const asked = gaps.slice(0, EXTREMITIES_PER_REQUEST);
    const servers = [...room.joinedServers()].filter((server) => server !== this.deps.serverName).slice(0, SERVERS_PER_FILL);
    const visibility = { historyVisibility: room.historyVisibility(), at: Math.min(...asked.map((gap) => gap.childStream)) };
    const query = `${asked.map((gap) => `v=${encodeURIComponent(gap.eventId)}`).join('&')}&limit=${BACKFILL_LIMIT}`;
    for (const server of servers) {
      try {
        const answer = await this.deps.client.request<{ pdus?: unknown }>(server, {
          method: 'GET',
          path: `/_matrix/federation/v1/backfill/${encodeURIComponent(roomId)}?${query}`,
          timeoutMs: this.deps.requestTimeoutMs,
        });
        const raws = Array.isArray(answer.pdus) ? answer.pdus.slice(0, BACKFILL_LIMIT) : [];
        const verified = await verifyPdus(raws, room.version, roomId, this.deps.keyRing);
        if (verified.length === 0) continue;
        const budget = new FetchBudget(this.deps.fetchLimits, this.deps.clock, server, undefined, this.deps.requestTimeoutMs, this.deps.maxResponseBytes);
        const source = new FederatedEventSource(this.deps.client, this.deps.keyRing, room.version, [server], budget);
        const added = await this.deps.remote.backfill(roomId, verified, source, visibility);
        if (added > 0) {
          this.paused.delete(roomId);
          return added;
        }
      } catch (err) {
        this.deps.log?.debug({ err, roomId, server }, 'federation: a backfill request failed');
      }
    }
    const pauseMs = Math.min((pause?.pauseMs ?? FIRST_PAUSE_MS / 2) * 2, MAX_PAUSE_MS);
    this.paused.set(roomId, { until: now + pauseMs, pauseMs });
    return 0;
  }
}
