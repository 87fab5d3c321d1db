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
   * The next transaction for an appservice: the oldest one already sent (its rows carry its
   * txn_id: sent again as it was, under its id), or else up to `limit` of the oldest rows, which
   * the caller fixes before sending. `fixed` tells which. The id names the first and last row.
   */
  async nextTransaction(asId: string, limit: number): Promise<{ txnId: string; fixed: boolean; entries: OutboxEntry[] } | undefined> {
    const sent = await this.db
      .selectFrom('appservice_outbox')
      .select('txn_id')
      .where('as_id', '=', asId)
      .where('txn_id', 'is not', null)
      .orderBy('txn_id')
      .limit(1)
      .executeTakeFirst();
    let query = this.db.selectFrom('appservice_outbox').select(['id', 'event_id']).where('as_id', '=', asId);
    query = sent ? query.where('txn_id', '=', sent.txn_id) : query.where('txn_id', 'is', null).limit(limit);
    const rows = await query.orderBy('id').execute();
    if (rows.length === 0) return undefined;
    const entries = rows.map((row) => ({ id: row.id, eventId: row.event_id }));
    return { txnId: `${entries[0]!.id}-${entries.at(-1)!.id}`, fixed: sent !== undefined, entries };
  }

  /**
   * Fixes a transaction before it is first sent: its rows carry its id (the first row's) from then
   * on, so it goes again with the same events under the same id until answered, also after a
   * crash, and rows queued meanwhile wait for a later transaction.
   */
  async fixTransaction(asId: string, ids: readonly number[]): Promise<void> {
    await this.db.updateTable('appservice_outbox').set({ txn_id: ids[0]! }).where('as_id', '=', asId).where('id', 'in', ids).execute();
  }

  /** The appservice acknowledged the transaction: its rows are done. */
  async completeTransaction(asId: string, ids: readonly number[]): Promise<void> {
    await this.db.deleteFrom('appservice_outbox').where('as_id', '=', asId).where('id', 'in', ids).execute();
  }

}
