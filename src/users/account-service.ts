/**
 * Accounts: creating users and bots, rotating bot secrets, passwords, admin flags, deactivation.
 * Used by the CLI, the admin API and registration alike, so every path applies the same rules.
 */
import type { Clock } from '../core/clock.js';
import { MatrixError } from '../core/errors.js';
import type { Storage, Stores, UserListQuery, UserPatch, UserRow } from '../storage/index.js';
import { assertPasswordLength, type PasswordHasher } from './passwords.js';
import { generateBotSecret } from './secrets.js';
import { assertValidLocalpart, localpartOf, resolveLocalUserId, userIdFor } from './user-ids.js';

/** Synapse's user type for bot accounts. */
export const BOT_USER_TYPE = 'bot';
const USER_TYPES = new Set([BOT_USER_TYPE, 'support']);

export type { UserRow };

export interface NewUser {
  localpart: string;
  password?: string | null | undefined;
  admin?: boolean | undefined;
  userType?: string | null | undefined;
  displayname?: string | null | undefined;
  avatarUrl?: string | null | undefined;
  /** Creates a service user's account (reserved localpart, never a password); the server only. */
  service?: boolean | undefined;
  /** Registered by an application service in its own namespace (checked by the caller); no password. */
  appservice?: boolean | undefined;
  /** Written in the same transaction as the account (the bot portal's owner and audit entry). */
  also?: ((stores: Stores) => Promise<void>) | undefined;
  /** A guest account (`register?kind=guest`): a numeric localpart, no password. */
  guest?: boolean | undefined;
}

/** What else is written in the same transaction as an account change (an audit entry). */
export type AlsoWrite = (stores: Stores) => Promise<void>;

export interface BotCredentials {
  user_id: string;
  /** The bot's secret: the password it logs in with. Shown once, stored only as a hash. */
  password: string;
  /** False when the bot existed and this call rotated its secret. */
  created: boolean;
}

/** What an admin may change on an account (Synapse's `PUT /_synapse/admin/v2/users/<id>`). */
export interface AccountChanges {
  password?: string | null | undefined;
  /** With a new password: end the user's other sessions (default true). */
  logoutDevices?: boolean | undefined;
  displayname?: string | null | undefined;
  avatarUrl?: string | null | undefined;
  admin?: boolean | undefined;
  deactivated?: boolean | undefined;
  userType?: string | null | undefined;
  /** Written in the same transaction as the change. */
  also?: AlsoWrite | undefined;
}

export class AccountService {
  constructor(
    private readonly storage: Storage,
    private readonly serverName: string,
    private readonly clock: Clock,
    private readonly hasher: PasswordHasher,
    private readonly reserved: ReadonlySet<string> = new Set(),
    /** Whether an application service holds the user id in an exclusive namespace. */
    private readonly claimedByAppservice: (userId: string) => boolean = () => false,
  ) {}

  /** True for the localpart of a service user (see service-users.ts). */
  isReserved(localpart: string): boolean {
    return this.reserved.has(localpart);
  }

  userIdFor(localpart: string): string {
    return userIdFor(localpart, this.serverName);
  }

  /** Why `localpart` cannot be registered (invalid, reserved or taken), as the error a client expects. */
  async assertAvailable(localpart: string, byAppservice = false): Promise<void> {
    assertValidLocalpart(localpart, this.serverName, byAppservice);
    if (this.isReserved(localpart)) throw reservedError(this.userIdFor(localpart));
    if (!byAppservice && this.claimedByAppservice(this.userIdFor(localpart))) {
      throw new MatrixError('M_EXCLUSIVE', 'This user ID is reserved by an application service.');
    }
    if (/^[0-9]+$/.test(localpart)) {
      throw new MatrixError('M_INVALID_USERNAME', 'Numeric user IDs are reserved for guest users.');
    }
    if (await this.storage.users.get(this.userIdFor(localpart))) {
      throw new MatrixError('M_USER_IN_USE', 'User ID already taken.');
    }
  }

  async createUser(user: NewUser): Promise<UserRow> {
    if (user.service) {
      if (!this.isReserved(user.localpart) || user.password) throw new Error(`${user.localpart} is not a service user, or was given a password`);
      assertValidLocalpart(user.localpart, this.serverName);
    } else if (user.guest) {
      if (user.password || !/^[0-9]+$/.test(user.localpart)) throw new Error(`guest ${user.localpart} must be numeric and have no password`);
      assertValidLocalpart(user.localpart, this.serverName);
    } else {
      if (user.appservice && user.password) throw new Error(`${user.localpart} is an appservice user, and was given a password`);
      await this.assertAvailable(user.localpart, user.appservice === true);
    }
    assertUserType(user.userType);
    // Hash before the insert: argon2 takes milliseconds and must not run inside a transaction.
    const passwordHash = user.password ? await this.hasher.hash(user.password) : null;
    const row: UserRow = {
      user_id: this.userIdFor(user.localpart),
      localpart: user.localpart,
      password_hash: passwordHash,
      admin: user.admin ? 1 : 0,
      user_type: user.userType ?? null,
      displayname: user.displayname === undefined ? user.localpart : user.displayname,
      avatar_url: user.avatarUrl ?? null,
      deactivated: 0,
      created_ts: this.clock.now(),
      is_guest: user.guest ? 1 : 0,
    };
    try {
      const also = user.also;
      if (also) {
        await this.storage.transaction(async (stores) => {
          await stores.users.insert(row);
          await also(stores);
        });
      } else {
        await this.storage.users.insert(row);
      }
    } catch (err) {
      // Two registrations of one name at once: the unique key decides, the loser is told why.
      if (await this.storage.users.get(row.user_id)) throw new MatrixError('M_USER_IN_USE', 'User ID already taken.');
      throw err;
    }
    return row;
  }

  /**
   * Creates a bot with a fresh secret, or gives an existing bot a new one. Rotating ends the bot's
   * sessions: a rotation usually means the old secret leaked, so its tokens should die with it.
   */
  async createOrRotateBot(name: string, also?: (credentials: Omit<BotCredentials, 'password'>) => AlsoWrite): Promise<BotCredentials> {
    const localpart = this.localpartNamedBy(name);
    const userId = this.userIdFor(localpart);
    if (this.isReserved(localpart)) throw reservedError(userId);
    const secret = generateBotSecret();
    const existing = await this.storage.users.get(userId);
    if (!existing) {
      await this.createUser({ localpart, password: secret, userType: BOT_USER_TYPE, also: also?.({ user_id: userId, created: true }) });
      return { user_id: userId, password: secret, created: true };
    }
    if (existing.user_type !== BOT_USER_TYPE) {
      throw new MatrixError('M_USER_IN_USE', `${userId} exists and is not a bot account`);
    }
    if (existing.deactivated) throw new MatrixError('M_USER_DEACTIVATED', `${userId} has been deactivated`);
    await this.updateAccount(userId, { password: secret, logoutDevices: true, also: also?.({ user_id: userId, created: false }) });
    return { user_id: userId, password: secret, created: false };
  }

  /**
   * The localpart an operator means by `name` ("hello", "Hello" or "@hello:server"), refused when
   * it names a user of another server.
   */
  localpartNamedBy(name: string): string {
    const userId = resolveLocalUserId(name, this.serverName);
    const localpart = userId ? localpartOf(userId, this.serverName) : null;
    if (!localpart) throw new MatrixError('M_INVALID_USERNAME', `${name} is not a user on ${this.serverName}`);
    return localpart;
  }

  /** The highest all-digit localpart taken (guests are numbered on from it), 0 if none. */
  highestNumericLocalpart(): Promise<number> {
    return this.storage.users.highestNumericLocalpart();
  }

  async getUser(userId: string): Promise<UserRow | undefined> {
    return this.storage.users.get(userId);
  }

  async isAdmin(userId: string): Promise<boolean> {
    return (await this.storage.users.get(userId))?.admin === 1;
  }

  listUsers(query: UserListQuery): Promise<{ users: UserRow[]; total: number }> {
    return this.storage.users.list(query);
  }

  async setPassword(userId: string, password: string, options: { logoutDevices: boolean }): Promise<void> {
    await this.updateAccount(userId, { password, logoutDevices: options.logoutDevices });
  }

  /**
   * `POST /account/password` is for people. A bot's password is its generated secret, which the
   * operator rotates (`bot-homeserver bots create <name>`, or the admin API): a bot that could set
   * its own would end up with a secret nobody else knows. Service users have no password at all.
   */
  async assertMayChangeOwnPassword(userId: string): Promise<void> {
    const user = await this.storage.users.get(userId);
    const localpart = localpartOf(userId, this.serverName);
    if (localpart !== null && this.isReserved(localpart)) throw new MatrixError('M_FORBIDDEN', `${userId} is a service user of this server and has no password`);
    if (user?.user_type === BOT_USER_TYPE) {
      throw new MatrixError(
        'M_FORBIDDEN',
        "A bot's password is its secret, which only the server's operator rotates (bot-homeserver bots create <name>, or POST /_bot_homeserver/admin/v1/bots).",
      );
    }
  }

  async mayChangeOwnPassword(userId: string): Promise<boolean> {
    return this.assertMayChangeOwnPassword(userId).then(
      () => true,
      () => false,
    );
  }

  /** A user's own new password; `logoutDevices` ends every other session (the one asking keeps its own). */
  async changeOwnPassword(userId: string, keptDeviceId: string, password: string, logoutDevices: boolean): Promise<void> {
    await this.assertMayChangeOwnPassword(userId);
    assertPasswordLength(password);
    const passwordHash = await this.hasher.hash(password);
    const ended = logoutDevices ? (await this.storage.sessions.listDevices(userId)).map((d) => d.device_id).filter((id) => id !== keptDeviceId) : [];
    await this.storage.transaction(async (stores) => {
      await stores.users.update(userId, { password_hash: passwordHash });
      if (logoutDevices) await stores.sessions.deleteDevicesExcept(userId, keptDeviceId);
    });
    if (logoutDevices) await this.devicesRemoved(userId, ended);
  }

  /**
   * Deactivation: the account keeps its id (ids are never reused) but loses its password and
   * every session; `erase` also forgets its profile.
   */
  async deactivate(userId: string, options: { erase?: boolean; also?: AlsoWrite | undefined } = {}): Promise<void> {
    const erased = options.erase ? { displayname: null, avatarUrl: null } : {};
    await this.updateAccount(userId, { deactivated: true, ...erased, also: options.also });
    if (options.erase) await this.erasedUsers.erase(userId);
  }

  /** Set by services.ts: where erasures are recorded (their events are redacted for new viewers). */
  erasedUsers: { erase(userId: string): Promise<void> } = { erase: async () => {} };

  /**
   * A service user's account is made by the server, never with a password; one left with a
   * password (set before such changes were refused) loses it, with every session opened with
   * it. True when there was one.
   */
  async secureServiceAccount(user: UserRow): Promise<boolean> {
    if (user.password_hash === null) return false;
    await this.storage.transaction(async (stores) => {
      await stores.users.update(user.user_id, { password_hash: null });
      await stores.sessions.deleteAllDevices(user.user_id);
    });
    return true;
  }

  /**
   * Upgrades a guest to a full account under the same user id (`POST /register` with
   * `guest_access_token`): it gets a password and loses the guest flag. The guest's sessions stay
   * (as in Synapse) and now act for a full account.
   */
  async upgradeGuest(userId: string, password: string): Promise<void> {
    assertPasswordLength(password);
    const passwordHash = await this.hasher.hash(password);
    await this.storage.transaction(async (stores) => {
      const user = await stores.users.get(userId);
      if (!user || user.is_guest !== 1 || user.deactivated) throw new MatrixError('M_USER_IN_USE', 'User ID already taken.');
      await stores.users.update(userId, { password_hash: passwordHash, is_guest: 0 });
      // Tokens are cached with the flag of their user: the guest's tokens must see the change.
      stores.sessions.forgetCachedTokens();
    });
  }

  /** Applies an admin's changes to an existing account, all in one transaction. */
  async updateAccount(userId: string, changes: AccountChanges): Promise<void> {
    assertUserType(changes.userType);
    const localpart = localpartOf(userId, this.serverName);
    if (changes.password && localpart !== null && this.isReserved(localpart)) {
      throw new MatrixError('M_FORBIDDEN', `${userId} is a service user of this server: nobody logs in as it, so it has no password`);
    }
    // Hash first: argon2 takes milliseconds and must not run inside the transaction.
    const passwordHash = changes.password ? await this.hasher.hash(changes.password) : undefined;
    const patch: UserPatch = {};
    if (changes.displayname !== undefined) patch.displayname = changes.displayname;
    if (changes.avatarUrl !== undefined) patch.avatar_url = changes.avatarUrl;
    if (changes.admin !== undefined) patch.admin = changes.admin ? 1 : 0;
    if (changes.userType !== undefined) patch.user_type = changes.userType;
    if (changes.deactivated === false) patch.deactivated = 0;
    if (passwordHash !== undefined) patch.password_hash = passwordHash;
    if (changes.deactivated === true) Object.assign(patch, { deactivated: 1, password_hash: null });
    // A new password ends the sessions opened with the old one, unless the admin says otherwise.
    const endSessions = changes.deactivated === true || (passwordHash !== undefined && changes.logoutDevices !== false);
    const ended = endSessions ? (await this.storage.sessions.listDevices(userId)).map((d) => d.device_id) : [];
    await this.storage.transaction(async (stores) => {
      await stores.users.update(userId, patch);
      if (endSessions) await stores.sessions.deleteAllDevices(userId);
      await changes.also?.(stores);
    });
    if (endSessions) await this.devicesRemoved(userId, ended);
  }

  /** Set once the keys service exists: devices were deleted, their encryption keys go. */
  devicesRemoved: (userId: string, deviceIds?: readonly string[]) => Promise<void> = async () => {};
}

function reservedError(userId: string): MatrixError {
  return new MatrixError('M_EXCLUSIVE', `${userId} is reserved for a service user of this server`);
}

function assertUserType(userType: string | null | undefined): void {
  if (userType !== undefined && userType !== null && !USER_TYPES.has(userType)) {
    throw new MatrixError('M_INVALID_PARAM', 'Invalid user type');
  }
}
