/**
 * Users erased on deactivation (`erase: true`): their events are served redacted to those who
 * were not in the room when they were sent, and to other servers (as Synapse does). Local users
 * only, so the set is as large as the number of accounts ever erased here; read once, then kept.
 * (Another process of a cluster learns of an erasure at its next start.)
 */
import type { Storage } from '../storage/index.js';

export class ErasedUsers {
  private known: Promise<Set<string>> | undefined;

  constructor(private readonly storage: Storage) {}

  /** The erased users. */
  async all(): Promise<ReadonlySet<string>> {
    this.known ??= this.storage.users.erasedUsers().then(
      (ids) => new Set(ids),
      (err: unknown) => {
        this.known = undefined;
        throw err;
      },
    );
    return this.known;
  }

  async erase(userId: string): Promise<void> {
    await this.storage.users.markErased(userId);
    (await this.all() as Set<string>).add(userId);
  }
}
