/** Media metadata: what was uploaded, by whom, as what type. The bytes live in a `BlobStore`. */
import type { Kysely, Selectable } from 'kysely';
import type { Database, MediaTable, RemoteMediaTable } from './schema.js';

export type MediaRow = Selectable<MediaTable>;
export type RemoteMediaRow = Selectable<RemoteMediaTable>;
/** What deleting a cached remote media needs: its row's key and the blob it names. */
export type RemoteMediaKey = Pick<RemoteMediaRow, 'server_name' | 'media_id' | 'blob_id' | 'size_bytes'>;

export class MediaStore {
  constructor(private readonly db: Kysely<Database>) {}

  async insert(row: MediaRow): Promise<void> {
    await this.db.insertInto('media').values(row).execute();
  }

  async get(mediaId: string): Promise<MediaRow | undefined> {
    return this.db.selectFrom('media').selectAll().where('media_id', '=', mediaId).executeTakeFirst();
  }

  async remote(serverName: string, mediaId: string): Promise<RemoteMediaRow | undefined> {
    return this.db.selectFrom('remote_media').selectAll().where('server_name', '=', serverName).where('media_id', '=', mediaId).executeTakeFirst();
  }

  /** Keeps a fetched remote media's row; a concurrent fetch that stored it first wins. */
  async insertRemote(row: RemoteMediaRow): Promise<boolean> {
    const result = await this.db.insertInto('remote_media').values(row).onConflict((oc) => oc.columns(['server_name', 'media_id']).doNothing()).executeTakeFirst();
    return Number(result.numInsertedOrUpdatedRows ?? 0) > 0;
  }

  async touchRemote(serverName: string, mediaId: string, now: number): Promise<void> {
    await this.db.updateTable('remote_media').set({ last_access_ts: now }).where('server_name', '=', serverName).where('media_id', '=', mediaId).execute();
  }

  /** Cached remote media last downloaded before `beforeTs`, oldest first. */
  async remoteAccessedBefore(beforeTs: number, limit: number): Promise<RemoteMediaKey[]> {
    return this.db
      .selectFrom('remote_media')
      .select(['server_name', 'media_id', 'blob_id', 'size_bytes'])
      .where('last_access_ts', '<', beforeTs)
      .orderBy('last_access_ts')
      .limit(limit)
      .execute();
  }

  /** Cached remote media, least recently downloaded first. */
  async remoteLeastRecentlyAccessed(limit: number): Promise<RemoteMediaKey[]> {
    return this.db.selectFrom('remote_media').select(['server_name', 'media_id', 'blob_id', 'size_bytes']).orderBy('last_access_ts').orderBy('fetched_ts').limit(limit).execute();
  }

  async remoteCacheSize(): Promise<number> {
    const row = await this.db.selectFrom('remote_media').select((eb) => eb.fn.sum<number | string | null>('size_bytes').as('total')).executeTakeFirst();
    return Number(row?.total ?? 0);
  }

  /** Deletes the row if it still names this blob (a fetch since may have replaced it); true if it did. */
  async deleteRemote(key: Pick<RemoteMediaRow, 'server_name' | 'media_id' | 'blob_id'>): Promise<boolean> {
    const result = await this.db
      .deleteFrom('remote_media')
      .where('server_name', '=', key.server_name)
      .where('media_id', '=', key.media_id)
      .where('blob_id', '=', key.blob_id)
      .executeTakeFirst();
    return Number(result.numDeletedRows) > 0;
  }
}
