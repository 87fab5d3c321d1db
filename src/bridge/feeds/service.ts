/**
 * Feed subscriptions and the poller. Each feed URL is one row however many rooms follow it, so it
 * is fetched once per interval; what was already posted is remembered per feed, so each item
 * reaches a room once, across restarts. Time comes from the clock and polling can be driven by
 * `pollDue()`, so tests never wait for an interval.
 */
import { createHash } from 'node:crypto';
import type { FastifyBaseLogger } from 'fastify';
import type { Clock } from '../../core/clock.js';
import type { Config } from '../../config/index.js';
import type { BridgeStorage, FeedRow, RoomFeedRow } from '../../storage/bridge-store.js';
import { feedItemMessage, moreItemsMessage } from './message.js';
import { clip } from '../matrix-html.js';
import { FeedError } from './error.js';
import type { FetchFeedOptions, FetchFeedResult } from './fetch.js';
import type { FeedItem, ParsedFeed } from './parse.js';
import type { FeedParse } from './parser-thread.js';
import type { BridgePoster } from '../poster.js';

export type FeedFetcher = (url: string, options: FetchFeedOptions) => Promise<FetchFeedResult>;
type FeedsConfig = Config['bridge']['feeds'];

/** After this many failures in a row, each following room is told once. */
export const FAILURE_NOTICE_AFTER = 3;
/** Backoff doubles per failure up to this (or the poll interval, if longer). */
const MAX_BACKOFF_MS = 6 * 3_600_000;
/** Seen item ids kept per feed beyond those currently in it. */
const SEEN_IDS_KEPT = 1_000;
const USER_AGENT = 'bot-homeserver-bridge (+https://github.com/bot-homeserver)';
/** Feeds one room may follow: each costs a fetch per interval on the room members' behalf. */
export const MAX_FEEDS_PER_ROOM = 50;
/** Errors and titles quoted back to a room are cut to this many characters. */
const MAX_QUOTED_CHARS = 300;

export interface FeedSubscription {
  url: string;
  label: string | null;
  title: string | null;
  lastSuccessTs: number | null;
  lastError: string | null;
  failures: number;
}

export interface SubscribeResult {
  title: string | undefined;
  /** Items present when subscribing: marked seen, never posted. */
  existingItems: number;
}

/** A subscription refused for a reason the room is told as is. */
export class SubscriptionRefused extends Error {}

/** The readable reason a fetch failed, short enough to quote in a room. */
export function feedFailureReason(err: unknown): string {
  const message = err instanceof FeedError ? err.message : 'the fetch failed unexpectedly';
  const hint = err instanceof FeedError && err.privateAddress ? `; ${PRIVATE_ADDRESS_HINT}` : '';
  return clip(message, MAX_QUOTED_CHARS) + hint;
}

/** What a chat user is told when a feed is on a private address: who can change that, and how. */
export const PRIVATE_ADDRESS_HINT =
  'feeds on private or internal addresses are refused unless the server\'s operator allows them (bridge.feeds.allow_private_addresses in its configuration)';


export class FeedService {
  /** Told how each poll went (metrics). */
  onPolled: ((outcome: 'new_items' | 'unchanged' | 'failed') => void) | undefined;
  private readonly inFlight = new Set<string>();
  /** Fetches running now, polls and new subscriptions together, capped at `concurrency`. */
  private fetching = 0;
  private readonly fetchQueue: Array<() => void> = [];
  /** Aborted by stop(), so shutting down does not wait for slow feed servers. */
  private abort = new AbortController();
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = true;
  /** Set by stop(): polls under way finish, queued ones are left for the next start. */
  private closing = false;

  constructor(
    private readonly storage: BridgeStorage,
    private readonly config: FeedsConfig,
    private readonly clock: Clock,
    private readonly poster: BridgePoster,
    private readonly fetcher: FeedFetcher,
    private readonly parse: FeedParse,
    private readonly log: FastifyBaseLogger,
    private readonly random: () => number = Math.random,
  ) {}

  // ---- subscriptions ----

  async subscribe(roomId: string, url: string, label: string | undefined, addedBy: string): Promise<SubscribeResult> {
    const followed = await this.storage.bridge.roomFeeds(roomId);
    if (followed.some((row) => row.url === url)) throw new SubscriptionRefused(`This room already follows ${url}.`);
    if (followed.length >= MAX_FEEDS_PER_ROOM) {
      throw new SubscriptionRefused(`This room follows ${MAX_FEEDS_PER_ROOM} feeds, the most it may; remove one first.`);
    }
    const known = await this.storage.bridge.feed(url);
    // Another room follows it already: its items are known, and new ones reach every room.
    const fetched = known ? undefined : await this.limited(() => this.fetcher(url, this.fetchOptions()));
    if (fetched?.notModified) throw new FeedError('the server answered 304 Not Modified to a first request');
    const now = this.clock.now();
    const feed = fetched && !fetched.notModified ? fetched.feed : undefined;
    // One transaction: another room removing its last subscription in between would otherwise
    // delete this feed row as unfollowed before the subscription below is in.
    const inserted = await this.storage.transaction(async (stores) => {
      if (fetched && !fetched.notModified && feed) {
        await stores.bridge.insertFeedIfMissing({
          url,
          title: feed.title ?? null,
          etag: fetched.etag ?? null,
          last_modified: fetched.lastModified ?? null,
          last_success_ts: now,
          last_error: null,
          last_error_ts: null,
          failures: 0,
          next_poll_ts: now + this.jittered(this.intervalMs()),
        });
        await stores.bridge.markSeen(url, feed.items.map((item) => item.id), now, SEEN_IDS_KEPT + feed.items.length);
      } else if (!(await stores.bridge.feed(url))) {
        return false;
      }
      return stores.bridge.insertRoomFeed({ room_id: roomId, url, label: label ?? null, added_by: addedBy, created_ts: now, failure_notified: 0 });
    });
    if (!inserted) throw new SubscriptionRefused(`This room already follows ${url}.`);
    this.reschedule();
    return feed ? { title: feed.title, existingItems: feed.items.length } : { title: known?.title ?? undefined, existingItems: 0 };
  }

  async unsubscribe(roomId: string, url: string): Promise<boolean> {
    const removed = await this.storage.bridge.deleteRoomFeed(roomId, url);
    if (removed) await this.storage.bridge.deleteUnfollowedFeeds();
    return removed;
  }

  async list(roomId: string): Promise<FeedSubscription[]> {
    const rows = await this.storage.bridge.roomFeeds(roomId);
    return rows.map((row) => ({
      url: row.url,
      label: row.label,
      title: row.feed.title,
      lastSuccessTs: row.feed.last_success_ts === null ? null : Number(row.feed.last_success_ts),
      lastError: row.feed.last_error,
      failures: row.feed.failures,
    }));
  }

  /** The bridge left the room: its subscriptions end. */
  async removeAllOf(roomId: string): Promise<number> {
    const removed = await this.storage.bridge.deleteRoomFeedsOfRoom(roomId);
    if (removed > 0) await this.storage.bridge.deleteUnfollowedFeeds();
    return removed;
  }

  // ---- polling ----

  start(): void {
    this.stopped = false;
    this.closing = false;
    if (this.abort.signal.aborted) this.abort = new AbortController();
    this.reschedule(0);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.closing = true;
    this.abort.abort();
    clearTimeout(this.timer);
    this.timer = undefined;
    await this.running;
  }

  /** Polls every feed due by `now` (default: the clock's now), at most `concurrency` at a time. */
  async pollDue(now = this.clock.now()): Promise<void> {
    const due = await this.storage.bridge.dueFeeds(now, 10_000);
    const queue = due.filter((feed) => !this.inFlight.has(feed.url));
    const workers = Array.from({ length: Math.min(this.config.concurrency, queue.length) }, async () => {
      for (let feed = queue.shift(); feed; feed = queue.shift()) {
        if (this.closing) break;
        await this.poll(feed);
      }
    });
    await Promise.all(workers);
  }

  /** Fetches one feed and posts what is new to every room that follows it. Never throws. */
  async poll(feed: FeedRow): Promise<void> {
    if (this.inFlight.has(feed.url)) return;
    this.inFlight.add(feed.url);
    try {
      let result: FetchFeedResult;
      try {
        result = await this.limited(() =>
          this.fetcher(feed.url, { ...this.fetchOptions(), etag: feed.etag ?? undefined, lastModified: feed.last_modified ?? undefined }),
        );
      } catch (err) {
        if (this.closing) return;
        this.onPolled?.('failed');
        await this.failed(feed, err);
        return;
      }
      const followers = await this.activeFollowers(feed.url);
      const posted = result.notModified ? 0 : await this.postNewItems(feed, result.feed, followers);
      this.onPolled?.(posted > 0 ? 'new_items' : 'unchanged');
      await this.succeeded(feed, result, followers);
    } catch (err) {
      this.onPolled?.('failed');
      this.log.error({ err, feed: feed.url }, 'feed poll failed');
      // Whatever broke, the feed is not due again at once: no tight loop of failing polls.
      await this.storage.bridge
        .updateFeed(feed.url, { next_poll_ts: this.clock.now() + this.jittered(this.intervalMs()) })
        .catch(() => undefined);
    } finally {
      this.inFlight.delete(feed.url);
    }
  }

  /** Posts the items not seen before; returns how many there were. */
  private async postNewItems(feed: FeedRow, parsed: ParsedFeed, followers: RoomFeedRow[]): Promise<number> {
    const ids = parsed.items.map((item) => item.id);
    const seen = await this.storage.bridge.seenAmong(feed.url, ids);
    const fresh = oldestFirst(parsed.items.filter((item) => !seen.has(item.id)));
    const max = this.config.max_items_per_poll;
    // The newest ones are shown, oldest first; the rest are counted in one line.
    const shown = fresh.slice(Math.max(0, fresh.length - max));
    const hidden = fresh.length - shown.length;
    const unposted = new Set<string>();
    for (const item of shown) {
      let posted = followers.length === 0;
      for (const room of followers) {
        const name = room.label ?? parsed.title ?? feed.title ?? feed.url;
        try {
          // Keyed by the item: a poll repeated after a crash (or by the process that took over)
          // before the item was marked seen gets the first post back, not a second one.
          await this.poster.post(room.room_id, feedItemMessage(name, item), feedItemTxnId(feed.url, item.id));
          posted = true;
        } catch (err) {
          this.log.warn({ err, feed: feed.url, room: room.room_id }, 'posting a feed item failed');
        }
      }
      // Posted nowhere (the bridge may not send there just now): tried again at the next poll.
      if (!posted) unposted.add(item.id);
    }
    if (hidden > 0) {
      for (const room of followers) {
        const name = room.label ?? parsed.title ?? feed.title ?? feed.url;
        await this.poster.post(room.room_id, moreItemsMessage(name, hidden, parsed.link)).catch(() => undefined);
      }
    }
    // Marked after posting: a crash in between repeats an item rather than losing it.
    await this.storage.bridge.markSeen(feed.url, ids.filter((id) => !unposted.has(id)), this.clock.now(), SEEN_IDS_KEPT + ids.length);
    return fresh.length;
  }

  private async succeeded(feed: FeedRow, result: FetchFeedResult, followers: RoomFeedRow[]): Promise<void> {
    const now = this.clock.now();
    await this.storage.bridge.updateFeed(feed.url, {
      ...(result.notModified ? {} : { title: result.feed.title ?? feed.title, etag: result.etag ?? null, last_modified: result.lastModified ?? null }),
      last_success_ts: now,
      failures: 0,
      next_poll_ts: now + this.jittered(this.intervalMs()),
    });
    const recovered = followers.filter((room) => room.failure_notified);
    for (const room of recovered) {
      const name = clip(room.label ?? feed.title ?? feed.url, 200);
      await this.poster.post(room.room_id, { msgtype: 'm.notice', body: `The feed ${name} works again.` }).catch(() => undefined);
    }
    await this.storage.bridge.setFailureNotified(feed.url, recovered.map((room) => room.room_id), false);
  }

  private async failed(feed: FeedRow, err: unknown): Promise<void> {
    const message = feedFailureReason(err);
    if (!(err instanceof FeedError)) this.log.warn({ err, feed: feed.url }, 'feed fetch failed unexpectedly');
    const now = this.clock.now();
    const failures = feed.failures + 1;
    const backoff = Math.min(this.intervalMs() * 2 ** (failures - 1), Math.max(this.intervalMs(), MAX_BACKOFF_MS));
    await this.storage.bridge.updateFeed(feed.url, { failures, last_error: message, last_error_ts: now, next_poll_ts: now + this.jittered(backoff) });
    if (failures < FAILURE_NOTICE_AFTER) return;
    const followers = (await this.activeFollowers(feed.url)).filter((room) => !room.failure_notified);
    for (const room of followers) {
      const name = clip(room.label ?? feed.title ?? feed.url, 200);
      const body = `The feed ${name} has failed ${failures} times in a row: ${message}. I will keep trying, less often, and say when it works again.`;
      await this.poster.post(room.room_id, { msgtype: 'm.notice', body }).catch(() => undefined);
    }
    await this.storage.bridge.setFailureNotified(feed.url, followers.map((room) => room.room_id), true);
  }

  private async activeFollowers(url: string): Promise<RoomFeedRow[]> {
    const rows = await this.storage.bridge.followersOf(url);
    const active = await Promise.all(rows.map((row) => this.poster.isActiveIn(row.room_id)));
    return rows.filter((_, index) => active[index]);
  }

  /** Runs a fetch once fewer than `concurrency` are running. */
  private async limited<T>(work: () => Promise<T>): Promise<T> {
    // A finished fetch hands its slot straight to the next waiter, so the cap holds exactly.
    if (this.fetching >= this.config.concurrency) await new Promise<void>((resolve) => this.fetchQueue.push(resolve));
    else this.fetching += 1;
    try {
      return await work();
    } finally {
      const next = this.fetchQueue.shift();
      if (next) next();
      else this.fetching -= 1;
    }
  }

  /** Arms the timer for the next due feed (or `delayMs` from now). */
  private reschedule(delayMs?: number): void {
    if (this.stopped) return;
    clearTimeout(this.timer);
    const arm = (delay: number) => {
      // Timers are capped at about 24.8 days; a minute is plenty between checks.
      this.timer = setTimeout(() => this.tick(), Math.max(0, Math.min(delay, 60_000)));
      this.timer.unref();
    };
    if (delayMs !== undefined) {
      arm(delayMs);
      return;
    }
    this.storage.bridge
      .nextPollTime()
      .then((next) => {
        if (!this.stopped && next !== undefined) arm(next - this.clock.now());
        else if (!this.stopped) arm(60_000);
      })
      .catch((err: unknown) => {
        this.log.error({ err }, 'scheduling feed polls failed');
        // Polling must not stop for good because one query failed: look again in a minute.
        if (!this.stopped) arm(60_000);
      });
  }

  private tick(): void {
    this.timer = undefined;
    if (this.stopped || this.running) return;
    this.running = this.pollDue()
      .catch((err: unknown) => this.log.error({ err }, 'feed polling failed'))
      .finally(() => {
        this.running = undefined;
        this.reschedule();
      });
  }

  private intervalMs(): number {
    return this.config.poll_interval_seconds * 1000;
  }

  /** Spreads polls by ±10%, so feeds added together do not stay in step. */
  private jittered(ms: number): number {
    return Math.round(ms * (0.9 + 0.2 * this.random()));
  }

  private fetchOptions(): FetchFeedOptions {
    return {
      timeoutMs: this.config.timeout_seconds * 1000,
      maxBytes: this.config.max_bytes,
      maxRedirects: this.config.max_redirects,
      allowPrivateAddresses: this.config.allow_private_addresses,
      userAgent: USER_AGENT,
      parse: this.parse,
      signal: this.abort.signal,
    };
  }
}

/**
 * Feeds list newest first, but not all of them, and not all items carry dates: with a date on
 * every item, sort by it; otherwise trust the document's order and reverse it.
 */
export function oldestFirst(items: FeedItem[]): FeedItem[] {
  if (items.length > 0 && items.every((item) => item.published !== undefined)) {
    return items
      .map((item, index) => ({ item, index }))
      .sort((a, b) => a.item.published!.getTime() - b.item.published!.getTime() || b.index - a.index)
      .map(({ item }) => item);
  }
  return [...items].reverse();
}

/** The transaction id a feed item is posted with: the same for the same item of the same feed. */
export function feedItemTxnId(feedUrl: string, itemId: string): string {
  return `feed.${createHash('sha256').update(feedUrl).update('\u0000').update(itemId).digest('base64url')}`;
}
