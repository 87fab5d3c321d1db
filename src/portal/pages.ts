/**
 * The portal's pages: plain server-rendered HTML that works without JavaScript (a small script
 * only adds "Copy" buttons), laid out for phones first, with labels, hints and errors tied to
 * their fields, and in plain words. Pure functions from what a page shows to its HTML.
 */
import { html, trusted, type HtmlValue, type SafeHtml } from './html.js';

export const PORTAL_PREFIX = '/_bot_homeserver/portal';
const P = PORTAL_PREFIX;

export interface Viewer {
  person: string;
  displayName: string | null;
  csrf: string;
}

export interface ProviderLink {
  id: string;
  name: string;
}

export interface BotSummary {
  userId: string;
  localpart: string;
  displayname: string | null;
  description: string;
  deactivated: boolean;
  createdTs: number;
  lastLoginTs: number | null;
  lastSeenTs: number | null;
}

export interface NewBotFormValues {
  username: string;
  displayname: string;
  description: string;
}

export interface FieldErrors {
  username?: string | undefined;
  displayname?: string | undefined;
  description?: string | undefined;
}

function layout(options: { title: string; viewer?: Viewer | undefined; body: SafeHtml; script?: boolean }): string {
  const { title, viewer, body } = options;
  return `<!doctype html>\n${
    html`<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>${title} – Bot accounts</title>
<link rel="stylesheet" href="${P}/assets/portal.css">
${options.script ? trusted(`<script src="${P}/assets/portal.js" defer></script>`) : ''}
</head>
<body>
<a class="skip" href="#main">Skip to the content</a>
<header class="top">
<div class="wrap top-row">
<a class="brand" href="${P}/">Bot accounts</a>
${viewer ? html`<div class="who">
<span>Signed in as <strong>${viewer.displayName ?? viewer.person}</strong>${viewer.displayName ? html` <span class="quiet">(${viewer.person})</span>` : ''}</span>
<form method="post" action="${P}/sign-out">${csrfField(viewer.csrf)}<button type="submit" class="link-button">Sign out</button></form>
</div>` : ''}
</div>
</header>
<main id="main" class="wrap" tabindex="-1">
${body}
</main>
</body>
</html>`.text
  }\n`;
}

function csrfField(token: string): SafeHtml {
  return html`<input type="hidden" name="_csrf" value="${token}">`;
}

function notice(text: string | undefined): HtmlValue {
  return text ? html`<div class="notice" role="status"><p>${text}</p></div>` : '';
}

/** "2026-01-01 09:30 UTC", or the fallback when there is no time. */
export function when(ts: number | null, never = 'Never'): SafeHtml {
  if (ts === null) return html`${never}`;
  const iso = new Date(ts).toISOString();
  return html`<time datetime="${iso}">${iso.slice(0, 16).replace('T', ' ')} UTC</time>`;
}

export function signInPage(options: { providers: ProviderLink[]; message?: string | undefined }): string {
  return layout({
    title: 'Sign in',
    body: html`<h1>Bot accounts</h1>
${notice(options.message)}
<p>Here you can make accounts for your chat bots. Each bot gets a user name and a secret that it signs in with.</p>
<p>Sign in with your usual work account to see your bots or make a new one.</p>
<ul class="actions">
${options.providers.map((provider) => html`<li><a class="button" href="${P}/sign-in/${encodeURIComponent(provider.id)}">Sign in with ${provider.name}</a></li>`)}
</ul>`,
  });
}

export function homePage(options: {
  viewer: Viewer;
  bots: BotSummary[];
  mayCreate: boolean;
  botsLeft: number;
  maxBots: number;
  requestAccessUrl: string | null;
  message?: string | undefined;
}): string {
  const { bots, mayCreate } = options;
  const active = bots.filter((bot) => !bot.deactivated);
  const create = mayCreate
    ? options.botsLeft > 0
      ? html`<p><a class="button" href="${P}/bots/new">Create a bot</a></p>`
      : html`<p>You have ${options.maxBots} bots, the most one person may have. Deactivate one you no longer need to make another.</p>`
    : html`<section class="card" aria-labelledby="no-right">
<h2 id="no-right">You can't create bots yet</h2>
<p>Creating bots needs permission.</p>
${options.requestAccessUrl
  ? html`<p><a class="button" href="${options.requestAccessUrl}">Ask for permission to create bots</a></p>`
  : html`<p>Ask the people who run this service to give you permission.</p>`}
</section>`;
  return layout({
    title: 'Your bots',
    viewer: options.viewer,
    body: html`<h1>Your bots</h1>
${notice(options.message)}
${create}
${bots.length === 0
  ? html`<p>You have no bots yet.</p>`
  : html`<p class="quiet">${active.length} active${bots.length > active.length ? html`, ${bots.length - active.length} deactivated` : ''}.</p>
<ul class="bots">
${bots.map((bot) => botCard(bot))}
</ul>`}`,
  });
}

function botCard(bot: BotSummary): SafeHtml {
  const headingId = `bot-${bot.localpart.replace(/[^a-z0-9_-]/g, '_')}`;
  return html`<li class="card${bot.deactivated ? ' off' : ''}">
<h2 id="${headingId}"><a href="${P}/bots/${encodeURIComponent(bot.localpart)}">${bot.displayname ?? bot.localpart}</a>${bot.deactivated ? html` <span class="tag">Deactivated</span>` : ''}</h2>
<dl class="facts">
<div><dt>Full user name</dt><dd><code>${bot.userId}</code></dd></div>
<div><dt>What it's for</dt><dd>${bot.description || '—'}</dd></div>
<div><dt>Last signed in</dt><dd>${when(bot.lastLoginTs)}</dd></div>
<div><dt>Last active</dt><dd>${when(bot.lastSeenTs)}</dd></div>
</dl>
</li>`;
}

export function newBotPage(options: {
  viewer: Viewer;
  values: NewBotFormValues;
  errors: FieldErrors;
  nameRule: string;
  serverName: string;
  botsLeft: number;
  formError?: string | undefined;
}): string {
  const { values, errors } = options;
  const problems = (['username', 'displayname', 'description'] as const).filter((field) => errors[field]);
  const field = (name: keyof FieldErrors) => ({
    invalid: errors[name] ? trusted(' aria-invalid="true"') : '',
    error: errors[name] ? html`<p class="error" id="${name}-error"><span class="visually-hidden">Error: </span>${errors[name]}</p>` : '',
    describedBy: [`${name}-hint`, errors[name] ? `${name}-error` : ''].filter(Boolean).join(' '),
  });
  const username = field('username');
  const displayname = field('displayname');
  const description = field('description');
  const labels = { username: 'User name', displayname: 'Display name', description: "What it's for" };
  return layout({
    title: problems.length > 0 ? 'Error: Create a bot' : 'Create a bot',
    viewer: options.viewer,
    body: html`<p><a href="${P}/">Back to your bots</a></p>
<h1>Create a bot</h1>
${problems.length > 0 || options.formError
  ? html`<div class="error-summary" role="alert" tabindex="-1" id="error-summary">
<h2>Please fix this</h2>
${options.formError ? html`<p>${options.formError}</p>` : ''}
${problems.length > 0 ? html`<ul>${problems.map((name) => html`<li><a href="#${name}">${labels[name]}: ${errors[name]}</a></li>`)}</ul>` : ''}
</div>`
  : ''}
<p>You can create ${options.botsLeft} more ${options.botsLeft === 1 ? 'bot' : 'bots'}.</p>
<form method="post" action="${P}/bots" novalidate>
${csrfField(options.viewer.csrf)}
<div class="field">
<label for="username">User name</label>
<p class="hint" id="username-hint">${options.nameRule} Your bot will be known as <code>@user-name:${options.serverName}</code>. It can't be changed later.</p>
${username.error}
<input id="username" name="username" type="text" required autocomplete="off" autocapitalize="none" spellcheck="false" maxlength="64" value="${values.username}" aria-describedby="${username.describedBy}"${username.invalid}>
</div>
<div class="field">
<label for="displayname">Display name <span class="quiet">(optional)</span></label>
<p class="hint" id="displayname-hint">The name people see in chats. The user name is used if you leave this empty.</p>
${displayname.error}
<input id="displayname" name="displayname" type="text" autocomplete="off" maxlength="100" value="${values.displayname}" aria-describedby="${displayname.describedBy}"${displayname.invalid}>
</div>
<div class="field">
<label for="description">What it's for</label>
<p class="hint" id="description-hint">A sentence or two, so that others can tell what this bot does and whom to ask.</p>
${description.error}
<textarea id="description" name="description" rows="3" required maxlength="500" aria-describedby="${description.describedBy}"${description.invalid}>${values.description}</textarea>
</div>
<button type="submit" class="button">Create bot</button>
</form>`,
  });
}

export function credentialsPage(options: {
  viewer: Viewer;
  userId: string;
  localpart: string;
  displayname: string;
  secret: string;
  serverUrl: string;
  rotated: boolean;
}): string {
  const { userId, secret } = options;
  const loginUrl = `${options.serverUrl}_matrix/client/v3/login`;
  const body = JSON.stringify({ type: 'm.login.password', identifier: { type: 'm.id.user', user: options.localpart }, password: secret });
  const example = `curl -sS -X POST '${loginUrl}' \\\n  -H 'Content-Type: application/json' \\\n  -d '${body}'`;
  const copyable = (id: string, label: string, value: string, secretField = false) => html`<div class="field">
<label for="${id}">${label}</label>
<div class="copy-row">
<input id="${id}" type="text" readonly value="${value}" spellcheck="false" autocomplete="off"${secretField ? trusted(' class="secret"') : ''}>
<button type="button" class="button secondary" data-copy="${id}" hidden>Copy<span class="visually-hidden"> ${label.toLowerCase()}</span></button>
</div>
</div>`;
  return layout({
    title: options.rotated ? `New secret for ${options.displayname}` : `${options.displayname} is ready`,
    viewer: options.viewer,
    script: true,
    body: html`<h1>${options.rotated ? html`New secret for ${options.displayname}` : html`${options.displayname} is ready`}</h1>
<div class="warning" role="note">
<p><strong>This is the only time the secret is shown.</strong> Copy it now and keep it where your bot reads its settings. If it is lost, make a new one.</p>
${options.rotated ? html`<p>The old secret no longer works, and the bot has been signed out everywhere.</p>` : ''}
</div>
${copyable('user-id', 'Full user name', userId)}
${copyable('server-url', 'Server address', options.serverUrl)}
${copyable('secret', 'Secret', secret, true)}
<h2 id="try-it">Try it</h2>
<p id="try-it-hint">This command signs the bot in and prints what it needs to send messages. Run it in a terminal.</p>
<div class="example">
<pre id="login-example" tabindex="0" aria-labelledby="try-it" aria-describedby="try-it-hint"><code>${example}</code></pre>
<button type="button" class="button secondary" data-copy="login-example" hidden>Copy<span class="visually-hidden"> the command</span></button>
</div>
<p class="copy-status visually-hidden" role="status" aria-live="polite" id="copy-status"></p>
<p><a class="button" href="${P}/bots/${encodeURIComponent(options.localpart)}">Done, I have saved the secret</a></p>`,
  });
}

export function botPage(options: { viewer: Viewer; bot: BotSummary; mayCreate: boolean; message?: string | undefined; error?: string | undefined }): string {
  const { bot } = options;
  const name = bot.displayname ?? bot.localpart;
  const path = `${P}/bots/${encodeURIComponent(bot.localpart)}`;
  return layout({
    title: name,
    viewer: options.viewer,
    body: html`<p><a href="${P}/">Back to your bots</a></p>
<h1>${name}${bot.deactivated ? html` <span class="tag">Deactivated</span>` : ''}</h1>
${notice(options.message)}
${options.error ? html`<div class="error-summary" role="alert"><p>${options.error}</p></div>` : ''}
<dl class="facts">
<div><dt>Full user name</dt><dd><code>${bot.userId}</code></dd></div>
<div><dt>What it's for</dt><dd>${bot.description || '—'}</dd></div>
<div><dt>Created</dt><dd>${when(bot.createdTs)}</dd></div>
<div><dt>Last signed in</dt><dd>${when(bot.lastLoginTs)}</dd></div>
<div><dt>Last active</dt><dd>${when(bot.lastSeenTs)}</dd></div>
</dl>
${bot.deactivated
  ? html`<p>This bot has been deactivated: it can't sign in, and its name can't be used again.</p>`
  : html`<section class="card" aria-labelledby="rotate-heading">
<h2 id="rotate-heading">Make a new secret</h2>
<p>Do this if the secret was lost or may have been seen by someone else. The old secret stops working at once, and the bot is signed out everywhere until it signs in with the new one.</p>
${options.mayCreate
  ? html`<form method="post" action="${path}/rotate">${csrfField(options.viewer.csrf)}<button type="submit" class="button">Make a new secret</button></form>`
  : html`<p>You no longer have permission to make secrets. You can still deactivate the bot.</p>`}
</section>
<section class="card danger-zone" aria-labelledby="deactivate-heading">
<h2 id="deactivate-heading">Deactivate this bot</h2>
<p>The bot stops working for good: it can't sign in again and it leaves its chats. This can't be undone.</p>
<form method="post" action="${path}/deactivate">
${csrfField(options.viewer.csrf)}
<div class="check">
<input type="checkbox" id="confirm" name="confirm" value="yes" required>
<label for="confirm">Yes, deactivate ${name} for good</label>
</div>
<button type="submit" class="button danger">Deactivate bot</button>
</form>
</section>`}`,
  });
}

/** A page that only says something: an error, a refusal, "signed out". */
export function messagePage(options: {
  title: string;
  paragraphs: string[];
  viewer?: Viewer | undefined;
  link?: { href: string; text: string } | undefined;
  signInAgain?: boolean;
}): string {
  return layout({
    title: options.title,
    viewer: options.viewer,
    body: html`<h1>${options.title}</h1>
${options.paragraphs.map((text) => html`<p>${text}</p>`)}
${options.link ? html`<p><a class="button" href="${options.link.href}">${options.link.text}</a></p>` : ''}
${options.signInAgain ? html`<p><a href="${P}/">Go to the sign-in page</a></p>` : options.viewer ? html`<p><a href="${P}/">Back to your bots</a></p>` : ''}`,
  });
}
