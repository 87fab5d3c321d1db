/** Users: the accounts table. */
import { sql, type Kysely, type Selectable, type Updateable } from 'kysely';
import type { Database, UsersTable } from './schema.js';
import { isPostgres } from './dialect.js';

export type UserRow = Selectable<UsersTable>;
export type UserPatch = Updateable<Omit<UsersTable, 'user_id' | 'localpart' | 'created_ts'>>;

export interface UserListQuery {
  from: number;
  limit: number;
  /** Substring of the user id or display name. */
  name?: string | undefined;
  /** Substring of the user id only. */
  userId?: string | undefined;
  includeDeactivated: boolean;
  /** false leaves guest accounts out (Synapse's `guests=false`); default: included. */
  includeGuests?: boolean | undefined;
  /** true: admins only; false: non-admins only; undefined: both. */
  admins?: boolean | undefined;
  /** Only accounts of this type (`bot`); undefined: every type. */
  userType?: string | undefined;
  orderBy: 'name' | 'admin' | 'deactivated' | 'user_type' | 'displayname' | 'creation_ts';
  direction: 'asc' | 'desc';
}

const ORDER_COLUMNS = {
  name: 'user_id',
  admin: 'admin',
  deactivated: 'deactivated',
  user_type: 'user_type',
  displayname: 'displayname',
  creation_ts: 'created_ts',
} as const;

export class UserStore {
  constructor(private readonly db: Kysely<Database>) {}

  /** Marks the user erased (deactivated with `erase: true`); idempotent. */
  async markErased(userId: string): Promise<void> {
    await this.db.insertInto('erased_users').values({ user_id: userId }).onConflict((oc) => oc.column('user_id').doNothing()).execute();
  }

  /** Every erased user (local accounts only, so as many as were ever erased here). */
  async erasedUsers(): Promise<string[]> {
    return (await this.db.selectFrom('erased_users').select('user_id').execute()).map((row) => row.user_id);
  }

  async insert(user: UserRow): Promise<void> {
    await this.db.insertInto('users').values(user).execute();
  }

  async get(userId: string): Promise<UserRow | undefined> {
    return this.db.selectFrom('users').selectAll().where('user_id', '=', userId).executeTakeFirst();
  }

  async update(userId: string, patch: UserPatch): Promise<void> {
    if (Object.keys(patch).length === 0) return;
    await this.db.updateTable('users').set(patch).where('user_id', '=', userId).execute();
  }

  /**
   * The highest all-digit localpart (guest accounts, upgraded or not: nobody else may take one),
   * or 0 when there is none. Guests are numbered on from it, as in Synapse.
   */
  async highestNumericLocalpart(): Promise<number> {
    const numeric = isPostgres(this.db) ? sql<boolean>`localpart ~ '^[0-9]+$'` : sql<boolean>`localpart <> '' and localpart not glob '*[^0-9]*'`;
    const row = await this.db
      .selectFrom('users')
      .select('localpart')
      .where(numeric)
      .orderBy(sql`length(localpart)`, 'desc')
      .orderBy('localpart', 'desc')
      .limit(1)
      .executeTakeFirst();
    return row ? Number(row.localpart) : 0;
  }

  /** A password login (a bot's secret) succeeded. */
  async recordLogin(userId: string, ts: number): Promise<void> {
    await this.db
      .insertInto('user_activity')
      .values({ user_id: userId, last_login_ts: ts, last_seen_ts: ts })
      .onConflict((oc) => oc.column('user_id').doUpdateSet({ last_login_ts: ts, last_seen_ts: ts }))
      .execute();
  }

  /** The account used one of its tokens. */
  async recordSeen(userId: string, ts: number): Promise<void> {
    await this.db
      .insertInto('user_activity')
      .values({ user_id: userId, last_login_ts: null, last_seen_ts: ts })
      .onConflict((oc) => oc.column('user_id').doUpdateSet({ last_seen_ts: ts }))
      .execute();
  }

  async list(query: UserListQuery): Promise<{ users: UserRow[]; total: number }> {
    let filtered = this.db.selectFrom('users');
    if (!query.includeDeactivated) filtered = filtered.where('deactivated', '=', 0);
    if (query.includeGuests === false) filtered = filtered.where('is_guest', '=', 0);
    if (query.admins !== undefined) filtered = filtered.where('admin', '=', query.admins ? 1 : 0);
    if (query.userType !== undefined) filtered = filtered.where('user_type', '=', query.userType);
    if (query.userId) filtered = filtered.where(contains(this.db, 'user_id', query.userId));
    if (query.name) {
      const name = query.name;
      filtered = filtered.where((eb) => eb.or([contains(this.db, 'user_id', name), contains(this.db, 'displayname', name)]));
    }
    const totalRow = await filtered.select((eb) => eb.fn.countAll<number>().as('total')).executeTakeFirstOrThrow();
    const users = await filtered
      .selectAll()
      .orderBy(ORDER_COLUMNS[query.orderBy], query.direction)
      .orderBy('user_id', query.direction)
      .limit(query.limit)
      .offset(query.from)
      .execute();
    return { users, total: Number(totalRow.total) };
  }
}

/**
 * A substring match in which `%` and `_` in the search text match literally, ignoring case: SQLite's
 * LIKE ignores the case of ASCII letters only (as Synapse's search on SQLite does), PostgreSQL's
 * ILIKE that of every letter (as Synapse's on PostgreSQL).
 */
function contains(db: Kysely<Database>, column: 'user_id' | 'displayname', text: string) {
  const pattern = `%${text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
  return isPostgres(db) ? sql<boolean>`${sql.ref(column)} ilike ${pattern} escape '\\'` : sql<boolean>`${sql.ref(column)} like ${pattern} escape '\\'`;
}
