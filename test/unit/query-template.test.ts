import { describe, expect, it } from 'vitest';
import { Kysely } from 'kysely';
import { openDatabase, migrateToLatest } from '../../src/storage/index.js';
import { QueryTemplate } from '../../src/storage/database.js';
import type { Database } from '../../src/storage/schema.js';

describe('QueryTemplate', () => {
  it('compiles once and runs with each call\'s own parameters, constants kept', async () => {
    const db = openDatabase({ path: ':memory:', synchronous: 'full' });
    await migrateToLatest(db);
    await db.insertInto('filters').values([
      { user_id: '@a:x', filter_id: 1, definition: 'one' },
      { user_id: '@a:x', filter_id: 2, definition: 'two' },
      { user_id: '@b:x', filter_id: 1, definition: 'three' },
    ]).execute();
    let builds = 0;
    const query = new QueryTemplate((kysely: Kysely<Database>, userId: string, above: number) => {
      builds++;
      return kysely.selectFrom('filters').select('definition').where('user_id', '=', userId).where('filter_id', '>', above).where('definition', '!=', 'never').orderBy('filter_id');
    });
    expect(await query.all(db, '@a:x', 0)).toEqual([{ definition: 'one' }, { definition: 'two' }]);
    expect(await query.all(db, '@a:x', 1)).toEqual([{ definition: 'two' }]);
    expect(await query.first(db, '@b:x', 0)).toEqual({ definition: 'three' });
    expect(await query.first(db, '@c:x', 0)).toBeUndefined();
    expect(builds).toBe(1);
    await db.destroy();
  });

  it('refuses a builder that does not pass an argument through as a parameter', async () => {
    const db = openDatabase({ path: ':memory:', synchronous: 'full' });
    const query = new QueryTemplate((kysely: Kysely<Database>, userId: string) => kysely.selectFrom('filters').selectAll().where('user_id', '=', userId.toUpperCase()));
    await expect(query.all(db, 'x')).rejects.toThrow('argument 0 is not a parameter');
    await db.destroy();
  });
});
