/**
 * Signing in with one OpenID Connect provider, through `openid-client` (a certified relying party
 * library): discovery, the authorization code flow with PKCE (S256), state and nonce checked, the
 * ID token checked by the library; RP-initiated logout; back-channel logout tokens checked with
 * `jose` against the provider's published keys.
 */
import * as client from 'openid-client';
import { createRemoteJWKSet, jwtVerify, type JWTVerifyGetKey } from 'jose';
import type { OidcProviderConfig } from '../config/index.js';
import type { Claims } from './claims.js';

/** What the login round trip must remember between leaving for the provider and coming back. */
export interface PendingSignIn {
  idp: string;
  state: string;
  nonce: string;
  verifier: string;
}

export interface SignedIn {
  claims: Claims;
  sub: string;
  sid: string | undefined;
  idToken: string | undefined;
}

/** The provider could not be reached or answered something we cannot use; the message is for logs. */
export class ProviderError extends Error {
  override name = 'ProviderError';
}

const BACKCHANNEL_EVENT = 'http://schemas.openid.net/event/backchannel-logout';
/** A discovery that failed is tried again after this long, not on every page view. */
const DISCOVERY_RETRY_MS = 10_000;
/** Requests to the provider give up after this long. */
const PROVIDER_TIMEOUT_S = 10;

export class OidcProvider {
  private discovered: Promise<client.Configuration> | undefined;
  private failedAt = 0;
  private jwks: JWTVerifyGetKey | undefined;

  constructor(readonly config: OidcProviderConfig) {}

  get id(): string {
    return this.config.idp_id;
  }

  get name(): string {
    return this.config.idp_name;
  }

  /** The provider's metadata, fetched once (again after a failure, at most every few seconds). */
  private configuration(): Promise<client.Configuration> {
    if (this.discovered) return this.discovered;
    if (Date.now() - this.failedAt < DISCOVERY_RETRY_MS) return Promise.reject(new ProviderError(`discovery of ${this.config.issuer} failed moments ago`));
    const provider = this.config;
    const auth =
      provider.client_auth_method === 'none'
        ? client.None()
        : provider.client_auth_method === 'client_secret_post'
          ? client.ClientSecretPost(provider.client_secret ?? undefined)
          : client.ClientSecretBasic(provider.client_secret ?? undefined);
    const discovered = client
      .discovery(new URL(provider.issuer), provider.client_id, undefined, auth, {
        timeout: PROVIDER_TIMEOUT_S,
        ...(provider.skip_verification ? { execute: [client.allowInsecureRequests] } : {}),
      })
      .catch((err: unknown) => {
        this.discovered = undefined;
        this.failedAt = Date.now();
        throw new ProviderError(`discovery of ${provider.issuer} failed: ${(err as Error).message}`, { cause: err });
      });
    this.discovered = discovered;
    return discovered;
  }

  /** Where to send the browser, and what to remember until it comes back. */
  async start(redirectUri: string): Promise<{ url: string; pending: PendingSignIn }> {
    const configuration = await this.configuration();
    const verifier = client.randomPKCECodeVerifier();
    const pending: PendingSignIn = { idp: this.id, state: client.randomState(), nonce: client.randomNonce(), verifier };
    const url = client.buildAuthorizationUrl(configuration, {
      redirect_uri: redirectUri,
      scope: this.scopes().join(' '),
      response_type: 'code',
      code_challenge: await client.calculatePKCECodeChallenge(verifier),
      code_challenge_method: 'S256',
      state: pending.state,
      nonce: pending.nonce,
    });
    return { url: url.href, pending };
  }

  /**
   * The provider sent the browser back to `callbackUrl`: the code is exchanged (with the PKCE
   * verifier), state and nonce must match, and the ID token is checked. Throws on anything else.
   */
  async finish(callbackUrl: URL, pending: PendingSignIn): Promise<SignedIn> {
    const configuration = await this.configuration();
    const tokens = await client.authorizationCodeGrant(configuration, callbackUrl, {
      pkceCodeVerifier: pending.verifier,
      expectedState: pending.state,
      expectedNonce: pending.nonce,
      idTokenExpected: true,
    });
    const idClaims = tokens.claims();
    if (!idClaims) throw new ProviderError('the provider returned no ID token');
    let claims: Record<string, unknown> = { ...idClaims };
    if (this.config.user_profile_method === 'userinfo_endpoint') {
      const userinfo = await client.fetchUserInfo(configuration, tokens.access_token, idClaims.sub);
      claims = { ...claims, ...userinfo };
    }
    return {
      claims,
      sub: idClaims.sub,
      sid: typeof idClaims.sid === 'string' ? idClaims.sid : undefined,
      idToken: tokens.id_token,
    };
  }

  /** The provider's logout page (RP-initiated logout), or undefined when it has none. */
  async endSessionUrl(idToken: string | null, postLogoutRedirectUri: string): Promise<string | undefined> {
    let configuration: client.Configuration;
    try {
      configuration = await this.configuration();
    } catch {
      return undefined;
    }
    if (!configuration.serverMetadata().end_session_endpoint) return undefined;
    return client.buildEndSessionUrl(configuration, {
      post_logout_redirect_uri: postLogoutRedirectUri,
      client_id: this.config.client_id,
      ...(idToken ? { id_token_hint: idToken } : {}),
    }).href;
  }

  /**
   * A back-channel logout token (OpenID Connect Back-Channel Logout 1.0, section 2.6): signed by
   * the provider, for us, with the logout event, a sid or sub, and no nonce. Returns whom it logs out.
   */
  async verifyLogoutToken(token: string): Promise<{ sid: string | undefined; sub: string | undefined }> {
    const configuration = await this.configuration();
    const metadata = configuration.serverMetadata();
    if (!metadata.jwks_uri) throw new ProviderError('the provider publishes no keys (jwks_uri)');
    this.jwks ??= createRemoteJWKSet(new URL(metadata.jwks_uri));
    const { payload } = await jwtVerify(token, this.jwks, { issuer: metadata.issuer, audience: this.config.client_id, maxTokenAge: '10m' });
    const events = payload.events as Record<string, unknown> | undefined;
    if (!events || typeof events[BACKCHANNEL_EVENT] !== 'object') throw new ProviderError('not a logout token (no back-channel logout event)');
    if ('nonce' in payload) throw new ProviderError('a logout token must not carry a nonce');
    if (typeof payload.jti !== 'string') throw new ProviderError('a logout token must carry a jti');
    const sid = typeof payload.sid === 'string' ? payload.sid : undefined;
    const sub = typeof payload.sub === 'string' && !this.config.backchannel_logout_ignore_sub ? payload.sub : undefined;
    if (sid === undefined && typeof payload.sub !== 'string') throw new ProviderError('a logout token names a sid or a sub');
    return { sid, sub: sid === undefined ? (typeof payload.sub === 'string' ? payload.sub : undefined) : sub };
  }

  /** `openid` is always asked for: without it there is no ID token. */
  private scopes(): string[] {
    return this.config.scopes.includes('openid') ? this.config.scopes : ['openid', ...this.config.scopes];
  }
}
