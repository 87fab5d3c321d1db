/**
 * What the server counts for Prometheus (prom-client, the standard Node client): requests by route
 * and status with their latencies, events persisted and group-commit batches, parked syncs and how
 * fast they wake, database time, event-loop lag and the process's own figures, webhook deliveries
 * and feed polls by outcome, and what waits for other servers. One registry per app, so that tests
 * and the test double can build many apps in one process.
 */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';

/** What the gauges read when scraped. */
export interface MetricsSources {
  parkedSyncs: () => number;
  federationQueue: () => Promise<{ pdu: number; edu: number }>;
}

export type WebhookOutcome = 'posted' | 'skipped' | 'not_found' | 'forbidden' | 'rate_limited' | 'invalid' | 'failed';
export type FeedPollOutcome = 'new_items' | 'unchanged' | 'failed';

const SECONDS_FAST = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

export class Metrics {
  readonly registry = new Registry();
  readonly requests: Histogram<'method' | 'route' | 'status'>;
  readonly eventsPersisted: Counter;
  readonly commitBatchRequests: Histogram;
  readonly commitDuration: Histogram;
  readonly syncWake: Histogram;
  /** Database queries, counted by `observeQuery`. */
  private readonly queries = { ok: 0, errors: 0, ms: 0 };
  readonly webhookDeliveries: Counter<'outcome'>;
  readonly feedPolls: Counter<'outcome'>;

  constructor(sources: MetricsSources) {
    const registers = [this.registry];
    // process_* and nodejs_* (CPU, memory, handles, GC, event-loop lag), as every Node exporter has.
    collectDefaultMetrics({ register: this.registry, eventLoopMonitoringPrecision: 10 });
    this.requests = new Histogram({
      name: 'bot_homeserver_http_request_duration_seconds',
      help: 'Answered HTTP requests by method, route pattern and status, with their latency (a long-polled /sync includes its wait)',
      labelNames: ['method', 'route', 'status'],
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 180],
      registers,
    });
    this.eventsPersisted = new Counter({ name: 'bot_homeserver_events_persisted_total', help: 'Room events written to the database', registers });
    this.commitBatchRequests = new Histogram({
      name: 'bot_homeserver_event_commit_batch_requests',
      help: 'Write requests carried by one group commit of the event writer',
      buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256],
      registers,
    });
    this.commitDuration = new Histogram({ name: 'bot_homeserver_event_commit_seconds', help: 'Time one group commit took, fsync included', buckets: SECONDS_FAST, registers });
    this.syncWake = new Histogram({
      name: 'bot_homeserver_sync_wake_seconds',
      help: 'From a commit notifying a parked /sync to that sync resuming',
      buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25],
      registers,
    });
    // Summed in plain numbers per query and read at scrape time: a send runs several queries, and
    // a histogram observation each would cost more than some of the queries.
    const queries = this.queries;
    new Counter({
      name: 'bot_homeserver_database_queries_total',
      help: 'Database queries run, by outcome (ok or error)',
      labelNames: ['outcome'],
      registers,
      collect() {
        this.reset();
        this.inc({ outcome: 'ok' }, queries.ok);
        this.inc({ outcome: 'error' }, queries.errors);
      },
    });
    new Counter({
      name: 'bot_homeserver_database_query_seconds_total',
      help: 'Time spent in database queries',
      registers,
      collect() {
        this.reset();
        this.inc(queries.ms / 1000);
      },
    });
    this.webhookDeliveries = new Counter({ name: 'bot_homeserver_webhook_deliveries_total', help: 'Webhook deliveries by outcome', labelNames: ['outcome'], registers });
    this.feedPolls = new Counter({ name: 'bot_homeserver_feed_polls_total', help: 'Feed polls by outcome', labelNames: ['outcome'], registers });
    new Gauge({
      name: 'bot_homeserver_sync_parked',
      help: 'Long-polling /sync requests waiting for news',
      registers,
      collect() {
        this.set(sources.parkedSyncs());
      },
    });
    new Gauge({
      name: 'bot_homeserver_federation_queued',
      help: 'Items waiting to be sent to other servers, by kind (pdu or edu)',
      labelNames: ['kind'],
      registers,
      async collect() {
        const queued = await sources.federationQueue();
        this.set({ kind: 'pdu' }, queued.pdu);
        this.set({ kind: 'edu' }, queued.edu);
      },
    });
  }

  observeQuery(ms: number, failed: boolean): void {
    if (failed) this.queries.errors += 1;
    else this.queries.ok += 1;
    this.queries.ms += ms;
  }

  /** The text exposition format Prometheus scrapes. */
  async exposition(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }
}
