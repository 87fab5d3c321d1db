/**
 * The portal's sign-in sessions. They live in the database, so they survive a restart and every
 * process of a cluster sees them, and back-channel logout can end them by the provider's session
 * id. The browser holds only a random id (in a signed cookie); the database only its SHA-256.
 * A session ends at a fixed lifetime, or sooner after a while without use.
 */
import { randomBytes } from 'node:crypto';
import type { Clock } from '../core/clock.js';
import type { PortalSessionRow, Storage } from '../storage/index.js';
import { hashToken } from '../users/secrets.js';

export interface PortalSession {
  idHash: string;
  person: string;
  displayName: string | null;
  idp: string;
  /** The provider's attributes gave the right to create bots at sign-in. */
  attributesGrant: boolean;
  idToken: string | null;
  expiresTs: number;
}

export interface NewPortalSession {
  person: string;
  displayName: string | null;
  idp: string;
  sub: string;
  sid: string | undefined;
  idToken: string | undefined;
  attributesGrant: boolean;
}

/** A person keeps at most this many sessions (browsers, devices); older ones end. */
const MAX_SESSIONS_PER_PERSON = 10;
/** Last use is written at most this often (idle expiry is counted in minutes). */
const TOUCH_INTERVAL_MS = 15_000;

export class PortalSessions {
  constructor(
    private readonly storage: Storage,
    private readonly clock: Clock,
    private readonly lifetimeMs: number,
    private readonly idleMs: number,
  ) {}

  /** Starts a session; returns the id for the cookie (never stored). */
  async create(session: NewPortalSession): Promise<string> {
    const id = randomBytes(32).toString('base64url');
    const now = this.clock.now();
    await this.storage.portal.pruneSessions(now, session.person, MAX_SESSIONS_PER_PERSON - 1);
    await this.storage.portal.insertSession({
      id_hash: hashToken(id),
      owner_id: session.person,
      display_name: session.displayName,
      idp_id: session.idp,
      sub: session.sub,
      sid: session.sid ?? null,
      id_token: session.idToken ?? null,
      attributes_grant: session.attributesGrant ? 1 : 0,
      created_ts: now,
      last_seen_ts: now,
      expires_ts: now + this.lifetimeMs,
    });
    return id;
  }

  /** The live session the cookie's id names, or undefined (ended, expired, idle too long, unknown). */
  async resolve(id: string): Promise<PortalSession | undefined> {
    const idHash = hashToken(id);
    const row = await this.storage.portal.getSession(idHash);
    if (!row) return undefined;
    const now = this.clock.now();
    if (row.expires_ts <= now || row.last_seen_ts + this.idleMs <= now) {
      await this.storage.portal.deleteSession(idHash);
      return undefined;
    }
    if (now - row.last_seen_ts >= TOUCH_INTERVAL_MS) await this.storage.portal.touchSession(idHash, now);
    return sessionOf(row);
  }

  /** Signs out: the session is gone; what it held (the ID token for the provider's logout) is returned. */
  async end(idHash: string): Promise<void> {
    await this.storage.portal.deleteSession(idHash);
  }

  /** Back-channel logout: every session of that provider session (or person at the provider). */
  endAt(idp: string, by: { sid?: string | undefined; sub?: string | undefined }): Promise<number> {
    return this.storage.portal.deleteSessionsAt(idp, by);
  }
}

function sessionOf(row: PortalSessionRow): PortalSession {
  return {
    idHash: row.id_hash,
    person: row.owner_id,
    displayName: row.display_name,
    idp: row.idp_id,
    attributesGrant: row.attributes_grant === 1,
    idToken: row.id_token,
    expiresTs: row.expires_ts,
  };
}
