/** The bridge user's records: its sync position, webhooks, feeds, subscriptions and seen items. */
import type { Kysely, Selectable } from 'kysely';
import { QueryTemplate } from './database.js';
import type { BridgeCommandsTable, BridgeCryptoRecordsTable, BridgeFeedsTable, BridgeRoomFeedsTable, BridgeWebhooksTable, Database } from './schema.js';

export type WebhookRow = Selectable<BridgeWebhooksTable>;
export type CommandRow = Selectable<BridgeCommandsTable>;
export type CryptoRecordRow = Selectable<BridgeCryptoRecordsTable>;
export type FeedRow = Selectable<BridgeFeedsTable>;
export type RoomFeedRow = Selectable<BridgeRoomFeedsTable>;
export type FeedPatch = Partial<Omit<FeedRow, 'url'>>;

/** SQLite allows 32,766 bound parameters; lists of item ids are sent in slices well under that. */
const IDS_PER_QUERY = 500;

// Compiled once (see QueryTemplate): it is on the path of every webhook call.
const webhookByHashQuery = new QueryTemplate((db: Kysely<Database>, idHash: string) =>
  db.selectFrom('bridge_webhooks').selectAll().where('id_hash', '=', idHash),
);

/**
 * What the bridge may use of storage: its own store, alone or in a transaction. The bridge acts on
 * rooms only through the room service, like any client; Storage fits this shape.
 */
export interface BridgeStorage {
  readonly bridge: BridgeStore;
  transaction<T>(work: (stores: { bridge: BridgeStore }) => Promise<T>): Promise<T>;
}

export class BridgeStore {
  constructor(private readonly db: Kysely<Database>) {}

  // ---- named values ----

  async getValue(key: string): Promise<string | undefined> {
    const row = await this.db.selectFrom('bridge_state').select('value').where('key', '=', key).executeTakeFirst();
    return row?.value;
  }

  async setValue(key: string, value: string): Promise<void> {
    await this.db
      .insertInto('bridge_state')
      .values({ key, value })
      .onConflict((oc) => oc.column('key').doUpdateSet({ value }))
      .execute();
  }

  // ---- the crypto device's store (bridge/crypto/indexeddb.ts) ----

  async cryptoRecords(): Promise<CryptoRecordRow[]> {
    return this.db.selectFrom('bridge_crypto_records').selectAll().execute();
  }

  /** Empties object stores of the crypto store (before they are written whole again). */
  async clearCryptoStores(stores: ReadonlyArray<{ database: string; objectStore: string }>): Promise<void> {
    for (const { database, objectStore } of stores) {
      await this.db.deleteFrom('bridge_crypto_records').where('database', '=', database).where('object_store', '=', objectStore).execute();
    }
  }

  async upsertCryptoRecords(rows: readonly CryptoRecordRow[]): Promise<void> {
    for (let i = 0; i < rows.length; i += IDS_PER_QUERY / 5) {
      await this.db
        .insertInto('bridge_crypto_records')
        .values(rows.slice(i, i + IDS_PER_QUERY / 5))
        .onConflict((oc) => oc.columns(['database', 'object_store', 'record_key']).doUpdateSet((eb) => ({ value: eb.ref('excluded.value') })))
        .execute();
    }
  }

  async deleteCryptoRecords(keys: ReadonlyArray<{ database: string; objectStore: string; key: string }>): Promise<void> {
    for (const { database, objectStore, key } of keys) {
      await this.db.deleteFrom('bridge_crypto_records').where('database', '=', database).where('object_store', '=', objectStore).where('record_key', '=', key).execute();
    }
  }

  /** Forgets the crypto store entirely (its key is lost: a new device starts). */
  async deleteAllCryptoRecords(): Promise<void> {
    await this.db.deleteFrom('bridge_crypto_records').execute();
  }

  // ---- commands seen and not yet done ----

  async insertCommands(rows: CommandRow[]): Promise<void> {
    if (rows.length === 0) return;
    await this.db.insertInto('bridge_commands').values(rows).onConflict((oc) => oc.doNothing()).execute();
  }

  /** Oldest first. */
  async pendingCommands(): Promise<CommandRow[]> {
    return this.db.selectFrom('bridge_commands').selectAll().orderBy('received_ts').orderBy('event_id').execute();
  }

  async deleteCommand(eventId: string): Promise<void> {
    await this.db.deleteFrom('bridge_commands').where('event_id', '=', eventId).execute();
  }

  // ---- webhooks ----

  /** Inserts a webhook; false when the room already has one of that name. */
  async insertWebhook(row: WebhookRow): Promise<boolean> {
    const result = await this.db
      .insertInto('bridge_webhooks')
      .values(row)
      .onConflict((oc) => oc.doNothing())
      .executeTakeFirst();
    return Number(result.numInsertedOrUpdatedRows ?? 0) > 0;
  }

  /** Every webhook call starts here. */
  async webhookByHash(idHash: string): Promise<WebhookRow | undefined> {
    return webhookByHashQuery.first(this.db, idHash);
  }

  async webhooksOfRoom(roomId: string): Promise<WebhookRow[]> {
    return this.db.selectFrom('bridge_webhooks').selectAll().where('room_id', '=', roomId).orderBy('name').execute();
  }

  async deleteWebhook(roomId: string, name: string): Promise<WebhookRow | undefined> {
    const row = await this.db
      .selectFrom('bridge_webhooks')
      .selectAll()
      .where('room_id', '=', roomId)
      .where('name', '=', name)
      .executeTakeFirst();
    if (row) await this.db.deleteFrom('bridge_webhooks').where('id_hash', '=', row.id_hash).execute();
    return row;
  }

  /** Gives a room's webhook a new id (and sealed secret); false when it has none of that name. */
  async rekeyWebhook(roomId: string, name: string, idHash: string, secretSealed: string | null): Promise<boolean> {
    const result = await this.db
      .updateTable('bridge_webhooks')
      .set({ id_hash: idHash, secret_sealed: secretSealed })
      .where('room_id', '=', roomId)
      .where('name', '=', name)
      .executeTakeFirst();
    return Number(result.numUpdatedRows) > 0;
  }

  /** Drops a webhook's secret; false when the room has no webhook of that name. */
  async clearWebhookSecret(roomId: string, name: string): Promise<boolean> {
    const result = await this.db
      .updateTable('bridge_webhooks')
      .set({ secret_sealed: null })
      .where('room_id', '=', roomId)
      .where('name', '=', name)
      .executeTakeFirst();
    return Number(result.numUpdatedRows) > 0;
  }

  async deleteWebhooksOfRoom(roomId: string): Promise<WebhookRow[]> {
    const rows = await this.webhooksOfRoom(roomId);
    await this.db.deleteFrom('bridge_webhooks').where('room_id', '=', roomId).execute();
    return rows;
  }

  // ---- feeds ----

  async feed(url: string): Promise<FeedRow | undefined> {
    return this.db.selectFrom('bridge_feeds').selectAll().where('url', '=', url).executeTakeFirst();
  }

  async insertFeedIfMissing(row: FeedRow): Promise<void> {
    await this.db.insertInto('bridge_feeds').values(row).onConflict((oc) => oc.doNothing()).execute();
  }

  async updateFeed(url: string, patch: FeedPatch): Promise<void> {
    if (Object.keys(patch).length === 0) return;
    await this.db.updateTable('bridge_feeds').set(patch).where('url', '=', url).execute();
  }

  /** Feeds due by `now` that at least one room follows. */
  async dueFeeds(now: number, limit: number): Promise<FeedRow[]> {
    return this.db
      .selectFrom('bridge_feeds')
      .selectAll()
      .where('next_poll_ts', '<=', now)
      .where((eb) => eb.exists(eb.selectFrom('bridge_room_feeds').select('room_id').whereRef('bridge_room_feeds.url', '=', 'bridge_feeds.url')))
      .orderBy('next_poll_ts')
      .limit(limit)
      .execute();
  }

  /** The earliest next poll among followed feeds, if any. */
  async nextPollTime(): Promise<number | undefined> {
    const row = await this.db
      .selectFrom('bridge_feeds')
      .select((eb) => eb.fn.min('next_poll_ts').as('next'))
      .where((eb) => eb.exists(eb.selectFrom('bridge_room_feeds').select('room_id').whereRef('bridge_room_feeds.url', '=', 'bridge_feeds.url')))
      .executeTakeFirst();
    return row?.next === null || row?.next === undefined ? undefined : Number(row.next);
  }

  /** Feeds no room follows any more, with their seen items. */
  async deleteUnfollowedFeeds(): Promise<void> {
    const orphans = await this.db
      .selectFrom('bridge_feeds')
      .select('url')
      .where((eb) => eb('url', 'not in', eb.selectFrom('bridge_room_feeds').select('url')))
      .execute();
    for (const { url } of orphans) {
      await this.db.deleteFrom('bridge_feed_seen').where('url', '=', url).execute();
      await this.db.deleteFrom('bridge_feeds').where('url', '=', url).execute();
    }
  }

  // ---- subscriptions ----

  async insertRoomFeed(row: RoomFeedRow): Promise<boolean> {
    const result = await this.db
      .insertInto('bridge_room_feeds')
      .values(row)
      .onConflict((oc) => oc.doNothing())
      .executeTakeFirst();
    return Number(result.numInsertedOrUpdatedRows ?? 0) > 0;
  }

  async roomFeeds(roomId: string): Promise<Array<RoomFeedRow & { feed: FeedRow }>> {
    const rows = await this.db
      .selectFrom('bridge_room_feeds')
      .innerJoin('bridge_feeds', 'bridge_feeds.url', 'bridge_room_feeds.url')
      .selectAll('bridge_room_feeds')
      .select([
        'bridge_feeds.title', 'bridge_feeds.etag', 'bridge_feeds.last_modified', 'bridge_feeds.last_success_ts',
        'bridge_feeds.last_error', 'bridge_feeds.last_error_ts', 'bridge_feeds.failures', 'bridge_feeds.next_poll_ts',
      ])
      .where('bridge_room_feeds.room_id', '=', roomId)
      .orderBy('bridge_room_feeds.created_ts')
      .execute();
    return rows.map((row) => ({
      room_id: row.room_id, url: row.url, label: row.label, added_by: row.added_by, created_ts: row.created_ts,
      failure_notified: row.failure_notified,
      feed: {
        url: row.url, title: row.title, etag: row.etag, last_modified: row.last_modified, last_success_ts: row.last_success_ts,
        last_error: row.last_error, last_error_ts: row.last_error_ts, failures: row.failures, next_poll_ts: row.next_poll_ts,
      },
    }));
  }

  async followersOf(url: string): Promise<RoomFeedRow[]> {
    return this.db.selectFrom('bridge_room_feeds').selectAll().where('url', '=', url).execute();
  }

  async deleteRoomFeed(roomId: string, url: string): Promise<boolean> {
    const result = await this.db.deleteFrom('bridge_room_feeds').where('room_id', '=', roomId).where('url', '=', url).executeTakeFirst();
    return Number(result.numDeletedRows) > 0;
  }

  async deleteRoomFeedsOfRoom(roomId: string): Promise<number> {
    const result = await this.db.deleteFrom('bridge_room_feeds').where('room_id', '=', roomId).executeTakeFirst();
    return Number(result.numDeletedRows);
  }

  async setFailureNotified(url: string, roomIds: string[], notified: boolean): Promise<void> {
    if (roomIds.length === 0) return;
    await this.db
      .updateTable('bridge_room_feeds')
      .set({ failure_notified: notified ? 1 : 0 })
      .where('url', '=', url)
      .where('room_id', 'in', roomIds)
      .execute();
  }

  // ---- seen items ----

  /** Which of `itemIds` were seen before. */
  async seenAmong(url: string, itemIds: string[]): Promise<Set<string>> {
    const seen = new Set<string>();
    for (let start = 0; start < itemIds.length; start += IDS_PER_QUERY) {
      const slice = itemIds.slice(start, start + IDS_PER_QUERY);
      const rows = await this.db
        .selectFrom('bridge_feed_seen')
        .select('item_id')
        .where('url', '=', url)
        .where('item_id', 'in', slice)
        .execute();
      for (const row of rows) seen.add(row.item_id);
    }
    return seen;
  }

  /**
   * Marks items seen at `now`, then forgets all but the `keep` most recently seen. Items still in
   * the feed were just stamped, so they are never the ones forgotten as long as `keep` is at least
   * their number. Does nothing for a feed no room follows any more (it was just removed).
   */
  async markSeen(url: string, itemIds: string[], now: number, keep: number): Promise<void> {
    if (!(await this.feed(url))) return;
    for (let start = 0; start < itemIds.length; start += IDS_PER_QUERY) {
      const values = itemIds.slice(start, start + IDS_PER_QUERY).map((item_id) => ({ url, item_id, seen_ts: now }));
      await this.db
        .insertInto('bridge_feed_seen')
        .values(values)
        .onConflict((oc) => oc.columns(['url', 'item_id']).doUpdateSet({ seen_ts: now }))
        .execute();
    }
    await this.db
      .deleteFrom('bridge_feed_seen')
      .where('url', '=', url)
      .where('item_id', 'not in', (eb) =>
        eb.selectFrom('bridge_feed_seen').select('item_id').where('url', '=', url).orderBy('seen_ts', 'desc').orderBy('item_id').limit(keep),
      )
      .execute();
  }
}
