/** Federation's records: other servers' keys, transactions received, and the outbound queue. */
import type { Kysely, Selectable } from 'kysely';
import type { Database, FederationDestinationsTable, FederationOutboxTable, RemoteMembershipsTable, ServerKeysTable } from './schema.js';

export type ServerKeyRow = Selectable<ServerKeysTable>;
export type OutboxRow = Selectable<FederationOutboxTable>;
export type DestinationRow = Selectable<FederationDestinationsTable>;
export type RemoteMembershipRow = Selectable<RemoteMembershipsTable>;

/** Key ids of one listing stored for the notary, and listings kept per server, at most. */
const MAX_LISTED_KEYS = 10;
const MAX_LISTINGS_PER_SERVER = 20;

export class FederationStore {
  constructor(private readonly db: Kysely<Database>) {}

  // ---- server keys ----

  async serverKeys(serverName: string): Promise<ServerKeyRow[]> {
    return this.db.selectFrom('server_keys').selectAll().where('server_name', '=', serverName).execute();
  }

  /** Stores keys from a verified listing; a key seen again keeps the later validity. */
  async storeServerKeys(rows: ServerKeyRow[], response: { serverName: string; json: string; validUntilTs: number; keyIds: readonly string[] } | undefined): Promise<void> {
    for (const row of rows) {
      await this.db
        .insertInto('server_keys')
        .values(row)
        .onConflict((oc) =>
          oc.columns(['server_name', 'key_id']).doUpdateSet({
            verify_key: row.verify_key,
            valid_until_ts: row.valid_until_ts,
            expired_ts: row.expired_ts,
            fetched_ts: row.fetched_ts,
          }),
        )
        .execute();
    }
    if (response) {
      await this.db
        .insertInto('server_key_responses')
        .values({ server_name: response.serverName, response: response.json, valid_until_ts: response.validUntilTs })
        .onConflict((oc) => oc.column('server_name').doUpdateSet({ response: response.json, valid_until_ts: response.validUntilTs }))
        .execute();
      const keyIds = [...new Set(response.keyIds)].slice(0, MAX_LISTED_KEYS);
      if (keyIds.length > 0) {
        await this.db
          .insertInto('server_key_listings')
          .values(keyIds.map((keyId) => ({ server_name: response.serverName, key_id: keyId, response: response.json, valid_until_ts: response.validUntilTs })))
          .onConflict((oc) => oc.columns(['server_name', 'key_id']).doUpdateSet({ response: response.json, valid_until_ts: response.validUntilTs }))
          .execute();
      }
      // A server that names new keys on every fetch does not fill the disk: its newest are kept.
      const kept = await this.db
        .selectFrom('server_key_listings')
        .select('key_id')
        .where('server_name', '=', response.serverName)
        .orderBy('valid_until_ts', 'desc')
        .orderBy('key_id')
        .limit(MAX_LISTINGS_PER_SERVER)
        .execute();
      if (kept.length === MAX_LISTINGS_PER_SERVER) {
        await this.db
          .deleteFrom('server_key_listings')
          .where('server_name', '=', response.serverName)
          .where(
            'key_id',
            'not in',
            kept.map((row) => row.key_id),
          )
          .execute();
      }
    }
  }

  /** The listings a server last gave with each of these key ids in it (the notary's answers), by key id, in one query. */
  async keyListings(serverName: string, keyIds: readonly string[]): Promise<Map<string, { response: string; validUntilTs: number }>> {
    const found = new Map<string, { response: string; validUntilTs: number }>();
    if (keyIds.length === 0) return found;
    const rows = await this.db.selectFrom('server_key_listings').selectAll().where('server_name', '=', serverName).where('key_id', 'in', [...keyIds]).execute();
    for (const row of rows) found.set(row.key_id, { response: row.response, validUntilTs: Number(row.valid_until_ts) });
    return found;
  }

  async keyResponse(serverName: string): Promise<{ response: string; validUntilTs: number } | undefined> {
    const row = await this.db.selectFrom('server_key_responses').selectAll().where('server_name', '=', serverName).executeTakeFirst();
    return row ? { response: row.response, validUntilTs: Number(row.valid_until_ts) } : undefined;
  }

  // ---- inbound transactions ----

  async inboundTxn(origin: string, txnId: string): Promise<string | undefined> {
    const row = await this.db.selectFrom('federation_inbound_txns').select('response').where('origin', '=', origin).where('txn_id', '=', txnId).executeTakeFirst();
    return row?.response;
  }

  async recordInboundTxn(origin: string, txnId: string, response: string, now: number): Promise<void> {
    await this.db.insertInto('federation_inbound_txns').values({ origin, txn_id: txnId, response, received_ts: now }).onConflict((oc) => oc.doNothing()).execute();
  }

  /** Transactions are remembered for a day: long enough for every retry of a sender. */
  async pruneInboundTxns(before: number): Promise<void> {
    await this.db.deleteFrom('federation_inbound_txns').where('received_ts', '<', before).execute();
  }

  // ---- the outbound queue ----

  async enqueue(rows: Array<{ destination: string; kind: 'pdu' | 'edu'; payload: string }>, now: number): Promise<void> {
    for (let i = 0; i < rows.length; i += 200) {
      await this.db.insertInto('federation_outbox').values(rows.slice(i, i + 200).map((row) => ({ ...row, created_ts: now }))).execute();
    }
  }

  /**
   * What goes to a destination next: a transaction that was sent without an answer (its rows, to
   * go again under the same id), or else the oldest queued items, at most `pdus` PDUs and `edus` EDUs.
   */
  async nextBatch(destination: string, pdus: number, edus: number): Promise<OutboxRow[]> {
    const unanswered = await this.db.selectFrom('federation_outbox').select('txn_id').where('destination', '=', destination).where('txn_id', 'is not', null).orderBy('id').limit(1).executeTakeFirst();
    if (unanswered?.txn_id) {
      return this.db.selectFrom('federation_outbox').selectAll().where('destination', '=', destination).where('txn_id', '=', unanswered.txn_id).orderBy('id').execute();
    }
    const [pduRows, eduRows] = await Promise.all([
      this.db.selectFrom('federation_outbox').selectAll().where('destination', '=', destination).where('kind', '=', 'pdu').orderBy('id').limit(pdus).execute(),
      this.db.selectFrom('federation_outbox').selectAll().where('destination', '=', destination).where('kind', '=', 'edu').orderBy('id').limit(edus).execute(),
    ]);
    return [...pduRows, ...eduRows];
  }

  /** Records the transaction the rows are about to be sent in (null: it was answered, refused). */
  async assignTxn(ids: readonly number[], txnId: string | null): Promise<void> {
    for (let i = 0; i < ids.length; i += 500) await this.db.updateTable('federation_outbox').set({ txn_id: txnId }).where('id', 'in', ids.slice(i, i + 500)).execute();
  }

  async dequeue(ids: readonly number[]): Promise<void> {
    for (let i = 0; i < ids.length; i += 500) await this.db.deleteFrom('federation_outbox').where('id', 'in', ids.slice(i, i + 500)).execute();
  }

  /** Destinations with something queued. */
  async queuedDestinations(): Promise<string[]> {
    const rows = await this.db.selectFrom('federation_outbox').select('destination').distinct().execute();
    return rows.map((row) => row.destination);
  }

  /** Everything queued for other servers, by kind (metrics). */
  async queuedByKind(): Promise<{ pdu: number; edu: number }> {
    const rows = await this.db.selectFrom('federation_outbox').select(['kind', (eb) => eb.fn.countAll<number>().as('n')]).groupBy('kind').execute();
    const counts = { pdu: 0, edu: 0 };
    for (const row of rows) counts[row.kind as 'pdu' | 'edu'] = Number(row.n);
    return counts;
  }

  async queueLength(destination: string): Promise<number> {
    const row = await this.db.selectFrom('federation_outbox').select((eb) => eb.fn.countAll<number>().as('n')).where('destination', '=', destination).executeTakeFirst();
    return Number(row?.n ?? 0);
  }

  /** Every destination with a record (it failed once) or something queued, by name. */
  async destinations(): Promise<string[]> {
    const [known, queued] = await Promise.all([
      this.db.selectFrom('federation_destinations').select('destination').execute(),
      this.queuedDestinations(),
    ]);
    return [...new Set([...known.map((row) => row.destination), ...queued])].sort();
  }

  async destination(destination: string): Promise<DestinationRow | undefined> {
    return this.db.selectFrom('federation_destinations').selectAll().where('destination', '=', destination).executeTakeFirst();
  }

  async setDestination(row: DestinationRow): Promise<void> {
    await this.db
      .insertInto('federation_destinations')
      .values(row)
      .onConflict((oc) =>
        oc.column('destination').doUpdateSet({ failures: row.failures, retry_after_ts: row.retry_after_ts, last_success_ts: row.last_success_ts, last_error: row.last_error }),
      )
      .execute();
  }

  // ---- memberships in rooms this server is not in (invites from other servers) ----

  async putRemoteMembership(row: RemoteMembershipRow): Promise<void> {
    const { room_id: _roomId, user_id: _userId, ...update } = row;
    await this.db.insertInto('remote_memberships').values(row).onConflict((oc) => oc.columns(['room_id', 'user_id']).doUpdateSet(update)).execute();
  }

  async remoteMembership(roomId: string, userId: string): Promise<RemoteMembershipRow | undefined> {
    return this.db.selectFrom('remote_memberships').selectAll().where('room_id', '=', roomId).where('user_id', '=', userId).executeTakeFirst();
  }

  /** How many invites from other servers a user has not answered. */
  async pendingRemoteInvites(userId: string): Promise<number> {
    const row = await this.db
      .selectFrom('remote_memberships')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('user_id', '=', userId)
      .where('membership', '=', 'invite')
      .executeTakeFirst();
    return Number(row?.n ?? 0);
  }

  async deleteRemoteMembership(roomId: string, userId: string): Promise<void> {
    await this.db.deleteFrom('remote_memberships').where('room_id', '=', roomId).where('user_id', '=', userId).execute();
  }
}
