/** Media metadata: what was uploaded, by whom, as what type. The bytes live in a `BlobStore`. */
import type { Kysely, Selectable } from 'kysely';
import type { Database, MediaTable } from './schema.js';

export type MediaRow = Selectable<MediaTable>;

export class MediaStore {
  constructor(private readonly db: Kysely<Database>) {}

  async insert(row: MediaRow): Promise<void> {
    await this.db.insertInto('media').values(row).execute();
  }

  async get(mediaId: string): Promise<MediaRow | undefined> {
    return this.db.selectFrom('media').selectAll().where('media_id', '=', mediaId).executeTakeFirst();
  }
}
