/** The events waiting to be pushed to each application service (see migration 0020). */
import type { Kysely } from 'kysely';
import type { Database } from './schema.js';

export interface OutboxEntry {
  id: number;
  eventId: string;
  txnId: number | null;
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
   * The next transaction for an appservice: the one already begun (rows carrying the oldest
   * txn_id), or else up to `limit` of the oldest rows, now given the first row's id as their
   * transaction id. Oldest first.
   */
  async nextTransaction(asId: string, limit: number): Promise<{ txnId: number; entries: OutboxEntry[] } | undefined> {
    const head = await this.db.selectFrom('appservice_outbox').select(['id', 'txn_id']).where('as_id', '=', asId).orderBy('id').limit(1).executeTakeFirst();
    if (!head) return undefined;
    if (head.txn_id === null) {
      const ids = (await this.db.selectFrom('appservice_outbox').select('id').where('as_id', '=', asId).where('txn_id', 'is', null).orderBy('id').limit(limit).execute()).map((row) => row.id);
      await this.db.updateTable('appservice_outbox').set({ txn_id: head.id }).where('id', 'in', ids).execute();
    }
    const txnId = head.txn_id ?? head.id;
    const rows = await this.db.selectFrom('appservice_outbox').select(['id', 'event_id', 'txn_id']).where('as_id', '=', asId).where('txn_id', '=', txnId).orderBy('id').execute();
    return { txnId: Number(txnId), entries: rows.map((row) => ({ id: row.id, eventId: row.event_id, txnId: row.txn_id === null ? null : Number(row.txn_id) })) };
  }

  /** The appservice acknowledged the transaction: its rows are done. */
  async completeTransaction(asId: string, txnId: number): Promise<void> {
    await this.db.deleteFrom('appservice_outbox').where('as_id', '=', asId).where('txn_id', '=', txnId).execute();
  }

  async pendingCount(asId: string): Promise<number> {
    const row = await this.db.selectFrom('appservice_outbox').select((eb) => eb.fn.countAll<number>().as('n')).where('as_id', '=', asId).executeTakeFirst();
    return Number(row?.n ?? 0);
  }
}
