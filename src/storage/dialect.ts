/**
 * The few places where SQLite and PostgreSQL want different SQL, as functions of the database a
 * store (or a migration) is bound to. Everything else is Kysely, which speaks both.
 */
import { PostgresAdapter, sql, type Kysely, type RawBuilder } from 'kysely';

export function isPostgres(db: Kysely<any>): boolean {
  return db.getExecutor().adapter instanceof PostgresAdapter;
}

/**
 * A string inside a JSON text column, by its path of keys (which may hold dots): SQLite's
 * `json_extract`, PostgreSQL's `#>>`. Missing keys give NULL in both.
 */
export function jsonText(db: Kysely<any>, column: string, path: readonly string[]): RawBuilder<string | null> {
  if (isPostgres(db)) return sql<string | null>`(${sql.ref(column)}::json #>> ${sql.lit(`{${path.map((key) => `"${key.replace(/["\\]/g, (c) => `\\${c}`)}"`).join(',')}}`)})`;
  return sql<string | null>`json_extract(${sql.ref(column)}, ${sql.lit(`$${path.map((key) => `."${key}"`).join('')}`)})`;
}
