/** Per-user rate-limit overrides (Synapse's `override_ratelimit` admin API). */
import type { Kysely, Selectable } from 'kysely';
import type { Database, RatelimitOverridesTable } from './schema.js';

export type RatelimitOverrideRow = Selectable<RatelimitOverridesTable>;

export class RatelimitStore {
  constructor(private readonly db: Kysely<Database>) {}

  async get(userId: string): Promise<RatelimitOverrideRow | undefined> {
    return this.db.selectFrom('ratelimit_overrides').selectAll().where('user_id', '=', userId).executeTakeFirst();
  }

  async set(row: RatelimitOverrideRow): Promise<void> {
    await this.db
      .insertInto('ratelimit_overrides')
      .values(row)
      .onConflict((oc) =>
        oc.column('user_id').doUpdateSet({ messages_per_second: row.messages_per_second, burst_count: row.burst_count }),
      )
      .execute();
  }

  async delete(userId: string): Promise<void> {
    await this.db.deleteFrom('ratelimit_overrides').where('user_id', '=', userId).execute();
  }
}
