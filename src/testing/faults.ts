/**
 * Fault injection for the test double: the next N requests that match answer 429 or 500, never
 * answer, lose their connection, or wait before being served, so that a bot's retry and reconnect
 * logic can be tested against the real server. Applied in front of the app, where a proxy or a
 * failing server would sit; the app never sees a request a fault answered.
 */
import { escapeRegExp } from '../core/escape-regexp.js';

/**
 * Which requests: a pattern such as `"GET /_matrix/client/v3/sync"`, where `*` stands for any text
 * within one path segment and the method is optional; a RegExp on the path; or a function.
 */
export type FaultMatch = string | RegExp | ((request: { method: string; path: string }) => boolean);

export type FaultAction =
  /** Answer with this status and a Matrix error body (`retryAfterMs` adds `retry_after_ms` and `Retry-After`). */
  | { status: number; errcode?: string; error?: string; retryAfterMs?: number }
  /** Close the connection without an answer (the client sees a reset). */
  | { drop: true }
  /** Never answer; the request stays open until the client gives up, or `reset()`/`close()`. */
  | { hang: true }
  /** Serve the request normally, this many milliseconds late. */
  | { delayMs: number };

export interface FaultSpec {
  match: FaultMatch;
  /** How many matching requests it applies to; default 1 (`Infinity` for every one until removed). */
  times?: number;
  action: FaultAction;
}

/** A fault being applied. */
export interface Fault {
  /** Matching requests it still applies to. */
  readonly remaining: number;
  /** Requests it has been applied to so far. */
  readonly hits: number;
  /** Stops applying it. */
  remove(): void;
}

interface ActiveFault extends Fault {
  remaining: number;
  hits: number;
  matches(method: string, path: string): boolean;
  action: FaultAction;
}

export class Faults {
  private active: ActiveFault[] = [];

  /** Applies `spec` to the next matching requests; the first added fault that matches wins. */
  add(spec: FaultSpec): Fault {
    const times = spec.times ?? 1;
    if (!(times > 0)) throw new RangeError('faults: times must be more than 0');
    const matches = compileMatch(spec.match);
    const fault: ActiveFault = {
      remaining: times,
      hits: 0,
      matches,
      action: spec.action,
      remove: () => {
        this.active = this.active.filter((f) => f !== fault);
      },
    };
    this.active.push(fault);
    return fault;
  }

  /** `429 M_LIMIT_EXCEEDED` with `retry_after_ms` (default 100 ms), as a rate-limited client sees it. */
  rateLimit(match: FaultMatch, options: { times?: number; retryAfterMs?: number } = {}): Fault {
    const retryAfterMs = options.retryAfterMs ?? 100;
    return this.add({ match, times: options.times, action: { status: 429, errcode: 'M_LIMIT_EXCEEDED', error: 'Too Many Requests', retryAfterMs } });
  }

  /** `500 M_UNKNOWN` (or another 5xx status), as a server in trouble answers. */
  serverError(match: FaultMatch, options: { times?: number; status?: number } = {}): Fault {
    return this.add({ match, times: options.times, action: { status: options.status ?? 500, errcode: 'M_UNKNOWN', error: 'Internal server error (injected fault)' } });
  }

  /** No answer at all: the connection is closed. */
  drop(match: FaultMatch, options: { times?: number } = {}): Fault {
    return this.add({ match, times: options.times, action: { drop: true } });
  }

  /** No answer ever: the client's own timeout must fire. */
  hang(match: FaultMatch, options: { times?: number } = {}): Fault {
    return this.add({ match, times: options.times, action: { hang: true } });
  }

  /** Served normally, `ms` late. */
  delay(match: FaultMatch, ms: number, options: { times?: number } = {}): Fault {
    return this.add({ match, times: options.times, action: { delayMs: ms } });
  }

  /** Every `/sync` (v3 and r0) waits `ms` before it is served, until removed (or `times` syncs). */
  stallSync(ms: number, options: { times?: number } = {}): Fault {
    return this.delay('GET /_matrix/client/*/sync', ms, { times: options.times ?? Infinity });
  }

  /** Removes every fault. */
  clear(): void {
    this.active = [];
  }

  /** The action for this request, counting it against the fault that takes it. */
  take(method: string, path: string): FaultAction | undefined {
    const fault = this.active.find((f) => f.matches(method, path));
    if (!fault) return undefined;
    fault.remaining -= 1;
    fault.hits += 1;
    if (fault.remaining <= 0) fault.remove();
    return fault.action;
  }
}

function compileMatch(match: FaultMatch): (method: string, path: string) => boolean {
  if (typeof match === 'function') return (method, path) => match({ method, path });
  if (match instanceof RegExp) return (_method, path) => match.test(path);
  const space = match.indexOf(' ');
  const method = space > 0 ? match.slice(0, space).toUpperCase() : undefined;
  const pattern = space > 0 ? match.slice(space + 1) : match;
  const regex = new RegExp(`^${pattern.split('*').map(escapeRegExp).join('[^/]*')}$`);
  return (requestMethod, path) => (method === undefined || method === requestMethod) && regex.test(path);
}

