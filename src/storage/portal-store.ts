/**
 * The bot portal's tables: owners of bots, operators' grants of the right to create bots, the
 * audit log, the portal's sign-in sessions and the secret its cookies are signed with.
 */
import { sql, type Insertable, type Kysely, type Selectable } from 'kysely';
import { ADVISORY_LOCK_CLASS } from './cluster-store.js';
import { isPostgres } from './dialect.js';
import type { BotAuditLogTable, BotCreatorGrantsTable, BotOwnersTable, Database, PortalIdentitiesTable, PortalSessionsTable } from './schema.js';

export type BotOwnerRow = Selectable<BotOwnersTable>;
export type CreatorGrantRow = Selectable<BotCreatorGrantsTable>;
export type AuditRow = Selectable<BotAuditLogTable>;
export type NewAuditRow = Insertable<BotAuditLogTable>;
export type PortalSessionRow = Selectable<PortalSessionsTable>;
export type PortalIdentityRow = Selectable<PortalIdentitiesTable>;

/** A bot with its owner, as an owner's list shows it. */
export interface OwnedBotRow {
  user_id: string;
  owner_id: string;
  description: string;
  displayname: string | null;
  deactivated: number;
  created_ts: number;
  last_login_ts: number | null;
  last_seen_ts: number | null;
}

export class PortalStore {
  constructor(private readonly db: Kysely<Database>) {}

  async insertOwner(row: BotOwnerRow): Promise<void> {
    await this.db.insertInto('bot_owners').values(row).execute();
  }

  /** Gives a bot an owner, or another one (a bot made before the portal gets its first). */
  async setOwner(row: BotOwnerRow): Promise<void> {
    await this.db
      .insertInto('bot_owners')
      .values(row)
      .onConflict((oc) => oc.column('user_id').doUpdateSet({ owner_id: row.owner_id }))
      .execute();
  }

  async ownerOf(userId: string): Promise<BotOwnerRow | undefined> {
    return this.db.selectFrom('bot_owners').selectAll().where('user_id', '=', userId).executeTakeFirst();
  }

  /** The owners of these bots (those that have one). */
  async ownersOf(userIds: readonly string[]): Promise<Map<string, string>> {
    if (userIds.length === 0) return new Map();
    const rows = await this.db.selectFrom('bot_owners').select(['user_id', 'owner_id']).where('user_id', 'in', userIds).execute();
    return new Map(rows.map((row) => [row.user_id, row.owner_id]));
  }

  /** An owner's bots, newest first, with when each last logged in and was last active. */
  async botsOf(ownerId: string, options: { includeDeactivated: boolean; limit: number }): Promise<OwnedBotRow[]> {
    let query = this.db
      .selectFrom('bot_owners')
      .innerJoin('users', 'users.user_id', 'bot_owners.user_id')
      .leftJoin('user_activity', 'user_activity.user_id', 'bot_owners.user_id')
      .select([
        'bot_owners.user_id',
        'bot_owners.owner_id',
        'bot_owners.description',
        'users.displayname',
        'users.deactivated',
        'users.created_ts',
        'user_activity.last_login_ts',
        'user_activity.last_seen_ts',
      ])
      .where('bot_owners.owner_id', '=', ownerId);
    if (!options.includeDeactivated) query = query.where('users.deactivated', '=', 0);
    return query.orderBy('users.deactivated').orderBy('users.created_ts', 'desc').orderBy('bot_owners.user_id').limit(options.limit).execute();
  }

  /**
   * Inside a transaction: waits until no other transaction holds this owner, and holds them until
   * this one ends, so that counting their bots and adding one is a single step. PostgreSQL: a
   * transaction-scoped advisory lock. SQLite needs none: a process has one connection, whose
   * transactions run one at a time, and another process's write in between makes this
   * transaction's write fail (SQLITE_BUSY_SNAPSHOT) rather than succeed on a stale count.
   */
  async lockOwner(ownerId: string): Promise<void> {
    if (!isPostgres(this.db)) return;
    await sql`SELECT pg_advisory_xact_lock(${ADVISORY_LOCK_CLASS + 2}, hashtext(current_schema() || ':bot-owner:' || ${ownerId}))`.execute(this.db);
  }

  /** How many bots an owner has that are not deactivated. */
  async countActiveBotsOf(ownerId: string): Promise<number> {
    const row = await this.db
      .selectFrom('bot_owners')
      .innerJoin('users', 'users.user_id', 'bot_owners.user_id')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('bot_owners.owner_id', '=', ownerId)
      .where('users.deactivated', '=', 0)
      .executeTakeFirstOrThrow();
    return Number(row.n);
  }

  async grant(row: CreatorGrantRow): Promise<void> {
    await this.db
      .insertInto('bot_creator_grants')
      .values(row)
      .onConflict((oc) => oc.column('user_id').doUpdateSet({ granted_by: row.granted_by, granted_ts: row.granted_ts, note: row.note }))
      .execute();
  }

  /** True when there was a grant to take back. */
  async revoke(userId: string): Promise<boolean> {
    const result = await this.db.deleteFrom('bot_creator_grants').where('user_id', '=', userId).executeTakeFirst();
    return Number(result.numDeletedRows) > 0;
  }

  async grantOf(userId: string): Promise<CreatorGrantRow | undefined> {
    return this.db.selectFrom('bot_creator_grants').selectAll().where('user_id', '=', userId).executeTakeFirst();
  }

  async listGrants(limit: number): Promise<CreatorGrantRow[]> {
    return this.db.selectFrom('bot_creator_grants').selectAll().orderBy('user_id').limit(limit).execute();
  }

  async appendAudit(row: NewAuditRow): Promise<void> {
    await this.db.insertInto('bot_audit_log').values(row).execute();
  }

  /** Newest first; `before`: only entries older than that id (the next page). */
  async listAudit(query: { limit: number; before?: number | undefined; target?: string | undefined; actor?: string | undefined }): Promise<AuditRow[]> {
    let select = this.db.selectFrom('bot_audit_log').selectAll();
    if (query.before !== undefined) select = select.where('id', '<', query.before);
    if (query.target !== undefined) select = select.where('target', '=', query.target);
    if (query.actor !== undefined) select = select.where('actor', '=', query.actor);
    return select.orderBy('id', 'desc').limit(query.limit).execute();
  }

  async insertSession(row: PortalSessionRow): Promise<void> {
    await this.db.insertInto('portal_sessions').values(row).execute();
  }

  async getSession(idHash: string): Promise<PortalSessionRow | undefined> {
    return this.db.selectFrom('portal_sessions').selectAll().where('id_hash', '=', idHash).executeTakeFirst();
  }

  async touchSession(idHash: string, lastSeenTs: number): Promise<void> {
    await this.db.updateTable('portal_sessions').set({ last_seen_ts: lastSeenTs }).where('id_hash', '=', idHash).execute();
  }

  async deleteSession(idHash: string): Promise<void> {
    await this.db.deleteFrom('portal_sessions').where('id_hash', '=', idHash).execute();
  }

  /** Back-channel logout: the sessions of one provider session, or of one person at the provider. */
  async deleteSessionsAt(idpId: string, by: { sid?: string | undefined; sub?: string | undefined }): Promise<number> {
    let query = this.db.deleteFrom('portal_sessions').where('idp_id', '=', idpId);
    if (by.sid !== undefined) query = query.where('sid', '=', by.sid);
    if (by.sub !== undefined) query = query.where('sub', '=', by.sub);
    if (by.sid === undefined && by.sub === undefined) return 0;
    const result = await query.executeTakeFirst();
    return Number(result.numDeletedRows);
  }

  /** Sessions past their end, and a person's oldest beyond `keep` (a bound on what one person holds). */
  async pruneSessions(now: number, ownerId: string, keep: number): Promise<void> {
    await this.db.deleteFrom('portal_sessions').where('expires_ts', '<=', now).execute();
    const kept = await this.db
      .selectFrom('portal_sessions')
      .select('id_hash')
      .where('owner_id', '=', ownerId)
      .orderBy('created_ts', 'desc')
      .orderBy('id_hash')
      .limit(keep)
      .execute();
    if (kept.length < keep) return;
    await this.db
      .deleteFrom('portal_sessions')
      .where('owner_id', '=', ownerId)
      .where('id_hash', 'not in', kept.map((row) => row.id_hash))
      .execute();
  }

  /**
   * Binds the provider's subject to the person unless either is bound already (the first sign-in
   * wins, also when two race: both keys are unique). True when this call made the binding.
   */
  async bindIdentity(row: PortalIdentityRow): Promise<boolean> {
    const result = await this.db.insertInto('portal_identities').values(row).onConflict((oc) => oc.doNothing()).executeTakeFirst();
    return Number(result.numInsertedOrUpdatedRows ?? 0n) > 0;
  }

  /** The bindings that involve this subject or this person (none, one, or two that disagree). */
  async identitiesOf(idpId: string, subject: string, ownerId: string): Promise<PortalIdentityRow[]> {
    return this.db
      .selectFrom('portal_identities')
      .selectAll()
      .where((eb) => eb.or([eb.and([eb('idp_id', '=', idpId), eb('subject', '=', subject)]), eb('owner_id', '=', ownerId)]))
      .execute();
  }

  async identityOfPerson(ownerId: string): Promise<PortalIdentityRow | undefined> {
    return this.db.selectFrom('portal_identities').selectAll().where('owner_id', '=', ownerId).executeTakeFirst();
  }

  /** Releases a person's binding (an operator's decision); true when there was one. */
  async unbindIdentity(ownerId: string): Promise<boolean> {
    const result = await this.db.deleteFrom('portal_identities').where('owner_id', '=', ownerId).executeTakeFirst();
    return Number(result.numDeletedRows) > 0;
  }

  /** Ends every portal session of a person. */
  async deleteSessionsOf(ownerId: string): Promise<number> {
    const result = await this.db.deleteFrom('portal_sessions').where('owner_id', '=', ownerId).executeTakeFirst();
    return Number(result.numDeletedRows);
  }

  /** Whether this person is known to the portal: signed in, granted the right, or owning a bot. */
  async isKnownPerson(ownerId: string): Promise<boolean> {
    const [identity, grant, owned] = await Promise.all([
      this.db.selectFrom('portal_identities').select('owner_id').where('owner_id', '=', ownerId).executeTakeFirst(),
      this.db.selectFrom('bot_creator_grants').select('user_id').where('user_id', '=', ownerId).executeTakeFirst(),
      this.db.selectFrom('bot_owners').select('owner_id').where('owner_id', '=', ownerId).limit(1).executeTakeFirst(),
    ]);
    return identity !== undefined || grant !== undefined || owned !== undefined;
  }

  /** A sign-in started: its state may come back once, until `expiresTs`. Drops those past their time. */
  async insertSignIn(stateHash: string, idpId: string, now: number, expiresTs: number): Promise<void> {
    await this.db.deleteFrom('portal_sign_ins').where('expires_ts', '<=', now).execute();
    await this.db.insertInto('portal_sign_ins').values({ state_hash: stateHash, idp_id: idpId, expires_ts: expiresTs }).execute();
  }

  /** Takes a started sign-in (once): true when it was there, for this provider, and in time. */
  async takeSignIn(stateHash: string, idpId: string, now: number): Promise<boolean> {
    const result = await this.db
      .deleteFrom('portal_sign_ins')
      .where('state_hash', '=', stateHash)
      .where('idp_id', '=', idpId)
      .where('expires_ts', '>', now)
      .executeTakeFirst();
    return Number(result.numDeletedRows) > 0;
  }

  /** The named secret, made by `make` the first time (the first process to ask wins). */
  async secret(name: string, make: () => string): Promise<string> {
    await this.db.insertInto('portal_secrets').values({ name, value: make() }).onConflict((oc) => oc.column('name').doNothing()).execute();
    const row = await this.db.selectFrom('portal_secrets').select('value').where('name', '=', name).executeTakeFirstOrThrow();
    return row.value;
  }
}
