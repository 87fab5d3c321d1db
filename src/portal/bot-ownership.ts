/**
 * Bots and their owners, the right to create bots, and the audit log. The portal, the CLI and the
 * admin API all change bots through here, so every create, rotate, deactivate, move and grant
 * is written to the audit log in the same transaction as the change itself.
 */
import type { Clock } from '../core/clock.js';
import { MatrixError } from '../core/errors.js';
import type { AuditRow, CreatorGrantRow, OwnedBotRow, Storage, Stores } from '../storage/index.js';
import { BOT_USER_TYPE, type AccountService, type AlsoWrite, type BotCredentials } from '../users/account-service.js';
import { generateBotSecret } from '../users/secrets.js';
import { localpartProblem, userIdFor } from '../users/user-ids.js';

/** Who did something: a person's or an admin's user id, or `cli:<system user>` for the CLI. */
export type Actor = string;

/**
 * `end-sessions`: an operator signed a person out of the portal everywhere;
 * `bind`: a person's first sign-in tied them to their account at the provider; `refuse-sign-in`:
 * another account at the provider claimed to be them (or theirs claimed another name) and was
 * turned away; `unbind`: an operator released the tie.
 */
export type AuditAction = 'create' | 'rotate' | 'deactivate' | 'reactivate' | 'move' | 'grant' | 'revoke' | 'bind' | 'unbind' | 'refuse-sign-in' | 'end-sessions';

/** Whether a provider's account may be this person here (see `BotOwnership.bindIdentity`). */
export type IdentityCheck = { ok: true } | { ok: false; boundPerson: string | null };

export interface AuditEntry {
  id: number;
  ts: number;
  actor: string;
  action: string;
  target: string;
  detail: Record<string, unknown> | null;
}

export interface NewBot {
  owner: string;
  localpart: string;
  displayname: string;
  description: string;
}

/** An owner sees this many of their bots at most (deactivated ones included). */
export const MAX_LISTED_BOTS = 500;
/** The longest description kept. */
export const MAX_DESCRIPTION_LENGTH = 500;
export const MAX_DISPLAYNAME_LENGTH = 100;

export class BotOwnership {
  constructor(
    private readonly storage: Storage,
    private readonly accounts: AccountService,
    private readonly clock: Clock,
    /** Takes a deactivated bot out of its rooms (the room service). */
    private readonly leaveRooms: (userId: string) => Promise<void>,
  ) {}

  /**
   * A bot made by its owner in the portal, with a fresh secret. Checks of the name are the caller's.
   * `maxActiveBots`: refused (`tooManyBotsError`) when the owner already has that many; the count
   * and the insert are one step, so creations sent at once cannot pass the limit together.
   */
  async createOwned(bot: NewBot, actor: Actor, limits: { maxActiveBots?: number } = {}): Promise<BotCredentials> {
    const secret = generateBotSecret();
    const userId = this.accounts.userIdFor(bot.localpart);
    const now = this.clock.now();
    await this.accounts.createUser({
      localpart: bot.localpart,
      password: secret,
      userType: BOT_USER_TYPE,
      displayname: bot.displayname,
      also: async (stores) => {
        if (limits.maxActiveBots !== undefined) {
          await stores.portal.lockOwner(bot.owner);
          if ((await stores.portal.countActiveBotsOf(bot.owner)) >= limits.maxActiveBots) throw tooManyBotsError(limits.maxActiveBots);
        }
        await stores.portal.setOwner({ user_id: userId, owner_id: bot.owner, description: bot.description, created_ts: now });
        await this.audit(stores, actor, 'create', userId, { owner: bot.owner });
      },
    });
    return { user_id: userId, password: secret, created: true };
  }

  /**
   * The operator's create-or-rotate (`create-bot`, the admin API), audited; `owner` gives a new
   * bot an owner.
   */
  async createOrRotate(name: string, actor: Actor, owner?: string): Promise<BotCredentials> {
    const now = this.clock.now();
    return this.accounts.createOrRotateBot(name, ({ user_id, created }) => async (stores) => {
      if (created && owner !== undefined) await stores.portal.setOwner({ user_id, owner_id: owner, description: '', created_ts: now });
      await this.audit(stores, actor, created ? 'create' : 'rotate', user_id, created && owner !== undefined ? { owner } : null);
    });
  }

  /** A new secret for a bot; its sessions end. `owner`: refused unless the bot is theirs. */
  async rotate(userId: string, actor: Actor, owner?: string): Promise<BotCredentials> {
    const bot = await this.activeBot(userId, owner);
    const secret = generateBotSecret();
    await this.accounts.updateAccount(bot, { password: secret, logoutDevices: true, also: this.audited(actor, 'rotate', bot) });
    return { user_id: bot, password: secret, created: false };
  }

  /** Deactivates a bot (its secret and sessions stop working) and takes it out of its rooms. */
  async deactivate(userId: string, actor: Actor, options: { owner?: string; erase?: boolean } = {}): Promise<void> {
    const bot = await this.activeBot(userId, options.owner);
    await this.accounts.deactivate(bot, { erase: options.erase === true, also: this.audited(actor, 'deactivate', bot) });
    await this.leaveRooms(bot);
  }

  /** What an account's deactivation by other means (the Synapse admin API) writes to the log. */
  audited(actor: Actor, action: AuditAction, target: string, detail: Record<string, unknown> | null = null): AlsoWrite {
    return (stores) => this.audit(stores, actor, action, target, detail);
  }

  /** Gives a bot to another owner (also a bot made before the portal: its first owner). */
  async move(userId: string, newOwner: string, actor: Actor): Promise<{ from: string | null; to: string }> {
    const user = await this.accounts.getUser(userId);
    if (!user || user.user_type !== BOT_USER_TYPE) throw new MatrixError('M_NOT_FOUND', `${userId} is not a bot on this server`);
    assertPersonId(newOwner);
    return this.storage.transaction(async (stores) => {
      const previous = await stores.portal.ownerOf(userId);
      await stores.portal.setOwner({ user_id: userId, owner_id: newOwner, description: previous?.description ?? '', created_ts: previous?.created_ts ?? user.created_ts });
      await this.audit(stores, actor, 'move', userId, { from: previous?.owner_id ?? null, to: newOwner });
      return { from: previous?.owner_id ?? null, to: newOwner };
    });
  }

  async ownerOf(userId: string): Promise<string | undefined> {
    return (await this.storage.portal.ownerOf(userId))?.owner_id;
  }

  ownersOf(userIds: readonly string[]): Promise<Map<string, string>> {
    return this.storage.portal.ownersOf(userIds);
  }

  botsOf(owner: string, includeDeactivated = true): Promise<OwnedBotRow[]> {
    return this.storage.portal.botsOf(owner, { includeDeactivated, limit: MAX_LISTED_BOTS });
  }

  countActiveBotsOf(owner: string): Promise<number> {
    return this.storage.portal.countActiveBotsOf(owner);
  }

  /** One of the owner's bots, deactivated or not; undefined when it is not theirs. */
  async ownedBot(owner: string, userId: string): Promise<OwnedBotRow | undefined> {
    const bots = await this.storage.portal.botsOf(owner, { includeDeactivated: true, limit: MAX_LISTED_BOTS });
    return bots.find((bot) => bot.user_id === userId);
  }

  async grant(person: string, actor: Actor, note: string | null = null): Promise<CreatorGrantRow> {
    assertPersonId(person);
    const row: CreatorGrantRow = { user_id: person, granted_by: actor, granted_ts: this.clock.now(), note };
    await this.storage.transaction(async (stores) => {
      await stores.portal.grant(row);
      await this.audit(stores, actor, 'grant', person, note === null ? null : { note });
    });
    return row;
  }

  /** False when the person had no grant (nothing is logged then). */
  async revoke(person: string, actor: Actor): Promise<boolean> {
    return this.storage.transaction(async (stores) => {
      const revoked = await stores.portal.revoke(person);
      if (revoked) await this.audit(stores, actor, 'revoke', person);
      return revoked;
    });
  }

  /**
   * A person is the account at the provider (`idp`, `subject`: its stable subject, not its user
   * name) they first signed in with. The first sign-in binds them; later ones must come from the
   * same account. Another account whose user name maps to the same person (a name given again
   * after someone left, an account renamed to it) is refused and logged, and so is the bound
   * account when it now maps to someone else: either would otherwise take over a person's bots.
   */
  async bindIdentity(idp: string, subject: string, person: string): Promise<IdentityCheck> {
    return this.storage.transaction(async (stores) => {
      const now = this.clock.now();
      if (await stores.portal.bindIdentity({ idp_id: idp, subject, owner_id: person, created_ts: now })) {
        await this.audit(stores, person, 'bind', person, { idp, subject });
        return { ok: true };
      }
      const rows = await stores.portal.identitiesOf(idp, subject, person);
      if (rows.some((row) => row.idp_id === idp && row.subject === subject && row.owner_id === person)) return { ok: true };
      const bySubject = rows.find((row) => row.idp_id === idp && row.subject === subject);
      const ofPerson = rows.find((row) => row.owner_id === person);
      await this.audit(stores, `oidc:${idp}`, 'refuse-sign-in', person, {
        idp,
        subject,
        ...(ofPerson ? { bound_idp: ofPerson.idp_id, bound_subject: ofPerson.subject } : {}),
        ...(bySubject ? { subject_bound_to: bySubject.owner_id } : {}),
      });
      return { ok: false, boundPerson: bySubject?.owner_id ?? null };
    });
  }

  /** The provider's account a person is bound to, if they have signed in. */
  async identityOf(person: string): Promise<{ idp: string; subject: string; since: number } | undefined> {
    const row = await this.storage.portal.identityOfPerson(person);
    return row ? { idp: row.idp_id, subject: row.subject, since: row.created_ts } : undefined;
  }

  /**
   * An operator releases a person's binding (they really are a new account now, or left): the
   * next account to sign in as them is bound instead. Their portal sessions end. False: none.
   */
  async unbindIdentity(person: string, actor: Actor): Promise<boolean> {
    return this.storage.transaction(async (stores) => {
      const row = await stores.portal.identityOfPerson(person);
      if (!row) return false;
      await stores.portal.unbindIdentity(person);
      await stores.portal.deleteSessionsOf(person);
      await this.audit(stores, actor, 'unbind', person, { idp: row.idp_id, subject: row.subject });
      return true;
    });
  }

  /**
   * An operator signs a person out of the portal everywhere (their right came from the provider's
   * attributes and should stop now, not at their next sign-in). The number of sessions ended.
   */
  async endSessionsOf(person: string, actor: Actor): Promise<number> {
    return this.storage.transaction(async (stores) => {
      const ended = await stores.portal.deleteSessionsOf(person);
      await this.audit(stores, actor, 'end-sessions', person, { sessions: ended });
      return ended;
    });
  }

  /** Whether a person is known to the portal (signed in, granted the right, or owning a bot). */
  isKnownPerson(person: string): Promise<boolean> {
    return this.storage.portal.isKnownPerson(person);
  }

  async hasGrant(person: string): Promise<boolean> {
    return (await this.storage.portal.grantOf(person)) !== undefined;
  }

  listGrants(limit = 10_000): Promise<CreatorGrantRow[]> {
    return this.storage.portal.listGrants(limit);
  }

  async auditLog(query: { limit: number; before?: number | undefined; target?: string | undefined; actor?: string | undefined }): Promise<AuditEntry[]> {
    const rows = await this.storage.portal.listAudit(query);
    return rows.map(auditEntry);
  }

  private async audit(stores: Stores, actor: Actor, action: AuditAction, target: string, detail: Record<string, unknown> | null = null): Promise<void> {
    await stores.portal.appendAudit({ ts: this.clock.now(), actor, action, target, detail: detail === null ? null : JSON.stringify(detail) });
  }

  /** A bot that is not deactivated, and the owner's when an owner is given. */
  private async activeBot(userId: string, owner: string | undefined): Promise<string> {
    const user = await this.accounts.getUser(userId);
    if (!user || user.user_type !== BOT_USER_TYPE) throw new MatrixError('M_NOT_FOUND', 'There is no such bot.');
    if (owner !== undefined && (await this.ownerOf(userId)) !== owner) throw new MatrixError('M_NOT_FOUND', 'There is no such bot among yours.');
    if (user.deactivated) throw new MatrixError('M_USER_DEACTIVATED', 'This bot has been deactivated.');
    return userId;
  }
}

function auditEntry(row: AuditRow): AuditEntry {
  let detail: Record<string, unknown> | null = null;
  if (row.detail !== null) {
    try {
      detail = JSON.parse(row.detail) as Record<string, unknown>;
    } catch {
      detail = null;
    }
  }
  return { id: row.id, ts: row.ts, actor: row.actor, action: row.action, target: row.target, detail };
}

/** An owner has as many bots as one person may have. */
export function tooManyBotsError(max: number): MatrixError {
  return new MatrixError('M_FORBIDDEN', `You already have ${max} bots, the most one person may have. Deactivate one you no longer need first.`);
}

/** A person is named by a full user id (@alice:example.org). */
export function assertPersonId(userId: string): void {
  const match = /^@([^:]+):(.+)$/.exec(userId);
  if (!match || localpartProblem(match[1] ?? '', match[2] ?? '') !== null) {
    throw new MatrixError('M_INVALID_PARAM', `${userId} is not a user id such as @alice:example.org`);
  }
}

/** `alice` on the people's server, or a full user id as it is. */
export function personIdNamedBy(name: string, peopleServerName: string | undefined): string {
  const trimmed = name.trim();
  if (trimmed.startsWith('@')) return trimmed;
  if (peopleServerName === undefined) throw new MatrixError('M_INVALID_PARAM', `name the person by a full user id such as @${trimmed}:example.org (portal.people_server_name is not set)`);
  return userIdFor(trimmed.toLowerCase(), peopleServerName);
}
