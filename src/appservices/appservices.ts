/**
 * Application services on this server (the spec's Application Service API, Synapse's
 * `app_service_config_files`): what they may do through the client API (register users in their
 * namespaces, ping), what their exclusive namespaces keep from everyone else, and asking them
 * about users and aliases of their namespaces that do not exist yet.
 */
import { MatrixError } from '../core/errors.js';
import type { AccountService } from '../users/account-service.js';
import type { Requester, SessionOptions, SessionService } from '../users/session-service.js';
import { resolveLocalUserId } from '../users/user-ids.js';
import { AppServiceRequestError, type AppServiceClient } from './appservice-client.js';
import type { AppServiceSender } from './appservice-sender.js';
import type { AppService, AppServiceRegistry } from './registry.js';

export interface AppServiceRegistration {
  username: string | undefined;
  inhibitLogin: boolean;
  deviceId: string | undefined;
  initialDeviceDisplayName: string | undefined;
  refreshable: boolean;
}

export class AppServices {
  constructor(
    readonly registry: AppServiceRegistry,
    readonly sender: AppServiceSender,
    private readonly client: AppServiceClient,
    private readonly accounts: AccountService,
    private readonly sessions: SessionService,
    private readonly serverName: string,
  ) {}

  /** At start: every appservice's sender exists, as a service user (no password, no login). */
  async ensureSenders(): Promise<void> {
    for (const service of this.registry.all) {
      if (!(await this.accounts.getUser(service.sender))) await this.accounts.createUser({ localpart: service.senderLocalpart, service: true });
    }
  }

  /** `POST /register` with `type: m.login.application_service`: a user of the appservice's namespaces, without a password. */
  async register(requester: Requester | null, request: AppServiceRegistration): Promise<Record<string, unknown>> {
    const service = requester?.appserviceId !== undefined ? this.registry.byId(requester.appserviceId) : undefined;
    if (!service) throw new MatrixError('M_MISSING_TOKEN', 'Missing or invalid application service token', { status: 401 });
    if (request.username === undefined) throw new MatrixError('M_MISSING_PARAM', 'An application service registration needs a username', { status: 400 });
    const localpart = request.username.startsWith('@') ? request.username.slice(1).split(':')[0]! : request.username;
    const userId = this.accounts.userIdFor(localpart.toLowerCase());
    if (!this.registry.isInterestedInUser(service, userId)) {
      throw new MatrixError('M_EXCLUSIVE', 'Invalid user localpart for this application service.', { status: 400 });
    }
    // SDKs register the sender too, and take "in use" as "already there" (Synapse answers so).
    if (userId === service.sender) throw new MatrixError('M_USER_IN_USE', 'User ID already taken.');
    const other = this.registry.exclusiveOwnerOfUser(userId);
    if (other && other.id !== service.id) throw new MatrixError('M_EXCLUSIVE', 'This user ID is reserved by another application service.', { status: 400 });
    await this.accounts.createUser({ localpart: localpart.toLowerCase(), appservice: true });
    const account = { user_id: userId, home_server: this.serverName };
    if (request.inhibitLogin) return account;
    const options: SessionOptions = { deviceId: request.deviceId, initialDeviceDisplayName: request.initialDeviceDisplayName, refreshable: request.refreshable };
    return { ...(await this.sessions.createSession(userId, options)), ...account };
  }

  /**
   * `POST /login` with `type: m.login.application_service` (spec v1.2): a device and access token
   * for a user of the appservice's namespaces (its sender too), made with its as_token. Bridges
   * use it to give a user a device of its own, for end-to-end encryption.
   */
  async login(requester: Requester | null, user: string, options: SessionOptions): Promise<Record<string, unknown>> {
    const service = requester?.appserviceId !== undefined ? this.registry.byId(requester.appserviceId) : undefined;
    if (!service) throw new MatrixError('M_MISSING_TOKEN', 'Missing or invalid application service token', { status: 401 });
    const userId = resolveLocalUserId(user, this.serverName);
    if (userId === null || (userId !== service.sender && !this.registry.isInterestedInUser(service, userId))) {
      throw new MatrixError('M_FORBIDDEN', 'This user is not in the application service’s namespaces', { status: 403 });
    }
    const account = await this.accounts.getUser(userId);
    if (!account) throw new MatrixError('M_FORBIDDEN', 'Invalid username or password', { status: 403 });
    if (account.deactivated) throw new MatrixError('M_USER_DEACTIVATED', 'This account has been deactivated');
    return { ...(await this.sessions.createSession(userId, options)), home_server: this.serverName };
  }

  /** `POST /_matrix/client/v1/appservice/{appserviceId}/ping`: only by that appservice. */
  async ping(requester: Requester, appserviceId: string, transactionId: string | undefined): Promise<{ duration_ms: number }> {
    const service = this.registry.byId(appserviceId);
    if (!service || requester.appserviceId !== service.id) throw new MatrixError('M_FORBIDDEN', 'Provided access token is not valid for this application service', { status: 403 });
    if (service.url === null) throw new MatrixError('M_URL_NOT_SET', 'Application service URL is not set', { status: 400 });
    try {
      return { duration_ms: await this.client.ping(service, transactionId) };
    } catch (err) {
      if (!(err instanceof AppServiceRequestError)) throw err;
      if (err.kind === 'timeout') throw new MatrixError('M_CONNECTION_TIMEOUT', 'Connection to application service timed out', { status: 504 });
      if (err.kind === 'connection') throw new MatrixError('M_CONNECTION_FAILED', 'Failed to connect to application service', { status: 502 });
      throw new MatrixError('M_BAD_STATUS', 'Application service returned an error', { status: 502, extra: { status: err.status, body: err.body } });
    }
  }

  /** Aliases in an appservice's exclusive namespace are that appservice's alone. */
  assertMayClaimAlias(requester: Requester, alias: string): void {
    const owner = this.registry.exclusiveOwnerOfAlias(alias);
    if (owner && owner.id !== requester.appserviceId) throw new MatrixError('M_EXCLUSIVE', 'Room alias is reserved by an application service', { status: 400 });
  }

  /** An unknown local alias: asks the appservices whose namespaces hold it; true when one created it. */
  async askAboutAlias(alias: string): Promise<boolean> {
    return this.askAny(this.registry.servicesForAlias(alias), (service) => this.client.queryAlias(service, alias));
  }

  /** An unknown local user: asks the appservices whose namespaces hold them; true when one created them. */
  async askAboutUser(userId: string): Promise<boolean> {
    if (!userId.endsWith(`:${this.serverName}`)) return false;
    return this.askAny(this.registry.servicesForUser(userId), (service) => this.client.queryUser(service, userId));
  }

  private async askAny(services: readonly AppService[], ask: (service: AppService) => Promise<boolean>): Promise<boolean> {
    for (const service of services) if (await ask(service)) return true;
    return false;
  }
}
