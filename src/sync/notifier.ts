/**
 * Wakes parked `/sync` requests. Each user has a serial that moves whenever something concerning
 * them commits. A sync reads the serial before it looks for news and waits only if the serial has
 * not moved since: a wake-up between looking and parking is never lost, and no timer polls.
 * Waking costs one map lookup per user concerned (the members of the room written to).
 */
export class Notifier {
  private serial = 0;
  private readonly userSerials = new Map<string, number>();
  private readonly waiters = new Map<string, Set<(notifiedAt: number) => void>>();
  /** Called after every notify, whoever it concerns (the test double's `waitFor` watches rooms). */
  private readonly observers = new Set<() => void>();
  /**
   * Users peeking into rooms they are not in (the legacy `/events?room_id=` of a world-readable
   * room): room id to user id to how many of their requests are parked there. Only parked
   * requests are here; the entry goes when the last one ends.
   */
  private readonly peeking = new Map<string, Map<string, number>>();
  /** Users not woken by their own messages (see `ignoreOwnMessages`). */
  private readonly deaf = new Set<string>();

  /**
   * A service user (the bridge) whose sync never needs to answer because of a message it sent
   * itself: posting a webhook would otherwise wake its sync for nothing, once per post.
   */
  ignoreOwnMessages(userId: string): void {
    this.deaf.add(userId);
  }

  ignoresOwnMessages(userId: string): boolean {
    return this.deaf.has(userId);
  }

  /**
   * `userId` is woken with the room's members (by `peekersOf` at the wake-up sites) until the
   * returned function is called, which the peeking request does when it ends.
   */
  peek(roomId: string, userId: string): () => void {
    let users = this.peeking.get(roomId);
    if (!users) {
      users = new Map();
      this.peeking.set(roomId, users);
    }
    users.set(userId, (users.get(userId) ?? 0) + 1);
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      const current = this.peeking.get(roomId);
      const count = current?.get(userId) ?? 0;
      if (!current || count <= 1) {
        current?.delete(userId);
        if (current?.size === 0) this.peeking.delete(roomId);
      } else current.set(userId, count - 1);
    };
  }

  /** The users peeking into the room now (none, nearly always: one map lookup). */
  peekersOf(roomId: string): Iterable<string> {
    return this.peeking.get(roomId)?.keys() ?? [];
  }

  /** Calls `listener` after every notify until the returned function is called. */
  observe(listener: () => void): () => void {
    this.observers.add(listener);
    return () => this.observers.delete(listener);
  }

  /** The serial of the last `notifyEveryone`: every user's serial is at least this. */
  private everyoneSerial = 0;

  /** The user's serial now; pass it to `waitForChange` after finding nothing new. */
  serialOf(userId: string): number {
    return Math.max(this.userSerials.get(userId) ?? 0, this.everyoneSerial);
  }

  /** Wakes every sync (what changed is not known: another process's changes were not all heard of). */
  notifyEveryone(): void {
    this.everyoneSerial = ++this.serial;
    this.notify([...this.waiters.keys()]);
  }

  notify(userIds: Iterable<string>): void {
    const serial = ++this.serial;
    const notifiedAt = this.wakeObserver ? performance.now() : 0;
    for (const userId of userIds) {
      this.userSerials.set(userId, serial);
      const waiting = this.waiters.get(userId);
      if (!waiting) continue;
      this.waiters.delete(userId);
      for (const wake of waiting) wake(notifiedAt);
    }
    for (const observer of this.observers) observer();
  }

  /** Metrics: called with the milliseconds from a commit's notification to a parked sync resuming. */
  wakeObserver: ((ms: number) => void) | undefined;

  private closing = false;

  /**
   * Shutting down: every parked sync answers now (with what it has, usually nothing new), and
   * later ones do not park, so the server can close without cutting requests off.
   */
  releaseAll(): void {
    this.closing = true;
    for (const [userId, waiting] of this.waiters) {
      this.waiters.delete(userId);
      for (const wake of waiting) wake(0);
    }
  }

  /** The users with a parked sync. */
  parkedUsers(): IterableIterator<string> {
    return this.waiters.keys();
  }

  /** How many requests are parked (for metrics and tests). */
  parkedCount(): number {
    let count = 0;
    for (const set of this.waiters.values()) count += set.size;
    return count;
  }

  /**
   * Resolves when the user's serial moves past `seenSerial`, after `timeoutMs`, or when `signal`
   * aborts (the client went away), whichever is first. Always frees its slot.
   */
  waitForChange(userId: string, seenSerial: number, timeoutMs: number, signal?: AbortSignal): Promise<void> {
    if (this.closing || this.serialOf(userId) !== seenSerial || timeoutMs <= 0 || signal?.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      let set = this.waiters.get(userId);
      if (!set) {
        set = new Set();
        this.waiters.set(userId, set);
      }
      const done = (notifiedAt: number): void => {
        if (notifiedAt > 0 && this.wakeObserver) {
          // Measured when the waiter's continuation runs, which is what a crowd of wake-ups delays.
          const observer = this.wakeObserver;
          queueMicrotask(() => observer(performance.now() - notifiedAt));
        }
        clearTimeout(timer);
        signal?.removeEventListener('abort', stop);
        const current = this.waiters.get(userId);
        if (current) {
          current.delete(done);
          if (current.size === 0) this.waiters.delete(userId);
        }
        resolve();
      };
      const stop = (): void => done(0);
      const timer = setTimeout(stop, timeoutMs);
      signal?.addEventListener('abort', stop, { once: true });
      set.add(done);
    });
  }
}
