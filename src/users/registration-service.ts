/**
 * Registration, both ways Synapse offers it:
 * - open registration (`POST /register`), off by default and meant for test and conformance
 *   setups: user-interactive auth with the single stage `m.login.dummy`;
 * - shared-secret registration (`/_synapse/admin/v1/register`): a nonce plus an HMAC of the
 *   request keyed with `registration_shared_secret`, byte for byte as Synapse computes it, so
 *   Synapse's `register_new_matrix_user` and operators' scripts work unchanged.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Clock } from '../core/clock.js';
import type { Config } from '../config/index.js';
import { MatrixError } from '../core/errors.js';
import type { Limiters } from '../ratelimit/limiters.js';
import { BOT_USER_TYPE, type AccountService, type AlsoWrite } from './account-service.js';
import { assertPasswordLength, MAX_PASSWORD_LENGTH } from './passwords.js';
import { assertDeviceIdLength, type IssuedSession, type SessionService } from './session-service.js';

const DUMMY_STAGE = 'm.login.dummy';
/** Synapse gives every guest this device id (each guest is a user of its own). */
export const GUEST_DEVICE_ID = 'guest_device';
/** Attempts at the next guest number when other processes take numbers at the same time. */
const GUEST_NUMBER_ATTEMPTS = 5;
const UIA_SESSION_LIFETIME_MS = 10 * 60_000;
/** Synapse forgets a nonce after a minute. */
const NONCE_LIFETIME_MS = 60_000;
/**
 * Outstanding nonces and registration sessions are held in memory and handed out without a
 * token, so their number is capped: past it the oldest are forgotten.
 */
const MAX_PENDING = 10_000;

export interface OpenRegistration {
  kind: string;
  username?: string | undefined;
  password?: string | undefined;
  auth?: { type?: string | undefined; session?: string | undefined } | undefined;
  deviceId?: string | undefined;
  initialDeviceDisplayName?: string | undefined;
  inhibitLogin?: boolean | undefined;
  refreshable?: boolean | undefined;
  /** Upgrading a guest: the guest's access token (`guest_access_token`). */
  guestAccessToken?: string | undefined;
  /** The client's address, for `rc_registration`. */
  address: string;
}

/** Either the user-interactive-auth challenge (HTTP 401) or the registered account. */
export type RegistrationOutcome =
  | { status: 401; body: { session: string; flows: { stages: string[] }[]; params: Record<string, never> } }
  | { status: 200; body: RegisteredAccount };

export type RegisteredAccount = { user_id: string; home_server: string } & Partial<IssuedSession>;

export interface SharedSecretRegistration {
  nonce?: unknown;
  username?: unknown;
  password?: unknown;
  admin?: unknown;
  user_type?: unknown;
  displayname?: unknown;
  mac?: unknown;
  device_id?: unknown;
  initial_device_display_name?: unknown;
  inhibit_login?: unknown;
  refresh_token?: unknown;
}

/**
 * A user-interactive-auth session of `POST /register`: the first request's parameters (a later
 * request may carry only `auth`) and, once completed, its result (sent again to a retry, as the
 * spec's user-interactive auth says and Synapse does).
 */
interface UiaSession {
  createdAt: number;
  params: Pick<OpenRegistration, 'username' | 'password' | 'deviceId' | 'initialDeviceDisplayName' | 'inhibitLogin' | 'refreshable' | 'guestAccessToken'>;
  result?: Promise<RegistrationOutcome>;
}

export class RegistrationService {
  /** Map order is creation order, which pruning relies on. */
  private readonly uiaSessions = new Map<string, UiaSession>();
  private readonly nonces = new Map<string, number>();

  constructor(
    private readonly config: Config,
    private readonly clock: Clock,
    private readonly accounts: AccountService,
    private readonly sessions: SessionService,
    private readonly limiters: Limiters,
  ) {}

  async registerOpen(request: OpenRegistration): Promise<RegistrationOutcome> {
    this.limiters.registration.enforce(request.address, { record: false });
    if (request.kind === 'guest') return { status: 200, body: await this.registerGuest(request) };
    if (request.kind !== 'user') {
      throw new MatrixError('M_UNRECOGNIZED', `Do not understand membership kind: ${request.kind}`, { status: 400 });
    }
    this.assertOpenRegistrationEnabled();
    const now = this.clock.now();
    pruneOlderThan(this.uiaSessions, now - UIA_SESSION_LIFETIME_MS);
    const auth = request.auth;
    const known = auth?.session !== undefined ? this.uiaSessions.get(auth.session) : undefined;
    if (auth?.type !== undefined && auth.session !== undefined && !known) throw new MatrixError('M_UNKNOWN', 'Unknown session ID', { status: 400 });
    // A completed session answers again what it answered (the same account and login).
    if (known?.result) return known.result;
    // The first request's parameters hold for the session; a later one may add what it lacked.
    const params = { ...(known?.params ?? {}), ...definedOf(request) };
    // Upgrading a guest keeps its user id: the token must be a guest's, and the name (if any) its own.
    const upgraded = params.guestAccessToken !== undefined ? await this.guestToUpgrade(params.guestAccessToken, params.username) : undefined;
    const localpart = upgraded?.localpart ?? params.username?.toLowerCase();
    if (localpart !== undefined && !upgraded) await this.accounts.assertAvailable(localpart);
    if (params.password !== undefined) assertPasswordLength(params.password);
    assertDeviceIdLength(params.deviceId);

    if (!auth || auth.type === undefined) {
      const session = known && auth?.session !== undefined ? auth.session : this.newUiaSession(now, params);
      if (known) known.params = params;
      return { status: 401, body: { session, flows: [{ stages: [DUMMY_STAGE] }], params: {} } };
    }
    if (auth.type !== DUMMY_STAGE) throw new MatrixError('M_UNRECOGNIZED', 'Unrecognised login type', { status: 400 });
    if (params.password === undefined) throw new MatrixError('M_MISSING_PARAM', 'Missing params: password');
    const password = params.password;
    const result = (async (): Promise<RegistrationOutcome> => {
      let userId: string;
      if (upgraded) {
        await this.accounts.upgradeGuest(upgraded.userId, password);
        userId = upgraded.userId;
      } else {
        userId = (await this.accounts.createUser({ localpart: localpart ?? (await this.generateLocalpart()), password })).user_id;
      }
      this.limiters.registration.record(request.address);
      return {
        status: 200,
        body: await this.loginAfterRegistration(userId, {
          inhibitLogin: params.inhibitLogin,
          deviceId: params.deviceId,
          initialDeviceDisplayName: params.initialDeviceDisplayName,
          refreshable: params.refreshable,
        }),
      };
    })();
    if (known) {
      known.result = result;
      // A failed registration may be tried again in the same session.
      result.catch(() => {
        if (known.result === result) delete known.result;
      });
    }
    return result;
  }

  /**
   * `POST /register?kind=guest` (Synapse's rules): only with `allow_guest_access`, whether or not
   * open registration is on; the next free number as localpart; the device `guest_device`; every
   * other parameter but `initial_device_display_name` ignored.
   */
  private async registerGuest(request: OpenRegistration): Promise<RegisteredAccount> {
    if (!this.config.allow_guest_access) throw new MatrixError('M_GUEST_ACCESS_FORBIDDEN', 'Guest access is disabled');
    let user: { user_id: string } | undefined;
    for (let attempt = 0; !user; attempt++) {
      const localpart = String(await this.nextGuestNumber());
      try {
        user = await this.accounts.createUser({ localpart, guest: true });
      } catch (err) {
        // Another process took the number: count on from what the database holds.
        if (!(err instanceof MatrixError && err.errcode === 'M_USER_IN_USE') || attempt + 1 >= GUEST_NUMBER_ATTEMPTS) throw err;
        this.lastGuestNumber = undefined;
      }
    }
    this.limiters.registration.record(request.address);
    return this.loginAfterRegistration(user.user_id, { deviceId: GUEST_DEVICE_ID, initialDeviceDisplayName: request.initialDeviceDisplayName });
  }

  /** The last guest number handed out; read from the database when unknown. */
  private lastGuestNumber: number | undefined;

  private async nextGuestNumber(): Promise<number> {
    this.lastGuestNumber = (this.lastGuestNumber ?? (await this.accounts.highestNumericLocalpart())) + 1;
    return this.lastGuestNumber;
  }

  /**
   * The guest a `guest_access_token` upgrades: 403 `M_FORBIDDEN` unless the token is a guest's and
   * `username` (when given) is that guest's own localpart, as Synapse checks.
   */
  private async guestToUpgrade(guestAccessToken: string, username: string | undefined): Promise<{ userId: string; localpart: string }> {
    const refused = new MatrixError('M_FORBIDDEN', 'Cannot register taken user ID without valid guest credentials for that user.');
    const guest = await this.sessions.authenticate(guestAccessToken).catch(() => undefined);
    if (!guest?.isGuest) throw refused;
    const localpart = guest.userId.slice(1, guest.userId.indexOf(':'));
    if (username !== undefined && username.toLowerCase() !== localpart) throw refused;
    return { userId: guest.userId, localpart };
  }

  /** `GET /register/available`. */
  async checkAvailable(username: string): Promise<void> {
    this.assertOpenRegistrationEnabled();
    await this.accounts.assertAvailable(username.toLowerCase());
  }

  /** `GET /_synapse/admin/v1/register`: a single-use nonce, valid for a minute. */
  issueNonce(): string {
    this.assertSharedSecretEnabled();
    const now = this.clock.now();
    pruneOlderThan(this.nonces, now - NONCE_LIFETIME_MS);
    const nonce = randomBytes(64).toString('hex');
    this.nonces.set(nonce, now);
    return nonce;
  }

  /** `POST /_synapse/admin/v1/register`, with Synapse's checks in Synapse's order. */
  async registerWithSharedSecret(body: SharedSecretRegistration, options: { auditBot?: (userId: string) => AlsoWrite } = {}): Promise<RegisteredAccount> {
    const secret = this.assertSharedSecretEnabled();
    pruneOlderThan(this.nonces, this.clock.now() - NONCE_LIFETIME_MS);
    if (body.nonce === undefined) throw new MatrixError('M_BAD_JSON', 'nonce must be specified');
    if (typeof body.nonce !== 'string') throw new MatrixError('M_BAD_JSON', 'nonce must be a string');
    const nonce = body.nonce;
    // A nonce is spent by any attempt, good or bad, so a captured request cannot be replayed.
    if (!this.nonces.delete(nonce)) throw new MatrixError('M_UNKNOWN', 'unrecognised nonce');

    const username = requireString(body.username, 'username', 'Invalid username');
    const password = requireString(body.password, 'password', 'Invalid password');
    const userType = body.user_type ?? null;
    if (userType !== null && (typeof userType !== 'string' || !['bot', 'support'].includes(userType))) {
      throw new MatrixError('M_UNKNOWN', 'Invalid user type');
    }
    if (body.mac === undefined) throw new MatrixError('M_BAD_JSON', 'mac must be specified');
    const admin = body.admin === true;
    const expected = sharedSecretMac(secret, { nonce, username, password, admin, userType });
    if (typeof body.mac !== 'string' || !constantTimeEqual(expected, body.mac)) {
      throw new MatrixError('M_UNKNOWN', 'HMAC incorrect', { status: 403 });
    }
    if (body.refresh_token !== undefined && typeof body.refresh_token !== 'boolean') {
      throw new MatrixError('M_INVALID_PARAM', 'refresh_token must be a boolean');
    }
    const displayname = typeof body.displayname === 'string' ? body.displayname : undefined;
    const deviceId = typeof body.device_id === 'string' ? body.device_id : undefined;
    assertDeviceIdLength(deviceId);
    const localpart = username.toLowerCase();
    // A bot made this way is in the bot audit log too, written with the account.
    const also = userType === BOT_USER_TYPE ? options.auditBot?.(this.accounts.userIdFor(localpart)) : undefined;
    const user = await this.accounts.createUser({ localpart, password, admin, userType, displayname, also });
    return this.loginAfterRegistration(user.user_id, {
      inhibitLogin: body.inhibit_login === true,
      deviceId,
      initialDeviceDisplayName:
        typeof body.initial_device_display_name === 'string' ? body.initial_device_display_name : undefined,
      refreshable: body.refresh_token === true,
    });
  }

  private assertSharedSecretEnabled(): string {
    const secret = this.config.registration_shared_secret;
    if (!secret) throw new MatrixError('M_UNKNOWN', 'Shared secret registration is not enabled');
    return secret;
  }

  private assertOpenRegistrationEnabled(): void {
    if (!this.config.enable_registration) throw new MatrixError('M_FORBIDDEN', 'Registration has been disabled');
  }

  private newUiaSession(now: number, params: UiaSession['params']): string {
    const id = randomBytes(18).toString('base64url');
    this.uiaSessions.set(id, { createdAt: now, params });
    return id;
  }

  private async generateLocalpart(): Promise<string> {
    for (;;) {
      const candidate = `user-${randomBytes(6).toString('hex')}`;
      if (!(await this.accounts.getUser(this.accounts.userIdFor(candidate)))) return candidate;
    }
  }

  private async loginAfterRegistration(
    userId: string,
    options: { inhibitLogin?: boolean | undefined } & Parameters<SessionService['createSession']>[1],
  ): Promise<RegisteredAccount> {
    const account = { user_id: userId, home_server: this.config.server_name };
    if (options.inhibitLogin) return account;
    return { ...(await this.sessions.createSession(userId, options)), ...account };
  }

}

/**
 * Forgets entries created before `cutoff`, and the oldest beyond `MAX_PENDING`. Entries are kept
 * in creation order, so this stops at the first one to keep: its cost is what it removes.
 */
/** The registration parameters a request actually gave. */
function definedOf(request: OpenRegistration): UiaSession['params'] {
  const params: UiaSession['params'] = {};
  if (request.username !== undefined) params.username = request.username;
  if (request.password !== undefined) params.password = request.password;
  if (request.deviceId !== undefined) params.deviceId = request.deviceId;
  if (request.initialDeviceDisplayName !== undefined) params.initialDeviceDisplayName = request.initialDeviceDisplayName;
  if (request.inhibitLogin !== undefined) params.inhibitLogin = request.inhibitLogin;
  if (request.refreshable !== undefined) params.refreshable = request.refreshable;
  if (request.guestAccessToken !== undefined) params.guestAccessToken = request.guestAccessToken;
  return params;
}

function pruneOlderThan(pending: Map<string, number> | Map<string, { createdAt: number }>, cutoff: number): void {
  for (const [key, entry] of pending) {
    const created = typeof entry === 'number' ? entry : entry.createdAt;
    if (created >= cutoff && pending.size < MAX_PENDING) break;
    pending.delete(key);
  }
}

/**
 * Synapse's MAC: HMAC-SHA1 keyed with the shared secret over
 * `nonce NUL username NUL password NUL ("admin" | "notadmin") [NUL user_type]`, hex encoded.
 */
export function sharedSecretMac(
  secret: string,
  fields: { nonce: string; username: string; password: string; admin: boolean; userType?: string | null },
): string {
  const hmac = createHmac('sha1', Buffer.from(secret, 'utf8'));
  hmac.update(fields.nonce).update('\x00').update(fields.username).update('\x00').update(fields.password);
  hmac.update('\x00').update(fields.admin ? 'admin' : 'notadmin');
  if (fields.userType) hmac.update('\x00').update(fields.userType);
  return hmac.digest('hex');
}

function constantTimeEqual(a: string, b: string): boolean {
  const left = Buffer.from(a);
  const right = Buffer.from(b);
  return left.length === right.length && timingSafeEqual(left, right);
}

function requireString(value: unknown, name: string, invalid: string): string {
  if (value === undefined) throw new MatrixError('M_BAD_JSON', `${name} must be specified`);
  if (typeof value !== 'string' || value.length > MAX_PASSWORD_LENGTH || value.includes('\x00')) {
    throw new MatrixError('M_UNKNOWN', invalid);
  }
  return value;
}
