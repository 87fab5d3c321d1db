/** Per-user data that sync returns besides room events: account data, read receipts and filters. */
import type { Kysely, Selectable } from 'kysely';
import type { AccountDataTable, Database, PresenceTable, PushersTable, ReceiptsTable } from './schema.js';
import { newestPosition } from './stream-positions.js';

export type AccountDataRow = Selectable<AccountDataTable>;
export type ReceiptRow = Selectable<ReceiptsTable>;
export type PresenceRow = Selectable<PresenceTable>;

/** A pusher with its delivery state; `content` is the pusher as the client set it (JSON text). */
export interface PusherRow {
  userId: string;
  appId: string;
  pushkey: string;
  kind: string | undefined;
  content: string;
  createdTs: number;
  deviceId: string | null;
  lastStreamOrdering: number;
  failingSince: number | null;
}

function pusherRow(row: Selectable<PushersTable>): PusherRow {
  let kind: string | undefined;
  try {
    const parsed = JSON.parse(row.content) as { kind?: unknown };
    kind = typeof parsed.kind === 'string' ? parsed.kind : undefined;
  } catch {
    kind = undefined;
  }
  return {
    userId: row.user_id,
    appId: row.app_id,
    pushkey: row.pushkey,
    kind,
    content: row.content,
    createdTs: Number(row.created_ts),
    deviceId: row.device_id,
    lastStreamOrdering: Number(row.last_stream_ordering ?? 0),
    failingSince: row.failing_since === null ? null : Number(row.failing_since),
  };
}

/** The room id under which global (not per-room) account data is stored. */
export const GLOBAL_ACCOUNT_DATA = '';

export class UserDataStore {
  constructor(private readonly db: Kysely<Database>) {}

  // ---- push rules and pushers ----

  async getPushRuleChanges(userId: string): Promise<string | undefined> {
    return (await this.db.selectFrom('push_rule_changes').select('content').where('user_id', '=', userId).executeTakeFirst())?.content;
  }

  async setPushRuleChanges(userId: string, content: string): Promise<void> {
    await this.db.insertInto('push_rule_changes').values({ user_id: userId, content }).onConflict((c) => c.column('user_id').doUpdateSet({ content })).execute();
  }

  async pushersOf(userId: string): Promise<string[]> {
    return (await this.db.selectFrom('pushers').select('content').where('user_id', '=', userId).orderBy('created_ts').execute()).map((row) => row.content);
  }

  async countPushers(userId: string): Promise<number> {
    const row = await this.db.selectFrom('pushers').select((eb) => eb.fn.countAll<number>().as('n')).where('user_id', '=', userId).executeTakeFirst();
    return Number(row?.n ?? 0);
  }

  /**
   * Adds or replaces the user's pusher for (app_id, pushkey); `exclusive` removes other users'
   * pushers of that pair. A new pusher starts at `position` (what happened before it is not
   * pushed); a replaced one keeps its position and starts afresh after a failure.
   */
  async setPusher(userId: string, appId: string, pushkey: string, content: string, now: number, exclusive: boolean, deviceId: string | null, position: number): Promise<void> {
    if (exclusive) await this.db.deleteFrom('pushers').where('app_id', '=', appId).where('pushkey', '=', pushkey).where('user_id', '!=', userId).execute();
    await this.db
      .insertInto('pushers')
      .values({ user_id: userId, app_id: appId, pushkey, content, created_ts: now, device_id: deviceId, last_stream_ordering: position, failing_since: null })
      .onConflict((c) => c.columns(['app_id', 'pushkey', 'user_id']).doUpdateSet({ content, device_id: deviceId, failing_since: null }))
      .execute();
  }

  async deletePusher(userId: string, appId: string, pushkey: string): Promise<void> {
    await this.db.deleteFrom('pushers').where('user_id', '=', userId).where('app_id', '=', appId).where('pushkey', '=', pushkey).execute();
  }

  /** Pushers set by a device that no longer exists (logged out, deleted); what was removed. */
  async deletePushersOfRemovedDevices(userId: string): Promise<number> {
    const result = await this.db
      .deleteFrom('pushers')
      .where('user_id', '=', userId)
      .where('device_id', 'is not', null)
      .where((eb) => eb.not(eb.exists(eb.selectFrom('devices').select('devices.device_id').where('devices.user_id', '=', userId).whereRef('devices.device_id', '=', 'pushers.device_id'))))
      .executeTakeFirst();
    return Number(result.numDeletedRows);
  }

  /** Every pusher of a kind, with its delivery state (the push sender loads them at start). */
  async pushersOfKind(kind: string): Promise<PusherRow[]> {
    const rows = await this.db.selectFrom('pushers').selectAll().execute();
    return rows.map(pusherRow).filter((row) => row.kind === kind);
  }

  async pusher(userId: string, appId: string, pushkey: string): Promise<PusherRow | undefined> {
    const row = await this.db.selectFrom('pushers').selectAll().where('user_id', '=', userId).where('app_id', '=', appId).where('pushkey', '=', pushkey).executeTakeFirst();
    return row ? pusherRow(row) : undefined;
  }

  /** Records delivery progress: the position pushed up to and the failure state. False: the pusher is gone. */
  async setPusherProgress(userId: string, appId: string, pushkey: string, position: number, failingSince: number | null): Promise<boolean> {
    const result = await this.db
      .updateTable('pushers')
      .set({ last_stream_ordering: position, failing_since: failingSince })
      .where('user_id', '=', userId)
      .where('app_id', '=', appId)
      .where('pushkey', '=', pushkey)
      .executeTakeFirst();
    return Number(result.numUpdatedRows) > 0;
  }

  // ---- presence ----

  async getPresence(userId: string): Promise<PresenceRow | undefined> {
    return this.db.selectFrom('presence').selectAll().where('user_id', '=', userId).executeTakeFirst();
  }

  async setPresence(row: PresenceRow): Promise<void> {
    await this.db
      .insertInto('presence')
      .values(row)
      .onConflict((c) => c.column('user_id').doUpdateSet({ presence: row.presence, status_msg: row.status_msg, last_active_ts: row.last_active_ts, stream_ordering: row.stream_ordering }))
      .execute();
  }

  /** Presence that changed in (after, upTo], at most `limit` rows, oldest change first. */
  async presenceChanged(after: number, upTo: number, limit: number): Promise<PresenceRow[]> {
    return this.db.selectFrom('presence').selectAll().where('stream_ordering', '>', after).where('stream_ordering', '<=', upTo).orderBy('stream_ordering').limit(limit).execute();
  }

  async latestPresenceChange(): Promise<number> {
    return newestPosition(this.db, 'presence');
  }

  async presenceOf(userIds: readonly string[]): Promise<PresenceRow[]> {
    const rows: PresenceRow[] = [];
    for (let i = 0; i < userIds.length; i += 500) rows.push(...(await this.db.selectFrom('presence').selectAll().where('user_id', 'in', userIds.slice(i, i + 500)).execute()));
    return rows;
  }


  async setAccountData(row: AccountDataRow): Promise<void> {
    await this.db
      .insertInto('account_data')
      .values(row)
      .onConflict((oc) =>
        oc.columns(['user_id', 'room_id', 'type']).doUpdateSet({ content: row.content, stream_ordering: row.stream_ordering }),
      )
      .execute();
  }

  async getAccountData(userId: string, roomId: string, type: string): Promise<string | undefined> {
    const row = await this.db
      .selectFrom('account_data')
      .select('content')
      .where('user_id', '=', userId)
      .where('room_id', '=', roomId)
      .where('type', '=', type)
      .executeTakeFirst();
    return row?.content;
  }

  /** Account data of a user changed in `(after, upTo]` (all of it with after = -1). */
  async accountDataChanged(userId: string, after: number, upTo: number): Promise<AccountDataRow[]> {
    return this.db
      .selectFrom('account_data')
      .selectAll()
      .where('user_id', '=', userId)
      .where('stream_ordering', '>', after)
      .where('stream_ordering', '<=', upTo)
      .orderBy('stream_ordering', 'asc')
      .execute();
  }

  /**
   * Stores a receipt unless the user's receipt of that type already marks a later event
   * (`eventStream` is the stream position of `row.event_id`). The check is part of the upsert, so
   * two receipts racing each other cannot move it backwards. Says whether it was stored.
   */
  async setReceiptIfNewer(row: ReceiptRow, eventStream: number): Promise<boolean> {
    const result = await this.db
      .insertInto('receipts')
      .values(row)
      .onConflict((oc) =>
        oc
          .columns(['room_id', 'user_id', 'receipt_type', 'thread_id'])
          .doUpdateSet({ event_id: row.event_id, ts: row.ts, stream_ordering: row.stream_ordering })
          .where(({ not, exists, selectFrom }) =>
            not(
              exists(
                selectFrom('events')
                  .select('events.stream_ordering')
                  .whereRef('events.event_id', '=', 'receipts.event_id')
                  .where('events.stream_ordering', '>', eventStream),
              ),
            ),
          ),
      )
      .executeTakeFirst();
    return Number(result.numInsertedOrUpdatedRows ?? 0n) > 0;
  }

  async receiptsChanged(roomId: string, after: number, upTo: number): Promise<ReceiptRow[]> {
    return this.db
      .selectFrom('receipts')
      .selectAll()
      .where('room_id', '=', roomId)
      .where('stream_ordering', '>', after)
      .where('stream_ordering', '<=', upTo)
      .execute();
  }

  async latestAccountDataOf(userId: string): Promise<number> {
    return newestPosition(this.db, 'account_data', { column: 'user_id', value: userId });
  }

  async latestReceiptOfRoom(roomId: string): Promise<number> {
    return newestPosition(this.db, 'receipts', { column: 'room_id', value: roomId });
  }

  async maxStreamOrdering(): Promise<number> {
    return Math.max(await newestPosition(this.db, 'account_data'), await newestPosition(this.db, 'receipts'), await newestPosition(this.db, 'presence'));
  }

  /** Stores a filter under the user's next filter id and returns it. */
  async insertFilter(userId: string, definition: string): Promise<number> {
    const row = await this.db
      .selectFrom('filters')
      .select((eb) => eb.fn.max('filter_id').as('max'))
      .where('user_id', '=', userId)
      .executeTakeFirst();
    const filterId = Number(row?.max ?? -1) + 1;
    await this.db.insertInto('filters').values({ user_id: userId, filter_id: filterId, definition }).execute();
    return filterId;
  }

  async getFilter(userId: string, filterId: number): Promise<string | undefined> {
    const row = await this.db
      .selectFrom('filters')
      .select('definition')
      .where('user_id', '=', userId)
      .where('filter_id', '=', filterId)
      .executeTakeFirst();
    return row?.definition;
  }
}
