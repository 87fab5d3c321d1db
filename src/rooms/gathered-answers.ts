/**
 * What other servers answered, gathered outside a room's lock and read inside it.
 *
 * A batch of remote events is checked under its room's lock (rooms/remote-events.ts), and the
 * check must never wait on the network there: one slow or hostile server would hold up every
 * other server's events in the room. So the check reads answers from here only. A question not
 * answered yet is noted and answered "nothing" for now; the batch is then not written, the lock is
 * let go, the noted questions are asked (`gather`), and the batch is checked again. Each question
 * is asked at most once, and the source refuses to ask more once the batch's budget is spent
 * (`FetchRefused`): then every question still open stays answered "nothing", and the batch is
 * written with what it has.
 */
import { FetchRefused, type RemoteEventSource, type VerifiedPdu } from './event-source.js';

type StateIds = { stateIds: string[]; authChainIds: string[] };

const NO_STATE_IDS: StateIds = { stateIds: [], authChainIds: [] };

export class GatheredAnswers implements RemoteEventSource {
  private readonly eventAnswers = new Map<string, VerifiedPdu | null>();
  private readonly missingAnswers = new Map<string, VerifiedPdu[]>();
  private readonly stateIdsAnswers = new Map<string, StateIds>();
  private readonly stateAnswers = new Map<string, VerifiedPdu[]>();
  private readonly authChainAnswers = new Map<string, VerifiedPdu[]>();
  private readonly wantedEvents = new Set<string>();
  private readonly wantedMissing = new Map<string, { earliest: readonly string[]; latest: readonly string[]; limit: number }>();
  private readonly wantedStateIds = new Set<string>();
  private readonly wantedState = new Set<string>();
  private readonly wantedAuthChain = new Set<string>();
  private closed: boolean;
  /** Rounds of gathering so far. */
  rounds = 0;

  constructor(
    private readonly roomId: string,
    /** Where questions go; undefined: nothing is asked (a server we do not ask anything of). */
    private readonly network: RemoteEventSource | undefined,
  ) {
    this.closed = network === undefined;
  }

  /** Whether the last check asked something not answered yet that can still be asked. */
  get needsMore(): boolean {
    return !this.closed && (this.wantedEvents.size > 0 || this.wantedMissing.size > 0 || this.wantedStateIds.size > 0 || this.wantedState.size > 0 || this.wantedAuthChain.size > 0);
  }

  /** Whether the sender has said (or will never say) what the state before `eventId` is. */
  stateAnswered(eventId: string): boolean {
    return this.closed || this.stateAnswers.has(eventId);
  }

  /** Whether the sender has said (or will never say) what `eventId`'s auth chain is. */
  authChainAnswered(eventId: string): boolean {
    return this.closed || this.authChainAnswers.has(eventId);
  }

  /** Asks nothing more: open questions stay answered "nothing". */
  close(): void {
    this.closed = true;
  }

  async events(_roomId: string, eventIds: readonly string[]): Promise<VerifiedPdu[]> {
    const found: VerifiedPdu[] = [];
    for (const id of eventIds) {
      const answer = this.eventAnswers.get(id);
      if (answer) found.push(answer);
      else if (answer === undefined && !this.closed) this.wantedEvents.add(id);
    }
    return found;
  }

  async missingEvents(_roomId: string, earliest: readonly string[], latest: readonly string[], limit: number): Promise<VerifiedPdu[]> {
    // The room's extremities (`earliest`) may move between rounds; the question is the same.
    const key = `${[...latest].sort().join(' ')}|${limit}`;
    const answer = this.missingAnswers.get(key);
    if (answer) return answer;
    if (!this.closed) this.wantedMissing.set(key, { earliest, latest, limit });
    return [];
  }

  async stateIdsBefore(_roomId: string, eventId: string): Promise<StateIds> {
    const answer = this.stateIdsAnswers.get(eventId);
    if (answer) return answer;
    if (!this.closed) this.wantedStateIds.add(eventId);
    return NO_STATE_IDS;
  }

  async stateBefore(_roomId: string, eventId: string): Promise<VerifiedPdu[]> {
    const answer = this.stateAnswers.get(eventId);
    if (answer) return answer;
    if (!this.closed) this.wantedState.add(eventId);
    return [];
  }

  async authChain(_roomId: string, eventId: string): Promise<VerifiedPdu[]> {
    const answer = this.authChainAnswers.get(eventId);
    if (answer) return answer;
    if (!this.closed) this.wantedAuthChain.add(eventId);
    return [];
  }

  /**
   * Asks what the last check wanted (outside any lock). A question that fails is answered
   * "nothing"; once the source refuses, nothing more is asked.
   */
  async gather(): Promise<void> {
    this.rounds++;
    const network = this.network;
    if (!network || this.closed) return;
    const asked: Array<Promise<void>> = [];
    const ask = <T>(question: () => Promise<T>, answer: (value: T | undefined) => void) =>
      asked.push(
        question().then(answer, (err: unknown) => {
          if (err instanceof FetchRefused) this.closed = true;
          answer(undefined);
        }),
      );
    for (const [key, { earliest, latest, limit }] of this.wantedMissing) {
      ask(() => network.missingEvents(this.roomId, earliest, latest, limit), (events) => {
        this.missingAnswers.set(key, events ?? []);
        for (const event of events ?? []) this.eventAnswers.set(event.eventId, event);
      });
    }
    for (const eventId of this.wantedStateIds) ask(() => network.stateIdsBefore(this.roomId, eventId), (ids) => this.stateIdsAnswers.set(eventId, ids ?? NO_STATE_IDS));
    for (const eventId of this.wantedState) {
      ask(() => network.stateBefore(this.roomId, eventId), (events) => {
        this.stateAnswers.set(eventId, events ?? []);
        for (const event of events ?? []) this.eventAnswers.set(event.eventId, event);
      });
    }
    for (const eventId of this.wantedAuthChain) {
      ask(() => network.authChain(this.roomId, eventId), (events) => {
        this.authChainAnswers.set(eventId, events ?? []);
        for (const event of events ?? []) this.eventAnswers.set(event.eventId, event);
      });
    }
    const eventIds = [...this.wantedEvents].filter((id) => !this.eventAnswers.has(id));
    if (eventIds.length > 0) {
      ask(() => network.events(this.roomId, eventIds), (events) => {
        for (const event of events ?? []) this.eventAnswers.set(event.eventId, event);
        // Asked and not given: answered "nothing" for good.
        for (const id of eventIds) if (!this.eventAnswers.has(id)) this.eventAnswers.set(id, null);
      });
    }
    this.wantedMissing.clear();
    this.wantedStateIds.clear();
    this.wantedState.clear();
    this.wantedAuthChain.clear();
    this.wantedEvents.clear();
    await Promise.all(asked);
    if (network.exhausted?.()) this.closed = true;
  }
}
