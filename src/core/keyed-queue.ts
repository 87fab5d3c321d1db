/**
 * One piece of work at a time per key (a user, a room): work for the same key waits for the work
 * before it, work for other keys does not. A failure ends only its own work. Keys with nothing
 * queued are forgotten, so the map holds only what is in flight.
 */
export class KeyedQueue<K> {
  private readonly tails = new Map<K, Promise<unknown>>();

  run<T>(key: K, work: () => Promise<T>): Promise<T> {
    const previous = this.tails.get(key) ?? Promise.resolve();
    const next = previous.catch(() => undefined).then(work);
    const settled = next.catch(() => undefined);
    this.tails.set(key, settled);
    void settled.then(() => {
      if (this.tails.get(key) === settled) this.tails.delete(key);
    });
    return next;
  }
}
