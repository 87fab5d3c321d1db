/**
 * The bot portal: people sign in with the organisation's OpenID Connect provider and make and
 * look after their own bots. This is the portal's logic; its pages and routes are in
 * `http/routes/portal.ts` and `portal/pages.ts`.
 */
import { randomBytes } from 'node:crypto';
import type { Clock } from '../core/clock.js';
import { MatrixError, rateLimitedError } from '../core/errors.js';
import { ConfigError, type PortalConfig } from '../config/index.js';
import { RateLimiter } from '../ratelimit/rate-limiter.js';
import { hashToken } from '../users/secrets.js';
import { userIdFor } from '../users/user-ids.js';
import type { OwnedBotRow, Storage } from '../storage/index.js';
import type { AccountService, BotCredentials } from '../users/account-service.js';
import { BotNames } from './bot-names.js';
import { BotOwnership, MAX_DESCRIPTION_LENGTH, MAX_DISPLAYNAME_LENGTH, tooManyBotsError } from './bot-ownership.js';
import { meetsRequirements, personIdFrom, renderTemplate, templateProblem, type Claims } from './claims.js';
import { OidcProvider, type PendingSignIn } from './oidc.js';
import { PortalSessions, type PortalSession } from './sessions.js';

export type { PortalSession } from './sessions.js';
export type { PendingSignIn } from './oidc.js';
export type { OwnedBotRow };

/** What a person typed into the form for a new bot. */
export interface BotForm {
  username: string;
  displayname: string;
  description: string;
}

/** A sign-in the portal turned down, with the words to show. */
export interface RefusedSignIn {
  refused: 'requirements' | 'mapping' | 'identity';
  reason: string;
}

/** How long a person may take at the provider's sign-in page. */
export const SIGN_IN_LIFETIME_MS = 10 * 60_000;

/** A callback whose sign-in was not started here, has finished already, or took too long. */
class SignInNotPending extends Error {
  override name = 'SignInNotPending';
}

/** Which form field a person's mistake is about (the page shows the message beside it). */
export type FormField = keyof BotForm;

export class BotPortal {
  readonly providers: ReadonlyMap<string, OidcProvider>;
  readonly sessions: PortalSessions;
  readonly names: BotNames;
  private readonly signInLimiter: RateLimiter;
  private readonly creationLimiter: RateLimiter;

  constructor(
    readonly config: PortalConfig,
    private readonly storage: Storage,
    private readonly clock: Clock,
    private readonly accounts: AccountService,
    readonly bots: BotOwnership,
    rateLimiting: boolean,
  ) {
    for (const [index, provider] of config.oidc_providers.entries()) {
      const mapping = provider.user_mapping_provider.config;
      for (const [key, template] of [['localpart_template', mapping.localpart_template], ['display_name_template', mapping.display_name_template]] as const) {
        const problem = template === undefined ? null : templateProblem(template);
        if (problem) throw new ConfigError(`invalid configuration:\n  portal.oidc_providers[${index}].user_mapping_provider.config.${key}: ${problem}`);
      }
    }
    this.providers = new Map(config.oidc_providers.map((provider) => [provider.idp_id, new OidcProvider(provider)]));
    this.sessions = new PortalSessions(storage, clock, config.session_lifetime, config.session_idle_timeout);
    this.names = new BotNames({ pattern: config.bot_username_pattern, reserved: config.reserved_usernames });
    this.signInLimiter = new RateLimiter(config.rc_sign_in, clock, rateLimiting);
    this.creationLimiter = new RateLimiter(config.rc_bot_creation, clock, rateLimiting);
  }

  /** The secret the portal's cookies are signed with: the configured one, or one kept in the database. */
  async cookieSecret(): Promise<string> {
    return this.config.cookie_secret ?? this.storage.portal.secret('cookie-signing', () => randomBytes(32).toString('base64url'));
  }

  provider(idp: string): OidcProvider {
    const provider = this.providers.get(idp);
    if (!provider) throw new MatrixError('M_NOT_FOUND', 'There is no such way to sign in.');
    return provider;
  }

  /** Sign-ins started per client address (coming back is bound to a start by its state). */
  limitSignIn(address: string): void {
    const decision = this.signInLimiter.check(address);
    if (!decision.allowed) throw rateLimitedError(decision.retryAfterMs);
  }

  /** Where to send the browser to sign in, and what to keep until it returns. */
  async startSignIn(idp: string, redirectUri: string, address: string): Promise<{ url: string; pending: PendingSignIn }> {
    this.limitSignIn(address);
    const started = await this.provider(idp).start(redirectUri);
    // The state is also kept here, so that its callback can finish once only (see finishSignIn).
    const now = this.clock.now();
    await this.storage.portal.insertSignIn(hashToken(started.pending.state), idp, now, now + SIGN_IN_LIFETIME_MS);
    return started;
  }

  /** Back from the provider: a new session's id, or why the person may not sign in. */
  async finishSignIn(pending: PendingSignIn, callbackUrl: URL): Promise<{ sessionId: string } | RefusedSignIn> {
    const provider = this.provider(pending.idp);
    // Taken before the provider is asked: a callback replayed with a copy of the browser's cookie
    // is refused here, whatever the provider would say of its code, and costs the provider nothing.
    if (!(await this.storage.portal.takeSignIn(hashToken(pending.state), pending.idp, this.clock.now()))) {
      throw new SignInNotPending('the sign-in was not started here, has finished already, or took too long');
    }
    const signedIn = await provider.finish(callbackUrl, pending);
    const claims: Claims = signedIn.claims;
    if (!meetsRequirements(claims, provider.config.attribute_requirements)) {
      return { refused: 'requirements', reason: 'Your account is not among those allowed to use this page.' };
    }
    const mapping = provider.config.user_mapping_provider.config;
    const person = personIdFrom(claims, mapping.localpart_template, this.config.people_server_name);
    if (!person.ok) return { refused: 'mapping', reason: `We could not tell who you are: ${person.reason}.` };
    // Who the person is rests on the provider's stable subject, not only on the user name the
    // template makes (names are given again and renamed): see BotOwnership.bindIdentity.
    const subject = subjectOf(claims, mapping.subject_claim);
    if (subject === undefined) return { refused: 'mapping', reason: `We could not tell who you are: your sign-in has no ${mapping.subject_claim}.` };
    const identity = await this.bots.bindIdentity(provider.id, subject, person.userId);
    if (!identity.ok) {
      return {
        refused: 'identity',
        reason: `Your account is not the one that signed in here before as ${person.userId}${identity.boundPerson && identity.boundPerson !== person.userId ? ` (it signed in as ${identity.boundPerson})` : ''}, so it cannot use that person's bots. If your account was renamed or made again, ask the people who run this service.`,
      };
    }
    const displayName = mapping.display_name_template ? renderTemplate(mapping.display_name_template, claims).trim().slice(0, 200) || null : null;
    const requirements = this.config.creator_attribute_requirements;
    const sessionId = await this.sessions.create({
      person: person.userId,
      displayName,
      idp: provider.id,
      // The provider's own subject: back-channel logout tokens name it.
      sub: signedIn.sub,
      sid: signedIn.sid,
      idToken: signedIn.idToken,
      attributesGrant: requirements !== null && meetsRequirements(claims, requirements),
    });
    return { sessionId };
  }

  /** The right to create bots: the provider's attributes at sign-in, or an operator's grant (read now). */
  async mayCreate(session: PortalSession): Promise<boolean> {
    return session.attributesGrant || (await this.bots.hasGrant(session.person));
  }

  /** The person's bots, newest first, deactivated ones last. */
  botsOf(session: PortalSession): Promise<OwnedBotRow[]> {
    return this.bots.botsOf(session.person);
  }

  async bot(session: PortalSession, localpart: string): Promise<OwnedBotRow> {
    const bot = await this.bots.ownedBot(session.person, this.accounts.userIdFor(localpart));
    if (!bot) throw new MatrixError('M_NOT_FOUND', 'There is no such bot among yours.');
    return bot;
  }

  /** How many more bots the person may make. */
  async botsLeft(session: PortalSession): Promise<number> {
    return Math.max(0, this.config.max_bots_per_owner - (await this.bots.countActiveBotsOf(session.person)));
  }

  /** Makes a bot for the signed-in person. Mistakes in the form come back as MatrixErrors naming the field. */
  async createBot(session: PortalSession, form: BotForm): Promise<BotCredentials> {
    if (!(await this.mayCreate(session))) throw new MatrixError('M_FORBIDDEN', 'You do not have the right to create bots.');
    const username = form.username.trim();
    const displayname = form.displayname.trim() || username;
    const description = form.description.trim();
    // Every field's mistake at once, so the person fixes them in one go.
    const problems: Partial<Record<FormField, string>> = {};
    const nameProblem = this.names.problem(username);
    if (nameProblem) problems.username = nameProblem;
    if (displayname.length > MAX_DISPLAYNAME_LENGTH) problems.displayname = `The display name is too long: at most ${MAX_DISPLAYNAME_LENGTH} characters.`;
    if (description.length === 0) problems.description = 'Say in a few words what the bot is for.';
    if (description.length > MAX_DESCRIPTION_LENGTH) problems.description = `The description is too long: at most ${MAX_DESCRIPTION_LENGTH} characters.`;
    if (Object.keys(problems).length > 0) throw formError(problems);
    // Said early to spare the person a rate-limit token; the insert checks again (createOwned).
    if ((await this.botsLeft(session)) === 0) throw tooManyBotsError(this.config.max_bots_per_owner);
    this.limitCreation(session.person);
    // A bot must not pass for a person: not the user name of anyone the portal knows.
    if (await this.bots.isKnownPerson(userIdFor(username, this.config.people_server_name))) {
      throw fieldError('username', 'This is the user name of a person. Choose a name that says it is a bot.');
    }
    try {
      await this.accounts.assertAvailable(username);
    } catch (err) {
      if (err instanceof MatrixError && err.errcode === 'M_USER_IN_USE') throw fieldError('username', 'This user name is taken. Choose another one.');
      if (err instanceof MatrixError) throw fieldError('username', 'This user name cannot be used. Choose another one.');
      throw err;
    }
    try {
      return await this.bots.createOwned({ owner: session.person, localpart: username, displayname, description }, session.person, { maxActiveBots: this.config.max_bots_per_owner });
    } catch (err) {
      // Someone else took the name between the check and the insert.
      if (err instanceof MatrixError && err.errcode === 'M_USER_IN_USE') throw fieldError('username', 'This user name is taken. Choose another one.');
      throw err;
    }
  }

  /** A new secret for one of the person's bots (its sessions end). Needs the right to create bots. */
  async rotate(session: PortalSession, localpart: string): Promise<BotCredentials> {
    if (!(await this.mayCreate(session))) throw new MatrixError('M_FORBIDDEN', 'You no longer have the right to make bot secrets. You can still deactivate your bots.');
    this.limitCreation(session.person);
    return this.bots.rotate(this.accounts.userIdFor(localpart), session.person, session.person);
  }

  /** Deactivates one of the person's bots (allowed even after the right to create was taken back). */
  async deactivate(session: PortalSession, localpart: string): Promise<void> {
    await this.bots.deactivate(this.accounts.userIdFor(localpart), session.person, { owner: session.person });
  }

  /** Signs out here; the provider's logout page to go on to, when it has one. */
  async signOut(session: PortalSession, postLogoutRedirectUri: string): Promise<string | undefined> {
    await this.sessions.end(session.idHash);
    return this.providers.get(session.idp)?.endSessionUrl(session.idToken, postLogoutRedirectUri);
  }

  /** The provider says a session ended there: its sessions here end too. False when turned off. */
  async backchannelLogout(idp: string, logoutToken: string): Promise<boolean> {
    const provider = this.provider(idp);
    if (!provider.config.backchannel_logout_enabled) return false;
    const { sid, sub } = await provider.verifyLogoutToken(logoutToken);
    await this.sessions.endAt(idp, { sid, sub });
    return true;
  }

  private limitCreation(person: string): void {
    const decision = this.creationLimiter.check(person);
    if (!decision.allowed) throw rateLimitedError(decision.retryAfterMs);
  }
}

/** The provider's stable subject for a person (a string or number claim, 1 to 255 characters). */
function subjectOf(claims: Claims, claim: string): string | undefined {
  const value = Object.hasOwn(claims, claim) ? claims[claim] : undefined;
  const text = typeof value === 'string' ? value : typeof value === 'number' ? String(value) : undefined;
  return text !== undefined && text.length > 0 && text.length <= 255 ? text : undefined;
}

function fieldError(field: FormField, message: string): MatrixError {
  return formError({ [field]: message });
}

/** Mistakes in the form, by field (`extra.fields`); the message is the first of them. */
function formError(problems: Partial<Record<FormField, string>>): MatrixError {
  return new MatrixError('M_INVALID_PARAM', Object.values(problems)[0] ?? 'The form is not filled in as expected.', { extra: { fields: problems } });
}
