/**
 * How many remote media fetches run at once: at most `maxConcurrent` in all and
 * `maxConcurrentPerServer` to one server. Beyond that a fetch waits its turn, at most `maxWaitMs`,
 * in a queue of at most `maxQueued` (no server may fill more than half of it, so one slow server
 * cannot shut the others out); a fetch that finds the queue full, or waits too long, is refused
 * with 429 `M_LIMIT_EXCEEDED`, as Synapse refuses remote downloads past its rate limit.
 */
import { rateLimitedError } from '../core/errors.js';

export interface FetchLimits {
  maxConcurrent: number;
  maxConcurrentPerServer: number;
  maxQueued: number;
  maxWaitMs: number;
}

interface Waiter {
  server: string;
  start: () => void;
}

export class FetchLimiter {
  private running = 0;
  private readonly runningPerServer = new Map<string, number>();
  private readonly queue: Waiter[] = [];

  constructor(private readonly limits: FetchLimits) {}

  /** Fetches running now, in all and per server (metrics, tests). */
  get active(): { total: number; perServer: ReadonlyMap<string, number> } {
    return { total: this.running, perServer: this.runningPerServer };
  }

  async run<T>(server: string, work: () => Promise<T>): Promise<T> {
    if (this.canStart(server)) this.take(server);
    else await this.waitForTurn(server);
    try {
      return await work();
    } finally {
      this.release(server);
    }
  }

  private canStart(server: string): boolean {
    return this.running < this.limits.maxConcurrent && (this.runningPerServer.get(server) ?? 0) < this.limits.maxConcurrentPerServer;
  }

  private take(server: string): void {
    this.running += 1;
    this.runningPerServer.set(server, (this.runningPerServer.get(server) ?? 0) + 1);
  }

  private waitForTurn(server: string): Promise<void> {
    const queuedForServer = this.queue.reduce((n, waiter) => n + (waiter.server === server ? 1 : 0), 0);
    const serverShare = Math.max(1, Math.floor(this.limits.maxQueued / 2));
    if (this.queue.length >= this.limits.maxQueued || queuedForServer >= serverShare) return Promise.reject(rateLimitedError(this.limits.maxWaitMs));
    return new Promise((resolve, reject) => {
      const waiter: Waiter = {
        server,
        start: () => {
          clearTimeout(timer);
          resolve();
        },
      };
      const timer = setTimeout(() => {
        const at = this.queue.indexOf(waiter);
        if (at !== -1) this.queue.splice(at, 1);
        reject(rateLimitedError(this.limits.maxWaitMs));
      }, this.limits.maxWaitMs);
      timer.unref();
      this.queue.push(waiter);
    });
  }

  private release(server: string): void {
    this.running -= 1;
    const left = (this.runningPerServer.get(server) ?? 1) - 1;
    if (left === 0) this.runningPerServer.delete(server);
    else this.runningPerServer.set(server, left);
    // The oldest waiters whose server has room go first; the slot is theirs before they wake.
    for (let i = 0; i < this.queue.length && this.running < this.limits.maxConcurrent; ) {
      const waiter = this.queue[i]!;
      if (!this.canStart(waiter.server)) {
        i++;
        continue;
      }
      this.queue.splice(i, 1);
      this.take(waiter.server);
      waiter.start();
    }
  }
}
