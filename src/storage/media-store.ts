/** Media metadata: what was uploaded, by whom, as what type. The bytes live in a `BlobStore`. */
import type { Kysely, Selectable } from 'kysely';
import type { Database, MediaTable, RemoteMediaTable } from './schema.js';

export type MediaRow = Selectable<MediaTable>;
export type RemoteMediaRow = Selectable<RemoteMediaTable>;

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
}
