/** The events waiting to be pushed to each application service (see migration 0020). */
import type { Kysely } from 'kysely';
import type { Database } from './schema.js';

export interface OutboxEntry {
  id: number;
  eventId: string;
}

export class AppserviceStore {
  constructor(private readonly db: Kysely<Database>) {}

  async enqueue(rows: ReadonlyArray<{ asId: string; eventId: string }>, now: number): Promise<void> {
    for (let i = 0; i < rows.length; i += 200) {
      await this.db
        .insertInto('appservice_outbox')
        .values(rows.slice(i, i + 200).map((row) => ({ as_id: row.asId, event_id: row.eventId, txn_id: null, created_ts: now })))
        .execute();
    }
  }

  /**
   * The next transaction for an appservice, oldest events first: the one a failed attempt fixed
   * (rows carrying the oldest txn_id), or else up to `limit` of the oldest rows. `fixed` tells
   * which; the id names the first and last row, so it stays the same for the same rows.
   */
  async nextTransaction(asId: string, limit: number): Promise<{ txnId: string; fixed: boolean; entries: OutboxEntry[] } | undefined> {
    const head = await this.db.selectFrom('appservice_outbox').select(['id', 'txn_id']).where('as_id', '=', asId).orderBy('id').limit(1).executeTakeFirst();
    if (!head) return undefined;
    const fixed = head.txn_id !== null;
    let query = this.db.selectFrom('appservice_outbox').select(['id', 'event_id']).where('as_id', '=', asId);
    query = fixed ? query.where('txn_id', '=', head.txn_id) : query.where('txn_id', 'is', null).limit(limit);
    const rows = await query.orderBy('id').execute();
    const entries = rows.map((row) => ({ id: row.id, eventId: row.event_id }));
    return { txnId: `${entries[0]!.id}-${entries.at(-1)!.id}`, fixed, entries };
  }

  /** A transaction's first attempt failed: its rows stay together for every retry, across restarts. */
  async fixTransaction(asId: string, ids: readonly number[]): Promise<void> {
    await this.db.updateTable('appservice_outbox').set({ txn_id: ids[0]! }).where('as_id', '=', asId).where('id', 'in', ids).execute();
  }

  /** The appservice acknowledged the transaction: its rows are done. */
  async completeTransaction(asId: string, ids: readonly number[]): Promise<void> {
    await this.db.deleteFrom('appservice_outbox').where('as_id', '=', asId).where('id', 'in', ids).execute();
  }

}
