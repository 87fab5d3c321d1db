/**
 * What the room side asks other servers for while it checks their events (rooms/remote-events.ts):
 * events by id, the events in a gap, the state at an event. Everything that comes back is checked
 * (format, signatures, hashes) before the room side sees it; what fails is left out.
 */
import { FetchRefused } from '../rooms/event-source.js';
import type { RemoteEventSource, VerifiedPdu } from '../rooms/remote-events.js';
import type { RoomVersion } from '../rooms/room-versions.js';
import { withDeadline, type FetchBudget, type FetchKind } from './fetch-budget.js';
import type { FederationClient, FederationRequest } from './http-client.js';
import type { KeyRing } from './key-ring.js';
import { checkPdu } from './pdu-checks.js';

/** Events fetched one by one at most this many at a time. */
const FETCH_CONCURRENCY = 8;
/** The most ids a state_ids answer may name (a room's state and its auth chain). */
const MAX_STATE_IDS = 100_000;

/**
 * Checks raw PDUs of one room; the malformed and the badly signed are dropped. The keys their
 * signatures need are fetched within `budget` when one is given (pdu-checks.ts).
 */
export async function verifyPdus(raws: readonly unknown[], version: RoomVersion, roomId: string, keyRing: KeyRing, budget?: FetchBudget): Promise<VerifiedPdu[]> {
  const verified: VerifiedPdu[] = [];
  await eachLimited(raws, FETCH_CONCURRENCY * 4, async (raw) => {
    const result = await checkPdu(raw, version, roomId, keyRing, budget);
    if ('verified' in result) verified.push(result.verified);
  });
  return verified;
}

export class FederatedEventSource implements RemoteEventSource {
  constructor(
    private readonly client: FederationClient,
    private readonly keyRing: KeyRing,
    private readonly version: RoomVersion,
    /** Servers to ask, best first (the one that sent the events). */
    private readonly servers: readonly string[],
    /** What the inbound request that needs these events may spend (none: unbounded, for our own joins' servers). */
    private readonly budget?: FetchBudget | undefined,
  ) {}

  exhausted(): boolean {
    return this.budget?.exhausted() ?? false;
  }

  /**
   * A request within the budget: its deadline and size cap, and its cost counted. `take` keeps
   * the events of the answer the budget allows (the rest are dropped unread) and counts them.
   */
  private async request<T>(server: string, kind: FetchKind, request: FederationRequest, take: (answer: T, maxEvents: number) => number): Promise<T> {
    if (!this.budget) return this.client.request<T>(server, request);
    const budget = this.budget;
    const slot = await budget.take(kind);
    let bytes = 0;
    let events = 0;
    try {
      const sent = this.client.request<T>(server, { ...request, timeoutMs: slot.timeoutMs, maxResponseBytes: slot.maxResponseBytes, onAnswerBytes: (size) => (bytes = size) });
      // The deadline holds over the whole request, however many addresses the server has.
      const answer = await withDeadline(sent, slot.timeoutMs);
      events = take(answer, slot.maxEvents);
      return answer;
    } finally {
      budget.settle(slot, bytes, events);
    }
  }

  async events(roomId: string, eventIds: readonly string[]): Promise<VerifiedPdu[]> {
    const found: VerifiedPdu[] = [];
    // Past the budget the rest are not asked for; what was found is kept.
    await eachLimited(eventIds, FETCH_CONCURRENCY, async (eventId) => {
      if (this.budget?.exhausted()) return;
      const event = await this.firstAnswer(async (server) => {
        const answer = await this.request<{ pdus?: unknown }>(server, 'event', { method: 'GET', path: `/_matrix/federation/v1/event/${encodeURIComponent(eventId)}` }, () => 1);
        const raw = Array.isArray(answer.pdus) ? answer.pdus[0] : undefined;
        const result = await checkPdu(raw, this.version, roomId, this.keyRing, this.budget);
        // A server answering with another event than the one asked for is not believed.
        return 'verified' in result && result.verified.eventId === eventId ? result.verified : undefined;
      }).catch((err: unknown) => {
        if (err instanceof FetchRefused) return undefined;
        throw err;
      });
      if (event) found.push(event);
    });
    return found;
  }

  async missingEvents(roomId: string, earliest: readonly string[], latest: readonly string[], limit: number): Promise<VerifiedPdu[]> {
    const events = await this.firstAnswer(async (server) => {
      const answer = await this.request<{ events?: unknown }>(
        server,
        'missing',
        {
          method: 'POST',
          path: `/_matrix/federation/v1/get_missing_events/${encodeURIComponent(roomId)}`,
          body: { earliest_events: earliest, latest_events: latest, limit, min_depth: 0 },
        },
        (body, maxEvents) => {
          if (!Array.isArray(body.events)) return 0;
          const kept = body.events.slice(0, Math.min(limit, maxEvents));
          body.events = kept;
          return kept.length;
        },
      );
      return Array.isArray(answer.events) ? answer.events.slice(0, limit) : undefined;
    });
    return events ? verifyPdus(events, this.version, roomId, this.keyRing, this.budget) : [];
  }

  async stateIdsBefore(roomId: string, eventId: string): Promise<{ stateIds: string[]; authChainIds: string[] }> {
    const answer = await this.firstAnswer(async (server) => {
      const body = await this.request<{ pdu_ids?: unknown; auth_chain_ids?: unknown }>(
        server,
        'state_ids',
        { method: 'GET', path: `/_matrix/federation/v1/state_ids/${encodeURIComponent(roomId)}?event_id=${encodeURIComponent(eventId)}` },
        // Ids are cheap, but each is looked up here: a hundred count as one event; past the budget, refused whole.
        (answer, maxEvents) => {
          const ids = (Array.isArray(answer.pdu_ids) ? answer.pdu_ids.length : 0) + (Array.isArray(answer.auth_chain_ids) ? answer.auth_chain_ids.length : 0);
          const cost = Math.ceil(ids / 100);
          if (cost > maxEvents) answer.pdu_ids = undefined;
          return cost;
        },
      );
      const stateIds = idList(body.pdu_ids);
      const authChainIds = idList(body.auth_chain_ids);
      return stateIds && authChainIds ? { stateIds, authChainIds } : undefined;
    });
    return answer ?? { stateIds: [], authChainIds: [] };
  }

  async stateBefore(roomId: string, eventId: string): Promise<VerifiedPdu[]> {
    const raws = await this.firstAnswer(async (server) => {
      const body = await this.request<{ pdus?: unknown; auth_chain?: unknown }>(
        server,
        'state',
        { method: 'GET', path: `/_matrix/federation/v1/state/${encodeURIComponent(roomId)}?event_id=${encodeURIComponent(eventId)}` },
        (answer, maxEvents) => {
          if (!Array.isArray(answer.pdus) || !Array.isArray(answer.auth_chain)) return 0;
          const pdus = answer.pdus.slice(0, maxEvents);
          const authChain = answer.auth_chain.slice(0, Math.max(0, maxEvents - pdus.length));
          answer.pdus = pdus;
          answer.auth_chain = authChain;
          return pdus.length + authChain.length;
        },
      );
      if (!Array.isArray(body.pdus) || !Array.isArray(body.auth_chain) || body.pdus.length + body.auth_chain.length > MAX_STATE_IDS) return undefined;
      return [...body.pdus, ...body.auth_chain];
    });
    return raws ? verifyPdus(raws, this.version, roomId, this.keyRing, this.budget) : [];
  }

  async authChain(roomId: string, eventId: string): Promise<VerifiedPdu[]> {
    const raws = await this.firstAnswer(async (server) => {
      const body = await this.request<{ auth_chain?: unknown }>(
        server,
        'auth_chain',
        { method: 'GET', path: `/_matrix/federation/v1/event_auth/${encodeURIComponent(roomId)}/${encodeURIComponent(eventId)}` },
        (answer, maxEvents) => {
          if (!Array.isArray(answer.auth_chain)) return 0;
          const kept = answer.auth_chain.slice(0, maxEvents);
          answer.auth_chain = kept;
          return kept.length;
        },
      );
      return Array.isArray(body.auth_chain) && body.auth_chain.length <= MAX_STATE_IDS ? body.auth_chain : undefined;
    });
    return raws ? verifyPdus(raws, this.version, roomId, this.keyRing, this.budget) : [];
  }

  /** Asks each server in turn until one answers usefully; a spent budget asks no more. */
  private async firstAnswer<T>(ask: (server: string) => Promise<T | undefined>): Promise<T | undefined> {
    for (const server of this.servers) {
      try {
        const answer = await ask(server);
        if (answer !== undefined) return answer;
      } catch (err) {
        if (err instanceof FetchRefused) throw err;
        // Unreachable or refusing: the next server may know.
      }
    }
    return undefined;
  }
}

function idList(value: unknown): string[] | undefined {
  if (!Array.isArray(value) || value.length > MAX_STATE_IDS) return undefined;
  return value.every((id) => typeof id === 'string') ? (value as string[]) : undefined;
}

/** The answer, or an error once `ms` have passed (the request itself ends by its own deadline). */
/** Runs `work` over the items, at most `limit` at once. */
export async function eachLimited<T>(items: readonly T[], limit: number, work: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const runners = Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) await work(items[next++]!);
  });
  await Promise.all(runners);
}
