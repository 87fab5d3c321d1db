/**
 * The `!bridge` command language, parsed without side effects: a message body in, a command (or
 * the usage line to answer with) out. Anything that does not start with `!bridge` is not ours.
 */
import { clip } from './matrix-html.js';
import { MAX_SECRET_LENGTH, MIN_SECRET_LENGTH } from './webhooks/secrets.js';

/** What `webhook <name> secret …` asks for: a new secret made by us, one the sender made, or none. */
export type SecretRequest = { action: 'generate' } | { action: 'set'; value: string } | { action: 'clear' };

export type BridgeCommand =
  | { kind: 'help' }
  | { kind: 'webhook-create'; name: string }
  | { kind: 'webhook-list' }
  | { kind: 'webhook-remove'; name: string }
  | { kind: 'webhook-secret'; name: string; secret: SecretRequest }
  | { kind: 'feed-add'; url: string; label?: string | undefined }
  | { kind: 'feed-list' }
  | { kind: 'feed-remove'; url: string }
  /** Recognisably meant for us but malformed: answer with this usage line. */
  | { kind: 'usage'; message: string };

export const COMMAND_PREFIX = '!bridge';
export const MAX_WEBHOOK_NAME_LENGTH = 64;
export const MAX_FEED_LABEL_LENGTH = 100;
const MAX_FEED_URL_LENGTH = 2048;
/** What a usage line quotes back of the user's input. */
const QUOTED_INPUT_CHARS = 40;
const WEBHOOK_NAME = /^[\p{L}\p{N}][\p{L}\p{N}._-]*$/u;

export const USAGE = {
  webhook: `Usage: ${COMMAND_PREFIX} webhook <name> [secret [<value>|off]] | ${COMMAND_PREFIX} webhook list | ${COMMAND_PREFIX} webhook remove <name>`,
  feed: `Usage: ${COMMAND_PREFIX} feed <url> [label] | ${COMMAND_PREFIX} feed list | ${COMMAND_PREFIX} feed remove <url>`,
  general: `Usage: ${COMMAND_PREFIX} help | ${COMMAND_PREFIX} webhook … | ${COMMAND_PREFIX} feed …`,
};

/** Parses a message body; undefined when the message is not a bridge command at all. */
export function parseCommand(body: string): BridgeCommand | undefined {
  const text = withoutReplyFallback(body).trim();
  const words = text.split(/\s+/u);
  if (words[0]?.toLowerCase() !== COMMAND_PREFIX) return undefined;
  const [, sub, ...rest] = words;
  if (sub === undefined) return { kind: 'help' };
  switch (sub.toLowerCase()) {
    case 'help':
      return { kind: 'help' };
    case 'webhook':
    case 'webhooks':
      return parseWebhook(rest);
    case 'feed':
    case 'feeds':
      return parseFeed(rest, text);
    default:
      return { kind: 'usage', message: `Unknown command "${clip(sub, QUOTED_INPUT_CHARS)}". ${USAGE.general}` };
  }
}

function parseWebhook(args: string[]): BridgeCommand {
  const [first, ...more] = args;
  if (first === undefined) return { kind: 'usage', message: USAGE.webhook };
  switch (first.toLowerCase()) {
    case 'list':
      return more.length === 0 ? { kind: 'webhook-list' } : { kind: 'usage', message: USAGE.webhook };
    case 'remove':
    case 'delete': {
      if (more.length !== 1) return { kind: 'usage', message: USAGE.webhook };
      return { kind: 'webhook-remove', name: more[0]! };
    }
    default: {
      const problem = webhookNameProblem(first);
      if (more.length > 0 && more[0]!.toLowerCase() === 'secret') {
        if (problem) return { kind: 'usage', message: `${problem} ${USAGE.webhook}` };
        const secret = parseSecret(more.slice(1));
        return 'usage' in secret ? { kind: 'usage', message: secret.usage } : { kind: 'webhook-secret', name: first, secret };
      }
      if (more.length > 0) return { kind: 'usage', message: `A webhook name is one word. ${USAGE.webhook}` };
      return problem ? { kind: 'usage', message: `${problem} ${USAGE.webhook}` } : { kind: 'webhook-create', name: first };
    }
  }
}

/**
 * Whether a message gives a webhook secret (`!bridge webhook <name> secret <value>`), well-formed
 * or not: such a message is redacted whatever becomes of the command.
 */
export function holdsSecret(body: string): boolean {
  const words = withoutReplyFallback(body).trim().split(/\s+/u);
  if (words[0]?.toLowerCase() !== COMMAND_PREFIX || !['webhook', 'webhooks'].includes(words[1]?.toLowerCase() ?? '')) return false;
  const at = words.findIndex((word, index) => index >= 3 && word.toLowerCase() === 'secret');
  const value = at >= 0 ? words.slice(at + 1) : [];
  return value.length > 1 || (value.length === 1 && !['off', 'none', 'remove'].includes(value[0]!.toLowerCase()));
}

function parseSecret(args: string[]): SecretRequest | { usage: string } {
  if (args.length === 0) return { action: 'generate' };
  if (args.length > 1) return { usage: `A secret is one word. ${USAGE.webhook}` };
  const value = args[0]!;
  if (['off', 'none', 'remove'].includes(value.toLowerCase())) return { action: 'clear' };
  if (value.length < MIN_SECRET_LENGTH || value.length > MAX_SECRET_LENGTH) {
    return { usage: `A secret you bring has ${MIN_SECRET_LENGTH} to ${MAX_SECRET_LENGTH} characters; leave it out and I make one. ${USAGE.webhook}` };
  }
  return { action: 'set', value };
}

function parseFeed(args: string[], text: string): BridgeCommand {
  const [first, ...more] = args;
  if (first === undefined) return { kind: 'usage', message: USAGE.feed };
  switch (first.toLowerCase()) {
    case 'list':
      return more.length === 0 ? { kind: 'feed-list' } : { kind: 'usage', message: USAGE.feed };
    case 'remove':
    case 'delete': {
      if (more.length !== 1) return { kind: 'usage', message: USAGE.feed };
      const url = feedUrl(more[0]!);
      return url.ok ? { kind: 'feed-remove', url: url.url } : { kind: 'usage', message: `${url.problem} ${USAGE.feed}` };
    }
    default: {
      const url = feedUrl(first);
      if (!url.ok) return { kind: 'usage', message: `${url.problem} ${USAGE.feed}` };
      // The label is the rest of the line as written (spacing kept), not the split words.
      const label = more.length > 0 ? text.slice(text.indexOf(first) + first.length).trim() : undefined;
      if (label !== undefined && [...label].length > MAX_FEED_LABEL_LENGTH) {
        return { kind: 'usage', message: `A feed label has at most ${MAX_FEED_LABEL_LENGTH} characters. ${USAGE.feed}` };
      }
      return { kind: 'feed-add', url: url.url, label };
    }
  }
}

export function webhookNameProblem(name: string): string | undefined {
  if ([...name].length > MAX_WEBHOOK_NAME_LENGTH) return `A webhook name has at most ${MAX_WEBHOOK_NAME_LENGTH} characters.`;
  if (!WEBHOOK_NAME.test(name)) return 'A webhook name is letters, digits, ".", "_" and "-", starting with a letter or digit.';
  return undefined;
}

type UrlResult = { ok: true; url: string } | { ok: false; problem: string };

/** Accepts a URL as people paste it (possibly in <angle brackets>), normalised by WHATWG rules. */
export function feedUrl(raw: string): UrlResult {
  const candidate = raw.startsWith('<') && raw.endsWith('>') ? raw.slice(1, -1) : raw;
  if (candidate.length > MAX_FEED_URL_LENGTH) return { ok: false, problem: 'That URL is too long.' };
  let url: URL;
  try {
    url = new URL(candidate);
  } catch {
    return { ok: false, problem: `"${clip(candidate, QUOTED_INPUT_CHARS)}" is not a URL.` };
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    return { ok: false, problem: 'Feeds are fetched over http or https only.' };
  }
  if (url.username || url.password) return { ok: false, problem: 'Feed URLs with a user name or password are not supported.' };
  url.hash = '';
  return { ok: true, url: url.href };
}

/** Drops the quoted "> <@user> ..." lines a reply carries before its own text (spec reply fallback). */
function withoutReplyFallback(body: string): string {
  if (!body.startsWith('> ')) return body;
  const lines = body.split('\n');
  let index = 0;
  while (index < lines.length && lines[index]!.startsWith('>')) index += 1;
  return lines.slice(index).join('\n');
}
