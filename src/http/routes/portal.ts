/**
 * The bot portal's pages under `/_bot_homeserver/portal/` (docs/portal.md). Routes read the form,
 * call the portal (`portal/portal.ts`) and render a page (`portal/pages.ts`).
 *
 * Security: the session id travels in a signed, HttpOnly, SameSite=Strict cookie (always Secure
 * when public_baseurl is https://; otherwise when the request came over HTTPS); every form carries a CSRF
 * token bound to the session; helmet sets a strict content security policy and the other headers.
 * The sign-in round trip keeps state, nonce and PKCE verifier in a short-lived signed cookie that
 * only the callback sees (SameSite=Lax: the provider's redirect back is a cross-site navigation).
 */
import cookie from '@fastify/cookie';
import csrf from '@fastify/csrf-protection';
import formbody from '@fastify/formbody';
import helmet from '@fastify/helmet';
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { MatrixError } from '../../core/errors.js';
import { PORTAL_CSS, PORTAL_JS } from '../../portal/assets.js';
import { ProviderError } from '../../portal/oidc.js';
import { botPage, credentialsPage, homePage, messagePage, newBotPage, PORTAL_PREFIX, signInPage, type BotSummary, type FieldErrors, type Viewer } from '../../portal/pages.js';
import { SIGN_IN_LIFETIME_MS, type BotPortal, type OwnedBotRow, type PendingSignIn, type PortalSession } from '../../portal/portal.js';
import type { ServerInfo } from '../../server-info.js';
import { escapeHtml } from '../../portal/html.js';

export { PORTAL_PREFIX };

const SESSION_COOKIE = 'bhs_portal_session';
const SIGN_IN_COOKIE = 'bhs_portal_sign_in';
const CSRF_COOKIE = 'bhs_portal_csrf';
/** The largest form the portal reads (its biggest has three short fields). */
const FORM_BODY_LIMIT = 16_384;

declare module 'fastify' {
  interface FastifyRequest {
    /** The portal's signed-in person, set by the portal's onRequest hook. */
    portalSession: PortalSession | null;
    /** A session cookie came but named no live session (ended, expired, idle too long). */
    portalSessionEnded: boolean;
  }
}

const BotParams = Type.Object({ localpart: Type.String({ minLength: 1, maxLength: 255 }) });
const NewBotBody = Type.Object({
  _csrf: Type.Optional(Type.String()),
  username: Type.String({ maxLength: 255 }),
  displayname: Type.Optional(Type.String({ maxLength: 1000 })),
  description: Type.Optional(Type.String({ maxLength: 5000 })),
});
const CsrfOnlyBody = Type.Object({ _csrf: Type.Optional(Type.String()), confirm: Type.Optional(Type.String()) });

export function portalRoutes(portal: BotPortal, server: ServerInfo): FastifyPluginAsyncTypebox {
  return async (app) => {
    const secret = await portal.cookieSecret();
    const publicUrl = (path: string) => `${server.publicBaseUrl}${PORTAL_PREFIX.slice(1)}${path}`;
    const redirectUri = () => publicUrl('/callback');
    // Served at an https:// address, the cookies are always Secure: a request that reached us in
    // plain HTTP (a proxy that does not say X-Forwarded-Proto, someone typing http://) must not
    // get a session cookie the browser would then also send unencrypted. At an http:// address
    // (a lab), Secure follows the request's protocol.
    const secure: boolean | 'auto' = server.publicBaseUrl.startsWith('https:') ? true : 'auto';

    await app.register(cookie, { secret, hook: 'onRequest' });
    await app.register(formbody, { bodyLimit: FORM_BODY_LIMIT });
    await app.register(helmet, {
      contentSecurityPolicy: {
        useDefaults: false,
        directives: {
          defaultSrc: ["'none'"],
          styleSrc: ["'self'"],
          scriptSrc: ["'self'"],
          imgSrc: ["'self'"],
          connectSrc: ["'self'"],
          formAction: ["'self'"],
          frameAncestors: ["'none'"],
          baseUri: ["'none'"],
        },
      },
      referrerPolicy: { policy: 'no-referrer' },
      crossOriginEmbedderPolicy: false,
    });
    await app.register(csrf, {
      sessionPlugin: '@fastify/cookie',
      cookieKey: CSRF_COOKIE,
      cookieOpts: { path: PORTAL_PREFIX, sameSite: 'strict', httpOnly: true, signed: true, secure },
      // A token is good only with the session it was made for.
      getUserInfo: (request: FastifyRequest) => request.portalSession?.idHash ?? 'signed-out',
      csrfOpts: { hmacKey: secret },
    });

    app.decorateRequest('portalSession', null);
    app.decorateRequest('portalSessionEnded', false);
    app.addHook('onRequest', async (request) => {
      const raw = request.cookies[SESSION_COOKIE];
      if (raw === undefined) return;
      const unsigned = request.unsignCookie(raw);
      request.portalSession = unsigned.valid && unsigned.value ? ((await portal.sessions.resolve(unsigned.value)) ?? null) : null;
      request.portalSessionEnded = request.portalSession === null;
    });
    /** Every form post proves it came from our page (before its body is even validated). */
    const checkCsrf = app.csrfProtection.bind(app);

    app.setErrorHandler((error: FastifyError, request, reply) => renderError(error, request, reply));
    app.setNotFoundHandler((request, reply) => {
      reply.code(404).type('text/html').send(messagePage({ title: 'Page not found', paragraphs: ['There is no such page here.'], viewer: viewerOf(request, reply) }));
    });

    const viewerOf = (request: FastifyRequest, reply: FastifyReply): Viewer | undefined => {
      const session = request.portalSession;
      return session ? { person: session.person, displayName: session.displayName, csrf: reply.generateCsrf({ userInfo: session.idHash } as never) } : undefined;
    };
    /** The signed-in person, or a way back to signing in (the session ended or never was). */
    const requireSession = async (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
      if (request.portalSession) return;
      if (request.portalSessionEnded) reply.clearCookie(SESSION_COOKIE, { path: PORTAL_PREFIX });
      await reply.redirect(`${PORTAL_PREFIX}/${request.portalSessionEnded ? '?ended=1' : ''}`, 303);
    };
    const html = (reply: FastifyReply, page: string, status = 200) => reply.code(status).type('text/html; charset=utf-8').send(page);
    const signedIn = (request: FastifyRequest): PortalSession => {
      if (!request.portalSession) throw new MatrixError('M_FORBIDDEN', 'Sign in first.');
      return request.portalSession;
    };

    function renderError(error: FastifyError, request: FastifyRequest, reply: FastifyReply) {
      const viewer = viewerOf(request, reply);
      if (error.code === 'FST_CSRF_INVALID_TOKEN' || error.code === 'FST_CSRF_MISSING_SECRET') {
        request.log.warn({ path: request.routeOptions.url }, 'portal: form without a valid CSRF token refused');
        return html(reply, messagePage({ title: 'This form has expired', paragraphs: ['The form was too old, or it did not come from this site. Go back, reload the page and try again.'], viewer, signInAgain: !viewer }), 403);
      }
      if (error instanceof ProviderError) {
        request.log.warn({ err: { message: error.message } }, 'portal: the sign-in provider failed');
        return html(reply, messagePage({ title: 'Sign-in is not available', paragraphs: ['We could not reach the sign-in service. Try again in a few minutes.'], signInAgain: true }), 502);
      }
      if (error instanceof MatrixError) {
        if (error.errcode === 'M_LIMIT_EXCEEDED') {
          reply.headers(error.headers);
          return html(reply, messagePage({ title: 'Too many attempts', paragraphs: ['Wait a minute, then try again.'], viewer }), 429);
        }
        const title = error.status === 404 ? 'Not found' : error.status === 403 ? 'Not allowed' : 'That did not work';
        return html(reply, messagePage({ title, paragraphs: [error.message], viewer }), error.status);
      }
      if (error.validation || error.code === 'FST_ERR_CTP_BODY_TOO_LARGE' || error.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') {
        return html(reply, messagePage({ title: 'That did not work', paragraphs: ['The form was not filled in as expected. Go back and try again.'], viewer }), error.statusCode === 413 ? 413 : 400);
      }
      request.log.error({ err: error }, 'portal: unexpected error');
      return html(reply, messagePage({ title: 'Something went wrong', paragraphs: ['Something went wrong on our side. Try again later.'], viewer }), 500);
    }

    /** GET /_bot_homeserver/portal/assets/portal.css and portal.js: cached, they change only with a release. */
    app.get('/assets/portal.css', async (_request, reply) => reply.header('Cache-Control', 'public, max-age=3600').type('text/css; charset=utf-8').send(PORTAL_CSS));
    app.get('/assets/portal.js', async (_request, reply) => reply.header('Cache-Control', 'public, max-age=3600').type('text/javascript; charset=utf-8').send(PORTAL_JS));

    /** GET /_bot_homeserver/portal/: the sign-in page, or the person's bots. */
    app.get('/', async (request, reply) => {
      const session = request.portalSession;
      if (!session) {
        if (request.portalSessionEnded) reply.clearCookie(SESSION_COOKIE, { path: PORTAL_PREFIX });
        const query = request.query as Record<string, string | undefined>;
        const message = request.portalSessionEnded || query.ended ? 'Your session has ended. Please sign in again.' : query.signed_out ? 'You have signed out.' : undefined;
        return html(reply, signInPage({ providers: [...portal.providers.values()].map((p) => ({ id: p.id, name: p.name })), message }));
      }
      const [bots, mayCreate, botsLeft] = await Promise.all([portal.botsOf(session), portal.mayCreate(session), portal.botsLeft(session)]);
      const done = (request.query as Record<string, string | undefined>).done;
      return html(
        reply,
        homePage({
          viewer: viewerOf(request, reply)!,
          bots: bots.map(summary),
          mayCreate,
          botsLeft,
          maxBots: portal.config.max_bots_per_owner,
          requestAccessUrl: portal.config.request_access_url,
          message: done === 'deactivated' ? 'The bot has been deactivated.' : undefined,
        }),
      );
    });

    /** GET /_bot_homeserver/portal/sign-in/<idp>: off to the provider, with state, nonce and PKCE. */
    app.get('/sign-in/:idp', { schema: { params: Type.Object({ idp: Type.String({ maxLength: 64 }) }) } }, async (request, reply) => {
      const { url, pending } = await portal.startSignIn(request.params.idp, redirectUri(), request.ip);
      // `previous`: the session this browser has now, ended when the sign-in finishes (the
      // callback may not see it: it comes from the provider, where SameSite=Strict keeps it back).
      const cookie: SignInCookie = { ...pending, ...(request.portalSession ? { previous: request.portalSession.idHash } : {}) };
      reply.setCookie(SIGN_IN_COOKIE, JSON.stringify(cookie), { path: `${PORTAL_PREFIX}/callback`, httpOnly: true, sameSite: 'lax', signed: true, secure, maxAge: SIGN_IN_LIFETIME_MS / 1000 });
      return reply.redirect(url, 303);
    });

    /** GET /_bot_homeserver/portal/callback: back from the provider. */
    app.get('/callback', async (request, reply) => {
      reply.clearCookie(SIGN_IN_COOKIE, { path: `${PORTAL_PREFIX}/callback` });
      const pending = readPending(request);
      const query = request.query as Record<string, string | undefined>;
      if (!pending) {
        return html(reply, messagePage({ title: 'Sign-in did not finish', paragraphs: ['The sign-in took too long, or it was started in another browser. Please try again.'], signInAgain: true }), 400);
      }
      if (query.error !== undefined) {
        return html(reply, messagePage({ title: 'Sign-in did not finish', paragraphs: ['The sign-in was cancelled or refused. You can try again.'], signInAgain: true }), 400);
      }
      const callbackUrl = new URL(redirectUri());
      callbackUrl.search = new URL(request.url, 'http://x').search;
      let result: Awaited<ReturnType<BotPortal['finishSignIn']>>;
      try {
        result = await portal.finishSignIn(pending, callbackUrl);
      } catch (err) {
        if (err instanceof MatrixError) throw err;
        // A wrong state or nonce, a bad ID token, a code already used: never accepted, never detailed.
        request.log.warn({ err: { message: (err as Error).message, code: (err as { code?: unknown }).code } }, 'portal: sign-in refused');
        return html(reply, messagePage({ title: 'Sign-in did not finish', paragraphs: ['We could not confirm your sign-in. Please try again.'], signInAgain: true }), 400);
      }
      if ('refused' in result) {
        const url = portal.config.request_access_url;
        return html(reply, messagePage({ title: 'You cannot use this page', paragraphs: [result.reason], link: url ? { href: url, text: 'Ask for access' } : undefined, signInAgain: false }), 403);
      }
      // A new session id at every sign-in, and the session this browser had before ends: an id
      // planted in the browser beforehand (session fixation) is worth nothing afterwards.
      if (request.portalSession) await portal.sessions.end(request.portalSession.idHash);
      if (pending.previous) await portal.sessions.end(pending.previous);
      reply.setCookie(SESSION_COOKIE, result.sessionId, { path: PORTAL_PREFIX, httpOnly: true, sameSite: 'strict', signed: true, secure });
      // A page of our own, not a redirect: the way here began at the provider (another site),
      // and a SameSite=Strict cookie is sent only once a page of this site moves on.
      const home = `${PORTAL_PREFIX}/`;
      return html(
        reply,
        `<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><meta http-equiv="refresh" content="0;url=${escapeHtml(home)}"><title>Signed in – Bot accounts</title><link rel="stylesheet" href="${PORTAL_PREFIX}/assets/portal.css"></head><body><main class="wrap"><h1>You are signed in</h1><p><a href="${escapeHtml(home)}">Continue to your bots</a></p></main></body></html>\n`,
      );
    });

    /** POST /_bot_homeserver/portal/sign-out: ends the session here, then at the provider when it can. */
    app.post('/sign-out', { onRequest: requireSession, preValidation: checkCsrf, schema: { body: CsrfOnlyBody } }, async (request, reply) => {
      const providerLogout = await portal.signOut(signedIn(request), publicUrl('/?signed_out=1'));
      reply.clearCookie(SESSION_COOKIE, { path: PORTAL_PREFIX });
      if (!providerLogout) return reply.redirect(`${PORTAL_PREFIX}/?signed_out=1`, 303);
      // On to the provider's logout by a page, not a redirect: a form's redirect to another site
      // would need that site in the policy's form-action.
      return html(
        reply,
        `<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><meta http-equiv="refresh" content="0;url=${escapeHtml(providerLogout)}"><title>Signing out – Bot accounts</title><link rel="stylesheet" href="${PORTAL_PREFIX}/assets/portal.css"></head><body><main class="wrap"><h1>You are signed out here</h1><p><a href="${escapeHtml(providerLogout)}">Also sign out of your work account</a></p></main></body></html>\n`,
      );
    });

    /** POST /_bot_homeserver/portal/backchannel-logout/<idp>: the provider ends sessions (logout_token). */
    app.post(
      '/backchannel-logout/:idp',
      { schema: { params: Type.Object({ idp: Type.String({ maxLength: 64 }) }), body: Type.Object({ logout_token: Type.String({ minLength: 1, maxLength: 8192 }) }) } },
      async (request, reply) => {
        reply.header('Cache-Control', 'no-store');
        try {
          if (!(await portal.backchannelLogout(request.params.idp, request.body.logout_token))) return reply.code(404).send({ error: 'back-channel logout is not enabled for this provider' });
        } catch (err) {
          if (err instanceof MatrixError && err.status === 404) return reply.code(404).send({ error: 'unknown provider' });
          request.log.warn({ err: { message: (err as Error).message } }, 'portal: back-channel logout token refused');
          return reply.code(400).send({ error: 'invalid_request' });
        }
        return reply.code(200).send({});
      },
    );

    /** GET /_bot_homeserver/portal/bots/new: the form for a new bot. */
    app.get('/bots/new', { onRequest: requireSession }, async (request, reply) => {
      const session = signedIn(request);
      if (!(await portal.mayCreate(session))) return reply.redirect(`${PORTAL_PREFIX}/`, 303);
      return html(reply, newBotPage({ viewer: viewerOf(request, reply)!, values: { username: '', displayname: '', description: '' }, errors: {}, nameRule: portal.names.describe(), serverName: server.serverName, botsLeft: await portal.botsLeft(session) }));
    });

    /** POST /_bot_homeserver/portal/bots: makes the bot; the secret is shown in this answer only. */
    app.post('/bots', { onRequest: requireSession, preValidation: checkCsrf, schema: { body: NewBotBody } }, async (request, reply) => {
      const session = signedIn(request);
      const values = { username: request.body.username, displayname: request.body.displayname ?? '', description: request.body.description ?? '' };
      try {
        const credentials = await portal.createBot(session, values);
        const localpart = credentials.user_id.slice(1, credentials.user_id.indexOf(':'));
        return html(reply, credentialsPage({ viewer: viewerOf(request, reply)!, userId: credentials.user_id, localpart, displayname: values.displayname.trim() || localpart, secret: credentials.password, serverUrl: server.publicBaseUrl, rotated: false }));
      } catch (err) {
        if (!(err instanceof MatrixError) || (err.errcode !== 'M_INVALID_PARAM' && !(err.errcode === 'M_FORBIDDEN' && (await portal.mayCreate(session))))) throw err;
        const errors = (err.extra.fields ?? {}) as FieldErrors;
        const byField = Object.keys(errors).length > 0;
        return html(reply, newBotPage({ viewer: viewerOf(request, reply)!, values, errors, formError: byField ? undefined : err.message, nameRule: portal.names.describe(), serverName: server.serverName, botsLeft: await portal.botsLeft(session) }), 400);
      }
    });

    /** GET /_bot_homeserver/portal/bots/<localpart>: one bot, with rotate and deactivate. */
    app.get('/bots/:localpart', { onRequest: requireSession, schema: { params: BotParams } }, async (request, reply) => {
      const session = signedIn(request);
      const [bot, mayCreate] = await Promise.all([portal.bot(session, request.params.localpart), portal.mayCreate(session)]);
      return html(reply, botPage({ viewer: viewerOf(request, reply)!, bot: summary(bot), mayCreate }));
    });

    /** POST /_bot_homeserver/portal/bots/<localpart>/rotate: a new secret, shown in this answer only. */
    app.post('/bots/:localpart/rotate', { onRequest: requireSession, preValidation: checkCsrf, schema: { params: BotParams, body: CsrfOnlyBody } }, async (request, reply) => {
      const session = signedIn(request);
      const bot = await portal.bot(session, request.params.localpart);
      const credentials = await portal.rotate(session, request.params.localpart);
      return html(reply, credentialsPage({ viewer: viewerOf(request, reply)!, userId: credentials.user_id, localpart: request.params.localpart, displayname: bot.displayname ?? request.params.localpart, secret: credentials.password, serverUrl: server.publicBaseUrl, rotated: true }));
    });

    /** POST /_bot_homeserver/portal/bots/<localpart>/deactivate (with the confirmation box ticked). */
    app.post('/bots/:localpart/deactivate', { onRequest: requireSession, preValidation: checkCsrf, schema: { params: BotParams, body: CsrfOnlyBody } }, async (request, reply) => {
      const session = signedIn(request);
      const bot = await portal.bot(session, request.params.localpart);
      if (request.body.confirm !== 'yes') {
        return html(reply, botPage({ viewer: viewerOf(request, reply)!, bot: summary(bot), mayCreate: await portal.mayCreate(session), error: 'Tick the box to confirm that the bot should be deactivated.' }), 400);
      }
      await portal.deactivate(session, request.params.localpart);
      return reply.redirect(`${PORTAL_PREFIX}/?done=deactivated`, 303);
    });
  };
}

/** What the sign-in cookie holds: the round trip's secrets, and the session to end after it. */
interface SignInCookie extends PendingSignIn {
  previous?: string;
}

function readPending(request: FastifyRequest): SignInCookie | undefined {
  const raw = request.cookies[SIGN_IN_COOKIE];
  if (raw === undefined) return undefined;
  const unsigned = request.unsignCookie(raw);
  if (!unsigned.valid || !unsigned.value) return undefined;
  try {
    const pending = JSON.parse(unsigned.value) as Partial<SignInCookie>;
    if (typeof pending.idp === 'string' && typeof pending.state === 'string' && typeof pending.nonce === 'string' && typeof pending.verifier === 'string') {
      const { idp, state, nonce, verifier, previous } = pending;
      return { idp, state, nonce, verifier, ...(typeof previous === 'string' ? { previous } : {}) };
    }
  } catch {
    // A cookie we did not write: as if there were none.
  }
  return undefined;
}

function summary(bot: OwnedBotRow): BotSummary {
  return {
    userId: bot.user_id,
    localpart: bot.user_id.slice(1, bot.user_id.indexOf(':')),
    displayname: bot.displayname,
    description: bot.description,
    deactivated: bot.deactivated === 1,
    createdTs: bot.created_ts,
    lastLoginTs: bot.last_login_ts,
    lastSeenTs: bot.last_seen_ts,
  };
}
