/** To-device messages waiting for their device, and the senders' transaction ids. */
import type { Kysely, Selectable } from 'kysely';
import type { Database, DeviceInboxTable } from './schema.js';

export type DeviceInboxRow = Selectable<DeviceInboxTable>;

export interface NewToDeviceMessage {
  user_id: string;
  device_id: string;
  sender: string;
  type: string;
  content: string;
}

export class DeviceInboxStore {
  constructor(private readonly db: Kysely<Database>) {}

  /** Records a sender's transaction; false when it was recorded before (a retry). */
  async claimTxn(userId: string, deviceId: string, txnId: string, now: number): Promise<boolean> {
    const result = await this.db.insertInto('to_device_txns').values({ user_id: userId, device_id: deviceId, txn_id: txnId, created_ts: now }).onConflict((c) => c.doNothing()).executeTakeFirst();
    return Number(result.numInsertedOrUpdatedRows ?? 0) > 0;
  }

  /**
   * Messages are deleted once acknowledged, so the stream position the last of them took is kept
   * apart: after a restart the stream must go on past every token handed out.
   */
  async recordPosition(position: number): Promise<void> {
    await this.db
      .insertInto('server_meta')
      .values({ key: 'to_device_stream', value: String(position) })
      .onConflict((c) => c.column('key').doUpdateSet({ value: String(position) }))
      .execute();
  }

  async lastPosition(): Promise<number> {
    const row = await this.db.selectFrom('server_meta').select('value').where('key', '=', 'to_device_stream').executeTakeFirst();
    return row ? Number(row.value) : 0;
  }

  async insert(messages: readonly NewToDeviceMessage[], position: number, now: number): Promise<void> {
    await this.recordPosition(position);
    for (let i = 0; i < messages.length; i += 200) {
      await this.db.insertInto('device_inbox').values(messages.slice(i, i + 200).map((m) => ({ ...m, stream_ordering: position, delivered_stream: null, created_ts: now }))).execute();
    }
  }

  async countFor(userId: string, deviceId: string): Promise<number> {
    const row = await this.db.selectFrom('device_inbox').select((eb) => eb.fn.countAll<number>().as('n')).where('user_id', '=', userId).where('device_id', '=', deviceId).executeTakeFirst();
    return Number(row?.n ?? 0);
  }

  /** How many messages each sender has waiting for this device (delivered or not, until acknowledged). */
  async countsBySender(userId: string, deviceId: string): Promise<Map<string, number>> {
    const rows = await this.db
      .selectFrom('device_inbox')
      .select(['sender', (eb) => eb.fn.countAll<number>().as('n')])
      .where('user_id', '=', userId)
      .where('device_id', '=', deviceId)
      .groupBy('sender')
      .execute();
    return new Map(rows.map((row) => [row.sender, Number(row.n)]));
  }

  /** Deletes the `count` oldest messages `sender` has waiting for this device. */
  async dropOldest(userId: string, deviceId: string, sender: string, count: number): Promise<void> {
    const oldest = this.db.selectFrom('device_inbox').select('id').where('user_id', '=', userId).where('device_id', '=', deviceId).where('sender', '=', sender).orderBy('id').limit(count);
    await this.db.deleteFrom('device_inbox').where('id', 'in', oldest).execute();
  }

  /** Deletes what a sync at `stream` or earlier delivered: the client has its answer. */
  async acknowledge(userId: string, deviceId: string, stream: number): Promise<void> {
    await this.db.deleteFrom('device_inbox').where('user_id', '=', userId).where('device_id', '=', deviceId).where('delivered_stream', '<=', stream).execute();
  }

  /** Messages not delivered yet, or delivered by an answer later than `since` (not acknowledged), oldest first. */
  async pending(userId: string, deviceId: string, since: number | undefined, limit: number): Promise<DeviceInboxRow[]> {
    let query = this.db.selectFrom('device_inbox').selectAll().where('user_id', '=', userId).where('device_id', '=', deviceId);
    if (since !== undefined) query = query.where((eb) => eb.or([eb('delivered_stream', 'is', null), eb('delivered_stream', '>', since)]));
    return query.orderBy('id').limit(limit).execute();
  }

  async markDelivered(ids: readonly number[], stream: number): Promise<void> {
    for (let i = 0; i < ids.length; i += 500) await this.db.updateTable('device_inbox').set({ delivered_stream: stream }).where('id', 'in', ids.slice(i, i + 500)).execute();
  }

  /** Whether anything waits that a sync after `since` would deliver. */
  async hasPending(userId: string, deviceId: string, since: number | undefined): Promise<boolean> {
    return (await this.pending(userId, deviceId, since, 1)).length > 0;
  }

  async deleteForDevice(userId: string, deviceId: string): Promise<void> {
    await this.db.deleteFrom('device_inbox').where('user_id', '=', userId).where('device_id', '=', deviceId).execute();
  }

  async pruneTxns(before: number): Promise<void> {
    await this.db.deleteFrom('to_device_txns').where('created_ts', '<', before).execute();
  }
}
