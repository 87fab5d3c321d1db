/**
 * User-interactive authentication for a logged-in user's dangerous requests (deleting devices,
 * changing the password, deactivating the account): the user proves again that they hold the
 * account's password (`m.login.password`, the one stage this server offers, as a Synapse without
 * SSO or e-mail does). A session belongs to one user and one operation, fixed by its first request,
 * as the spec requires: it cannot be used to authorise anything else.
 */
import { randomBytes } from 'node:crypto';
import type { Clock } from '../core/clock.js';
import { MatrixError } from '../core/errors.js';
import type { Limiters } from '../ratelimit/limiters.js';
import type { Storage } from '../storage/index.js';
import type { PasswordHasher } from './passwords.js';
import { resolveLocalUserId } from './user-ids.js';

export const PASSWORD_STAGE = 'm.login.password';
const SESSION_LIFETIME_MS = 15 * 60_000;
/** Sessions held at once; the oldest is forgotten first. */
const MAX_SESSIONS = 10_000;

/** The `auth` object of a request, as clients send it. */
export interface UiaAuth {
  type?: string | undefined;
  session?: string | undefined;
  identifier?: { type?: string | undefined; user?: string | undefined } | undefined;
  /** The legacy form of `identifier`. */
  user?: string | undefined;
  password?: string | undefined;
}

/** Not yet authorised: the 401 body to send, which starts or continues the session. */
export interface UiaChallenge {
  status: 401;
  body: Record<string, unknown>;
}

interface Session {
  userId: string;
  operation: string;
  createdAt: number;
  completed: boolean;
}

export class PasswordAuth {
  /** Map order is creation order: the oldest are forgotten first. */
  private readonly sessions = new Map<string, Session>();

  constructor(
    private readonly storage: Storage,
    private readonly hasher: PasswordHasher,
    private readonly clock: Clock,
    private readonly limiters: Limiters,
    private readonly serverName: string,
  ) {}

  /**
   * Undefined when `userId` has proved, in this session, that it holds the password, for exactly
   * `operation` (a description of the request: method, path and what it acts on); otherwise the
   * challenge to answer with.
   */
  async authorise(userId: string, operation: string, auth: UiaAuth | undefined): Promise<UiaChallenge | undefined> {
    const now = this.clock.now();
    const id = auth?.session;
    let session = id !== undefined ? this.sessions.get(id) : undefined;
    if (session && now - session.createdAt > SESSION_LIFETIME_MS) {
      this.sessions.delete(id!);
      session = undefined;
    }
    if (id !== undefined && !session) throw new MatrixError('M_UNKNOWN', 'Unknown session ID', { status: 400 });
    if (session && (session.userId !== userId || session.operation !== operation)) {
      throw new MatrixError('M_FORBIDDEN', 'Requested operation has changed during the UI authentication session.');
    }
    if (session?.completed) return undefined;
    const sessionId = id ?? this.start(userId, operation, now);
    if (!auth || auth.type === undefined) return this.challenge(sessionId);
    if (auth.type !== PASSWORD_STAGE) throw new MatrixError('M_UNRECOGNIZED', `Unrecognised login type ${auth.type}; this server offers ${PASSWORD_STAGE}`, { status: 400 });

    const named = auth.identifier?.user ?? auth.user;
    if (named !== undefined && resolveLocalUserId(named, this.serverName) !== userId) {
      throw new MatrixError('M_FORBIDDEN', 'The user in the auth does not match the user making the request.');
    }
    // Guesses are limited as logins are: per account, counted before the password is checked.
    this.limiters.loginFailed.enforce(userId);
    const user = await this.storage.users.get(userId);
    if (!user || !(await this.hasher.verify(user.password_hash, auth.password ?? ''))) {
      return this.challenge(sessionId, { errcode: 'M_FORBIDDEN', error: 'Invalid password' });
    }
    this.limiters.loginFailed.reset(userId);
    this.sessions.get(sessionId)!.completed = true;
    return undefined;
  }

  private start(userId: string, operation: string, now: number): string {
    for (const [key, old] of this.sessions) {
      if (now - old.createdAt <= SESSION_LIFETIME_MS && this.sessions.size < MAX_SESSIONS) break;
      this.sessions.delete(key);
    }
    const id = randomBytes(18).toString('base64url');
    this.sessions.set(id, { userId, operation, createdAt: now, completed: false });
    return id;
  }

  private challenge(session: string, error?: { errcode: string; error: string }): UiaChallenge {
    return { status: 401, body: { ...error, session, flows: [{ stages: [PASSWORD_STAGE] }], params: {}, ...(error ? { completed: [] } : {}) } };
  }
}
