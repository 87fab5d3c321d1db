/**
 * A real OpenID Connect provider for the bot portal's tests: `oidc-provider` (the certified Node
 * implementation) on a loopback port, with test users whose claims include `groups`, its
 * development sign-in form (any password), consent given in advance, RP-initiated and
 * back-channel logout on.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair, type JWK } from 'jose';
import Provider, { type Configuration } from 'oidc-provider';

export interface TestPerson {
  preferred_username: string;
  name: string;
  email: string;
  groups: string[];
}

export interface TestOidcProvider {
  issuer: string;
  clientId: string;
  clientSecret: string;
  /** What became of the back-channel logouts the provider sent: 'ok', or the error's message. */
  backchannel: string[];
  /** The provider's signing key (private), for tests that make tokens as the provider would. */
  signingKey: JWK & { kid: string };
  /** What became of the token requests (code exchanges) the provider answered: 'ok', or the error's message. */
  tokenRequests: string[];
  close(): Promise<void>;
}

export const TEST_PEOPLE: Record<string, TestPerson> = {
  alice: { preferred_username: 'alice', name: 'Alice Example', email: 'alice@example.org', groups: ['staff', 'bot-creators'] },
  bob: { preferred_username: 'bob', name: 'Bob Example', email: 'bob@example.org', groups: ['staff'] },
  carol: { preferred_username: 'carol', name: 'Carol Example', email: 'carol@example.org', groups: ['contractors'] },
  dave: { preferred_username: 'dave', name: 'Dave Example', email: 'dave@example.org', groups: ['staff', 'bot-creators'] },
  // Another account at the provider (another subject) whose user name is dave's: a name given
  // again after dave left, or an account renamed. It must not become dave here.
  'dave-reused': { preferred_username: 'dave', name: 'Not Dave', email: 'dave@example.org', groups: ['staff', 'bot-creators'] },
  erin: { preferred_username: 'erin', name: 'Erin Example', email: 'erin@example.org', groups: ['staff', 'bot-creators'] },
  frank: { preferred_username: 'frank', name: 'Frank Example', email: 'frank@example.org', groups: ['staff'] },
};

export async function startOidcProvider(options: { portalBaseUrl: () => string; clientId?: string; clientSecret?: string }): Promise<TestOidcProvider> {
  const clientId = options.clientId ?? 'bot-portal';
  const clientSecret = options.clientSecret ?? 'a-test-client-secret-of-some-length';
  let handler: ((req: import('node:http').IncomingMessage, res: import('node:http').ServerResponse) => void) | undefined;
  const server: Server = createServer((req, res) => {
    if (handler) handler(req, res);
    else res.writeHead(503).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const portal = options.portalBaseUrl();
  // A key of our own rather than the library's development keys, so tests can sign as the provider.
  const { privateKey } = await generateKeyPair('RS256', { extractable: true });
  const signingKey = { ...(await exportJWK(privateKey)), kid: 'test-signing-key', alg: 'RS256', use: 'sig' };
  const configuration: Configuration = {
    jwks: { keys: [signingKey as never] },
    clients: [
      {
        client_id: clientId,
        client_secret: clientSecret,
        redirect_uris: [`${portal}_bot_homeserver/portal/callback`],
        post_logout_redirect_uris: [`${portal}_bot_homeserver/portal/?signed_out=1`],
        backchannel_logout_uri: `${portal}_bot_homeserver/portal/backchannel-logout/test-idp`,
        backchannel_logout_session_required: true,
        response_types: ['code'],
        grant_types: ['authorization_code'],
        token_endpoint_auth_method: 'client_secret_basic',
      },
    ],
    claims: { openid: ['sub'], profile: ['preferred_username', 'name'], email: ['email'], groups: ['groups'] },
    scopes: ['openid', 'profile', 'email', 'groups'],
    // As Keycloak and most providers do: the scopes' claims are in the ID token too.
    conformIdTokenClaims: false,
    features: {
      devInteractions: { enabled: true },
      rpInitiatedLogout: { enabled: true },
      backchannelLogout: { enabled: true },
    },
    findAccount: async (_ctx, id) => ({
      accountId: id,
      claims: async () => ({ sub: id, ...(TEST_PEOPLE[id] ?? { preferred_username: id, name: id, email: `${id}@example.org`, groups: [] }) }),
    }),
    // First-party: consent is given in advance.
    loadExistingGrant: async (ctx) => {
      const grantId = ctx.oidc.result?.consent?.grantId ?? ctx.oidc.session!.grantIdFor(ctx.oidc.client!.clientId);
      if (grantId) return ctx.oidc.provider.Grant.find(grantId);
      const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client!.clientId, accountId: ctx.oidc.session!.accountId! });
      grant.addOIDCScope('openid profile email groups');
      await grant.save();
      return grant;
    },
    pkce: { required: () => true },
    ttl: { Grant: 3600, Session: 3600, AccessToken: 600, IdToken: 600, Interaction: 600, AuthorizationCode: 60 },
    cookies: { keys: ['a-test-cookie-key-for-the-provider'] },
    // The portal it calls back (back-channel logout) is on loopback, which the provider's own
    // guard against server-side request forgery refuses; here that is the point.
    fetch: (url: string | URL | Request, options?: RequestInit & { dispatcher?: unknown }) => {
      const { dispatcher: _guarded, ...rest } = options ?? {};
      return globalThis.fetch(url, rest);
    },
  };
  const provider = new Provider(issuer, configuration);
  const backchannel: string[] = [];
  const events = provider as unknown as { on: (event: string, listener: (...args: unknown[]) => void) => void };
  events.on('backchannel.success', () => backchannel.push('ok'));
  events.on('backchannel.error', (_ctx, err) => backchannel.push((err as Error).message));
  const tokenRequests: string[] = [];
  events.on('grant.success', () => tokenRequests.push('ok'));
  events.on('grant.error', (_ctx, err) => tokenRequests.push((err as Error).message));
  handler = provider.callback();
  return {
    issuer,
    clientId,
    clientSecret,
    backchannel,
    signingKey,
    tokenRequests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
