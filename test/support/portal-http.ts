/**
 * Signing in to the bot portal over plain HTTP, without a browser: a small client with a cookie
 * jar per origin that follows redirects as a browser would, through the test OpenID provider's
 * development sign-in form (test/support/oidc-provider.ts). For the security tests, which need
 * the real round trip (state, nonce, PKCE, the provider's subject) but not a page's layout.
 */
import type { PortalWorld } from './portal.js';

export interface HttpAnswer {
  status: number;
  url: string;
  headers: Headers;
  text: string;
  /** The raw Set-Cookie lines of the last answer. */
  setCookies: string[];
}

/** A cookie jar per origin and redirects followed by hand (each hop's cookies are kept). */
export class HttpClient {
  readonly jar = new Map<string, Map<string, string>>();

  constructor(private readonly extraHeaders: Record<string, string> = {}) {}

  cookieHeader(url: string): string {
    const cookies = this.jar.get(new URL(url).origin);
    return cookies ? [...cookies].map(([name, value]) => `${name}=${value}`).join('; ') : '';
  }

  cookie(url: string, name: string): string | undefined {
    return this.jar.get(new URL(url).origin)?.get(name);
  }

  setCookie(url: string, name: string, value: string): void {
    const origin = new URL(url).origin;
    if (!this.jar.has(origin)) this.jar.set(origin, new Map());
    this.jar.get(origin)!.set(name, value);
  }

  /** One request, no redirect followed. */
  async request(url: string, init: { method?: string; form?: Record<string, string>; headers?: Record<string, string> } = {}): Promise<HttpAnswer> {
    const headers: Record<string, string> = { ...this.extraHeaders, ...init.headers };
    const cookie = this.cookieHeader(url);
    if (cookie) headers.cookie = cookie;
    let body: string | undefined;
    if (init.form) {
      headers['content-type'] = 'application/x-www-form-urlencoded';
      body = new URLSearchParams(init.form).toString();
    }
    const res = await fetch(url, { method: init.method ?? (init.form ? 'POST' : 'GET'), headers, body, redirect: 'manual' });
    const setCookies = res.headers.getSetCookie();
    for (const line of setCookies) this.store(url, line);
    return { status: res.status, url, headers: res.headers, text: await res.text(), setCookies };
  }

  /** Follows redirects (a 303 or 302 turns a POST into a GET); `until` stops before a URL it accepts. */
  async follow(url: string, init: { method?: string; form?: Record<string, string> } = {}, until?: (url: string) => boolean): Promise<HttpAnswer> {
    let answer = await this.request(url, init);
    for (let hops = 0; answer.status >= 300 && answer.status < 400 && hops < 20; hops++) {
      const next = new URL(answer.headers.get('location')!, answer.url).href;
      if (until?.(next)) return { ...answer, url: next };
      answer = await this.request(next);
    }
    return answer;
  }

  private store(url: string, line: string): void {
    const [pair = '', ...attributes] = line.split(';');
    const equals = pair.indexOf('=');
    const name = pair.slice(0, equals).trim();
    const value = pair.slice(equals + 1).trim();
    const origin = new URL(url).origin;
    if (!this.jar.has(origin)) this.jar.set(origin, new Map());
    const expired = attributes.some((a) => /^\s*max-age=0\s*$/i.test(a) || (/^\s*expires=/i.test(a) && Date.parse(a.split('=')[1]!) < Date.now()));
    if (expired || value === '') this.jar.get(origin)!.delete(name);
    else this.jar.get(origin)!.set(name, value);
  }
}

/**
 * Goes from the portal's sign-in link through the provider's sign-in form as `who` (any password)
 * and stops just before the portal's callback: the URL the provider sends the browser back to.
 */
export async function reachCallback(world: PortalWorld, client: HttpClient, who: string): Promise<string> {
  const isCallback = (url: string) => url.startsWith(`${world.portal}callback`);
  let page = await client.follow(`${world.portal}sign-in/test-idp`, {}, isCallback);
  for (let step = 0; step < 4; step++) {
    if (isCallback(page.url)) return page.url;
    const action = /<form[^>]*action="([^"]+)"/.exec(page.text)?.[1];
    const prompt = /name="prompt" value="([^"]+)"/.exec(page.text)?.[1];
    if (!action || !prompt) throw new Error(`the provider's page has no form (${page.status} ${page.url}): ${page.text.slice(0, 300)}`);
    const form: Record<string, string> = prompt === 'login' ? { prompt, login: who, password: 'any password' } : { prompt };
    page = await client.follow(new URL(action.replaceAll('&amp;', '&'), page.url).href, { form }, isCallback);
  }
  throw new Error(`the sign-in did not come back to the portal (${page.status} ${page.url})`);
}

/** Signs `who` in over HTTP; the callback's answer (the session cookie is in the client's jar). */
export async function signInOverHttp(world: PortalWorld, client: HttpClient, who: string): Promise<HttpAnswer> {
  return client.request(await reachCallback(world, client, who));
}

/** The CSRF token on a portal page. */
export function csrfTokenOf(page: HttpAnswer): string {
  const token = /name="_csrf" value="([^"]+)"/.exec(page.text)?.[1];
  if (!token) throw new Error(`no CSRF token on the page (${page.status} ${page.url})`);
  return token;
}
