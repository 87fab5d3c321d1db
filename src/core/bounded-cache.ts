/**
 * A Map with a size limit (the oldest entry goes first) for what is read from the database and
 * kept in memory. `generation` guards against a read that raced a change: take it before the
 * read, and `setIfUnchanged` keeps the value only if nothing was invalidated meanwhile.
 */
export class BoundedCache<K, V> {
  private readonly entries = new Map<K, V>();
  private currentGeneration = 0;

  constructor(private readonly maxEntries: number) {}

  get generation(): number {
    return this.currentGeneration;
  }

  get size(): number {
    return this.entries.size;
  }

  get(key: K): V | undefined {
    return this.entries.get(key);
  }

  set(key: K, value: V): void {
    if (this.entries.size >= this.maxEntries && !this.entries.has(key)) {
      const oldest = this.entries.keys().next();
      if (!oldest.done) this.entries.delete(oldest.value);
    }
    this.entries.set(key, value);
  }

  /** Keeps a value read at `generation`, unless the cache was invalidated since. */
  setIfUnchanged(key: K, value: V, generation: number): void {
    if (generation === this.currentGeneration) this.set(key, value);
  }

  /** Forgets one entry; reads of it that started before are not kept either. */
  delete(key: K): void {
    this.currentGeneration++;
    this.entries.delete(key);
  }

  /** Forgets everything; reads that started before are not kept either. */
  invalidate(): void {
    this.currentGeneration++;
    this.entries.clear();
  }
}
