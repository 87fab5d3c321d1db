/**
 * Sessions: password login, access and refresh tokens, logout, and turning a presented access
 * token into the user behind it. Tokens are looked up by their SHA-256 hash.
 *
 * Refresh follows the spec: refreshing with token T issues a new pair (T', A'); T stays usable
 * (a client may retry after a lost response) until T' or A' is first used, and then T and the
 * access tokens issued with it are revoked.
 */
import type { Clock } from '../core/clock.js';
import type { Config } from '../config/index.js';
import { MatrixError } from '../core/errors.js';
import type { Limiters } from '../ratelimit/limiters.js';
import type { Storage, Stores } from '../storage/index.js';
import type { PasswordHasher } from './passwords.js';
import { generateAccessToken, generateDeviceId, generateRefreshToken, hashToken } from './secrets.js';
import { serviceLocalparts } from './service-users.js';
import { AppServiceRegistry, type AppService } from '../appservices/registry.js';
import { resolveLocalUserId, userIdFor } from './user-ids.js';

/** The longest device display name accepted (Synapse: 100). */
export const MAX_DEVICE_DISPLAY_NAME_LENGTH = 100;

/** Where a request came from: its address and `User-Agent`. */
export interface ClientSeen {
  ip: string;
  userAgent: string | undefined;
}

/** Addresses and user agents are kept to this many characters. */
const MAX_SEEN_TEXT = 512;
/** The shortest time between two writes of where a device was seen, when what was seen changed. */
const DEVICE_CHANGE_WRITE_GAP_MS = 5_000;

/** The user behind an access token. */
export interface Requester {
  userId: string;
  deviceId: string;
  accessTokenId: number;
  /** Set when an application service made the request with its as_token. */
  appserviceId?: string | undefined;
  /** A guest account (`register?kind=guest`): only the routes open to guests serve it. */
  isGuest?: boolean | undefined;
}

export interface IssuedSession {
  user_id: string;
  access_token: string;
  device_id: string;
  refresh_token?: string;
  expires_in_ms?: number;
}

export interface SessionOptions {
  deviceId?: string | undefined;
  initialDeviceDisplayName?: string | undefined;
  /** The client asked for a refresh token (`refresh_token: true`). */
  refreshable?: boolean | undefined;
  /**
   * The password hash a login was checked against. The session is refused if the account has
   * changed since (deactivated, or its password or bot secret rotated while argon2 was working),
   * so a login racing a rotation cannot outlive it.
   */
  verifiedPasswordHash?: string | null | undefined;
}

export interface PasswordLogin extends SessionOptions {
  /** What the client named the user by: localpart or full user id. */
  user: string;
  password: string;
  /** The client's address, for the per-address limiter. */
  address: string;
}

export const MAX_DEVICE_ID_LENGTH = 512;

const INVALID_LOGIN = 'Invalid username or password';

/** How often an account's last activity is written (Synapse batches its user_ips likewise). */
const ACTIVITY_WRITE_INTERVAL_MS = 60_000;
/** Accounts whose last write is remembered; past it the memory starts over (costing one write each). */
const MAX_ACTIVITY_ENTRIES = 10_000;

export class SessionService {
  constructor(
    private readonly storage: Storage,
    private readonly config: Config,
    private readonly clock: Clock,
    private readonly hasher: PasswordHasher,
    private readonly limiters: Limiters,
    private readonly appservices: AppServiceRegistry = new AppServiceRegistry([], config.server_name),
  ) {
    this.serviceUserIds = new Set([...serviceLocalparts(config)].map((localpart) => userIdFor(localpart, config.server_name)));
  }

  private readonly serviceUserIds: ReadonlySet<string>;
  /** When each account's activity was last written. */
  private readonly activityWritten = new Map<string, number>();

  async loginWithPassword(login: PasswordLogin): Promise<IssuedSession> {
    this.limiters.loginAddress.enforce(login.address);
    const userId = resolveLocalUserId(login.user, this.config.server_name);
    // Failed attempts are counted per account, even for names that do not exist, so that probing
    // for accounts looks the same as guessing passwords.
    const failedKey = userId ?? `unknown:${login.user.toLowerCase()}`;
    // Counted before the password is checked, so guesses sent in parallel are limited too; the
    // right password then clears the count (a misconfigured bot is not punished later).
    this.limiters.loginFailed.enforce(failedKey);

    const user = userId ? await this.storage.users.get(userId) : undefined;
    const valid = await this.hasher.verify(user?.password_hash, login.password);
    // Nobody logs in as a service user, whatever password its account may hold.
    const service = userId !== null && this.serviceUserIds.has(userId);
    if (!user || !valid || service) throw new MatrixError('M_FORBIDDEN', INVALID_LOGIN);
    if (user.deactivated) throw new MatrixError('M_USER_DEACTIVATED', 'This account has been deactivated');
    this.limiters.loginFailed.reset(failedKey);
    this.limiters.loginAccount.enforce(user.user_id);
    return this.createSession(user.user_id, { ...login, verifiedPasswordHash: user.password_hash });
  }

  /** Issues a new access token (and refresh token when asked) on a new or reused device. */
  async createSession(userId: string, options: SessionOptions = {}): Promise<IssuedSession> {
    assertDeviceIdLength(options.deviceId);
    const now = this.clock.now();
    const refreshable = options.refreshable === true && this.config.refreshable_access_token_lifetime !== null;
    const accessLifetime = refreshable
      ? this.config.refreshable_access_token_lifetime
      : this.config.nonrefreshable_access_token_lifetime;
    const accessToken = generateAccessToken();
    const refreshToken = refreshable ? generateRefreshToken() : undefined;

    let newDevice = false;
    const deviceId = await this.storage.transaction(async (stores) => {
      if (options.verifiedPasswordHash !== undefined) {
        const user = await stores.users.get(userId);
        if (!user || user.deactivated || user.password_hash !== options.verifiedPasswordHash) {
          throw new MatrixError('M_FORBIDDEN', INVALID_LOGIN);
        }
        // Owners see when their bots last logged in (the bot portal).
        await stores.users.recordLogin(userId, now);
      }
      const deviceId = options.deviceId ?? generateDeviceId();
      // A known device is reused as it is (its other tokens stay valid, as in Synapse).
      newDevice = !(await stores.sessions.getDevice(userId, deviceId));
      if (newDevice) {
        await stores.sessions.insertDevice({
          user_id: userId,
          device_id: deviceId,
          display_name: options.initialDeviceDisplayName ?? null,
          created_ts: now,
          last_seen_ts: null,
          last_seen_ip: null,
          last_seen_user_agent: null,
        });
      }
      const refreshTokenId = refreshToken
        ? await this.insertRefreshToken(stores, userId, deviceId, refreshToken, now)
        : null;
      await stores.sessions.insertAccessToken({
        token_hash: hashToken(accessToken),
        user_id: userId,
        device_id: deviceId,
        created_ts: now,
        expires_ts: accessLifetime === null ? null : now + accessLifetime,
        refresh_token_id: refreshTokenId,
      });
      return deviceId;
    });

    // A new device is a device-list change: those sharing a room with the user are told.
    if (newDevice) await this.deviceAdded(userId, deviceId);
    const session: IssuedSession = { user_id: userId, access_token: accessToken, device_id: deviceId };
    if (refreshToken) session.refresh_token = refreshToken;
    if (accessLifetime !== null) session.expires_in_ms = accessLifetime;
    return session;
  }

  /** Told when an application service makes a request with its as_token: it is up. */
  onAppserviceSeen: ((serviceId: string) => void) | undefined;

  /**
   * The requester an access token stands for, or the error a client expects. An application
   * service's as_token stands for its sender, or, with `?user_id=` (`masquerade`), for a user in
   * its namespaces that exists. `client`: where the request came from, recorded as the device's
   * last seen address, user agent and time (admin `whois`, `/devices`).
   */
  async authenticate(accessToken: string, masquerade?: string, client?: ClientSeen): Promise<Requester> {
    const service = this.appservices.byToken(accessToken);
    if (service) {
      this.onAppserviceSeen?.(service.id);
      return this.appserviceRequester(service, masquerade);
    }
    const token = await this.storage.sessions.findAccessToken(hashToken(accessToken));
    if (!token) {
      throw new MatrixError('M_UNKNOWN_TOKEN', 'Invalid access token passed.', { extra: { soft_logout: false } });
    }
    if (token.expires_ts !== null && token.expires_ts <= this.clock.now()) {
      throw new MatrixError('M_UNKNOWN_TOKEN', 'Access token has expired', { extra: { soft_logout: true } });
    }
    if (token.refresh_token_id !== null && !token.used) {
      const refreshTokenId = token.refresh_token_id;
      // First use of a refreshed token: re-checked inside the transaction, since a retried refresh
      // may have revoked it since the lookup above.
      const stillValid = await this.storage.transaction(async (stores) => {
        if (!(await stores.sessions.markAccessTokenUsed(token.id))) return false;
        await this.retirePredecessors(stores, refreshTokenId);
        return true;
      });
      if (!stillValid) {
        throw new MatrixError('M_UNKNOWN_TOKEN', 'Invalid access token passed.', { extra: { soft_logout: false } });
      }
    }
    await this.noteActivity(token.user_id);
    if (client) await this.noteDeviceSeen(token.user_id, token.device_id, client);
    const requester: Requester = { userId: token.user_id, deviceId: token.device_id, accessTokenId: token.id };
    if (token.is_guest === 1) requester.isGuest = true;
    return requester;
  }

  /** Records that an account used a token, at most once a minute per account. */
  private async noteActivity(userId: string): Promise<void> {
    const now = this.clock.now();
    const last = this.activityWritten.get(userId);
    if (last !== undefined && now - last < ACTIVITY_WRITE_INTERVAL_MS && now >= last) return;
    if (this.activityWritten.size >= MAX_ACTIVITY_ENTRIES) this.activityWritten.clear();
    this.activityWritten.set(userId, now);
    await this.storage.users.recordSeen(userId, now);
  }

  /**
   * Records where and with what a device was seen: a change of address or user agent within
   * seconds, otherwise at most once a minute per device. A request must not cost a write: a client
   * that changes its user agent on every request still gets one write per device every few seconds.
   */
  private async noteDeviceSeen(userId: string, deviceId: string, client: ClientSeen): Promise<void> {
    const now = this.clock.now();
    const key = `${userId}\u0000${deviceId}`;
    const ip = client.ip.slice(0, MAX_SEEN_TEXT);
    const userAgent = client.userAgent === undefined ? null : client.userAgent.slice(0, MAX_SEEN_TEXT);
    const last = this.deviceSeenWritten.get(key);
    if (last && now >= last.ts) {
      const changed = last.ip !== ip || last.userAgent !== userAgent;
      if (now - last.ts < (changed ? DEVICE_CHANGE_WRITE_GAP_MS : ACTIVITY_WRITE_INTERVAL_MS)) return;
    }
    if (this.deviceSeenWritten.size >= MAX_ACTIVITY_ENTRIES) this.deviceSeenWritten.clear();
    this.deviceSeenWritten.set(key, { ip, userAgent, ts: now });
    await this.storage.sessions.recordDeviceSeen(userId, deviceId, { ip, userAgent, ts: now });
  }

  private readonly deviceSeenWritten = new Map<string, { ip: string; userAgent: string | null; ts: number }>();

  /** `POST /refresh`: trades a refresh token for a new access token and refresh token. */
  async refresh(refreshToken: string): Promise<{ access_token: string; refresh_token: string; expires_in_ms?: number }> {
    const lifetime = this.config.refreshable_access_token_lifetime;
    if (lifetime === null) throw new MatrixError('M_UNRECOGNIZED', 'Refresh tokens are not enabled on this server');
    const now = this.clock.now();
    const newAccessToken = generateAccessToken();
    const newRefreshToken = generateRefreshToken();
    await this.storage.transaction(async (stores) => {
      const old = await stores.sessions.findRefreshToken(hashToken(refreshToken));
      if (!old) throw new MatrixError('M_UNKNOWN_TOKEN', 'refresh token does not exist', { extra: { soft_logout: false } });
      if (old.expires_ts !== null && old.expires_ts <= now) {
        throw new MatrixError('M_FORBIDDEN', 'The supplied refresh token has expired');
      }
      // Using a successor retires this token; the successor handed out before is superseded by
      // the new one (its client lost the answer and is retrying).
      await this.retirePredecessors(stores, old.id);
      if (old.next_token_id !== null) await stores.sessions.deleteRefreshTokenFamily(old.next_token_id);
      const nextId = await this.insertRefreshToken(stores, old.user_id, old.device_id, newRefreshToken, now);
      await stores.sessions.setNextRefreshToken(old.id, nextId);
      await stores.sessions.insertAccessToken({
        token_hash: hashToken(newAccessToken),
        user_id: old.user_id,
        device_id: old.device_id,
        created_ts: now,
        expires_ts: now + lifetime,
        refresh_token_id: nextId,
      });
    });
    return { access_token: newAccessToken, refresh_token: newRefreshToken, expires_in_ms: lifetime };
  }

  /** `POST /logout`: ends the device behind this token, with all its tokens. */
  private async appserviceRequester(service: AppService, masquerade: string | undefined): Promise<Requester> {
    // The device is the appservice's own: transaction ids are scoped to it.
    const requester = { deviceId: `AS_${service.id}`, accessTokenId: 0, appserviceId: service.id };
    if (masquerade === undefined || masquerade === service.sender) return { ...requester, userId: service.sender };
    if (!masquerade.endsWith(`:${this.config.server_name}`) || !this.appservices.isInterestedInUser(service, masquerade)) {
      throw new MatrixError('M_FORBIDDEN', `Application service cannot masquerade as this user (${masquerade}).`);
    }
    const user = await this.storage.users.get(masquerade);
    if (!user || user.deactivated) throw new MatrixError('M_FORBIDDEN', `Application service has not registered this user (${masquerade})`);
    return { ...requester, userId: masquerade };
  }

  /** Set once the keys service exists: devices were deleted, their encryption keys go. */
  devicesRemoved: (userId: string, deviceIds?: readonly string[]) => Promise<void> = async () => {};
  /** Set once the keys service exists: a login made a new device. */
  deviceAdded: (userId: string, deviceId: string) => Promise<void> = async () => {};

  async logout(requester: Requester): Promise<void> {
    if (requester.appserviceId !== undefined) throw new MatrixError('M_FORBIDDEN', 'An application service cannot log out of its as_token');
    await this.storage.transaction((stores) => stores.sessions.deleteDevice(requester.userId, requester.deviceId));
    await this.devicesRemoved(requester.userId, [requester.deviceId]);
  }

  /** Deletes tokens that expired more than `graceMs` ago; the database would only grow otherwise. */
  async pruneExpiredTokens(graceMs = 86_400_000): Promise<number> {
    return this.storage.sessions.deleteExpiredTokens(this.clock.now() - graceMs);
  }

  /** `POST /logout/all`, password changes, deactivation: ends every session of a user. */
  async logoutAll(userId: string): Promise<void> {
    const deviceIds = (await this.storage.sessions.listDevices(userId)).map((device) => device.device_id);
    await this.storage.transaction((stores) => stores.sessions.deleteAllDevices(userId));
    await this.devicesRemoved(userId, deviceIds);
  }

  private async insertRefreshToken(stores: Stores, userId: string, deviceId: string, token: string, now: number) {
    const lifetime = this.config.refresh_token_lifetime;
    return stores.sessions.insertRefreshToken({
      token_hash: hashToken(token),
      user_id: userId,
      device_id: deviceId,
      created_ts: now,
      expires_ts: lifetime === null ? null : now + lifetime,
      next_token_id: null,
    });
  }

  /** The token `refreshTokenId` has been used: the tokens it replaced stop working now. */
  private async retirePredecessors(stores: Stores, refreshTokenId: number): Promise<void> {
    for (const id of await stores.sessions.findPredecessorRefreshTokens(refreshTokenId)) {
      await stores.sessions.deleteRefreshTokenFamily(id);
    }
  }
}

/** Checked before anything is written (registration creates the account before the session). */
export function assertDeviceIdLength(deviceId: string | undefined): void {
  if (deviceId !== undefined && deviceId.length > MAX_DEVICE_ID_LENGTH) {
    throw new MatrixError('M_INVALID_PARAM', `device_id may not be longer than ${MAX_DEVICE_ID_LENGTH} characters`);
  }
}
