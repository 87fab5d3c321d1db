/**
 * `rc_federation`, as Synapse has it: per origin server, requests beyond `sleep_limit` in a window
 * of `window_size` ms are delayed by `sleep_delay` ms each; at most `concurrent` are handled at
 * once (the rest wait their turn); one more than `reject_limit` waiting or running gets 429.
 */
import { rateLimitedError } from '../core/errors.js';
import type { Clock } from '../core/clock.js';

export interface InboundLimits {
  window_size: number;
  sleep_limit: number;
  sleep_delay: number;
  reject_limit: number;
  concurrent: number;
}

interface OriginState {
  recent: number[];
  active: number;
  waiting: Array<() => void>;
}

export class InboundLimiter {
  private readonly origins = new Map<string, OriginState>();

  constructor(
    private readonly limits: InboundLimits,
    private readonly clock: Clock,
  ) {}

  async run<T>(origin: string, work: () => Promise<T>): Promise<T> {
    let state = this.origins.get(origin);
    if (!state) {
      state = { recent: [], active: 0, waiting: [] };
      this.origins.set(origin, state);
    }
    const now = this.clock.now();
    while (state.recent.length > 0 && state.recent[0]! <= now - this.limits.window_size) state.recent.shift();
    if (state.active + state.waiting.length >= this.limits.reject_limit) throw rateLimitedError(this.limits.window_size);
    state.recent.push(now);
    if (state.recent.length > this.limits.sleep_limit) await sleep(this.limits.sleep_delay);
    if (state.active >= this.limits.concurrent) await new Promise<void>((resolve) => state.waiting.push(resolve));
    state.active += 1;
    try {
      return await work();
    } finally {
      state.active -= 1;
      const next = state.waiting.shift();
      if (next) next();
      else if (state.active === 0 && state.recent.length === 0) this.origins.delete(origin);
      // An origin whose window has passed is dropped on its next quiet moment.
      else if (state.active === 0 && state.recent.at(-1)! <= this.clock.now() - this.limits.window_size) this.origins.delete(origin);
    }
  }
}

function sleep(ms: number): Promise<void> {
  return ms <= 0 ? Promise.resolve() : new Promise((resolve) => setTimeout(resolve, ms).unref());
}
