/** The newest stream position in a table that carries one, optionally of one room or user. */
import type { Kysely } from 'kysely';
import type { Database } from './schema.js';

type PositionedTable = 'events' | 'account_data' | 'receipts' | 'presence' | 'device_list_changes';

/** 0 when there is no row. */
export async function newestPosition(
  db: Kysely<Database>,
  table: PositionedTable,
  of?: { column: 'room_id' | 'user_id'; value: string },
): Promise<number> {
  let query = db.selectFrom(table).select((eb) => eb.fn.max('stream_ordering').as('max'));
  if (of) query = query.where(of.column, '=', of.value);
  const row = await query.executeTakeFirst();
  return Number(row?.max ?? 0);
}
