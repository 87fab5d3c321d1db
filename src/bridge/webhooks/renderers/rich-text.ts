/**
 * Rich text for rendered webhook messages: every piece carries its plain text and its HTML side by
 * side, so a renderer writes a sentence once and gets both a readable `body` and a safe
 * `formatted_body`. Plain strings are escaped on the HTML side; only these helpers write tags.
 */
import { escapeHtml } from '../../matrix-html.js';

export interface Rich {
  readonly text: string;
  readonly html: string;
}

/** What the helpers accept: strings (escaped), rich pieces, and nothing (skipped). */
export type Part = string | number | Rich | undefined | null | false;

/** A message as a renderer produces it; `renderedMessage` turns it into `{text, html}`. */
export interface RenderedWebhook {
  /** One sentence: who did what where. Links in its HTML. */
  summary: Rich;
  /** The page a reader would open, appended to the plain-text summary (the HTML links it already). */
  url?: string | undefined;
  /** Lines under the summary: commits, alerts, fields. Shown as a list. */
  details?: Rich[] | undefined;
  /** A block under the details (a quoted comment, an excerpt). */
  block?: Rich | undefined;
}

export function isRich(value: unknown): value is Rich {
  return typeof value === 'object' && value !== null && typeof (value as Rich).text === 'string' && typeof (value as Rich).html === 'string';
}

function toRich(part: Part): Rich {
  if (part === undefined || part === null || part === false) return EMPTY;
  if (typeof part === 'number') return { text: String(part), html: String(part) };
  if (typeof part === 'string') return { text: part, html: escapeHtml(part) };
  return part;
}

const EMPTY: Rich = { text: '', html: '' };

/** The parts one after another. */
export function rich(...parts: Part[]): Rich {
  return concat(parts);
}

/** The parts of a list one after another (a list may be long: never spread it into `rich`). */
export function concat(parts: readonly Part[]): Rich {
  let text = '';
  let html = '';
  for (const part of parts) {
    const piece = toRich(part);
    text += piece.text;
    html += piece.html;
  }
  return { text, html };
}

/** The parts that are present, with `separator` between them. */
export function join(parts: Part[], separator: Part): Rich {
  const present = parts.filter((part) => toRich(part).text !== '');
  const out: Part[] = [];
  present.forEach((part, index) => {
    if (index > 0) out.push(separator);
    out.push(part);
  });
  return concat(out);
}

function wrap(tag: string, part: Part): Rich {
  const inner = toRich(part);
  if (inner.text === '' && inner.html === '') return EMPTY;
  return { text: inner.text, html: `<${tag}>${inner.html}</${tag}>` };
}

export const bold = (part: Part): Rich => wrap('strong', part);
export const italic = (part: Part): Rich => wrap('em', part);
export const code = (part: Part): Rich => wrap('code', part);
export const strike = (part: Part): Rich => wrap('del', part);

/** A link when `url` is an http(s) URL; otherwise just the label. The label defaults to the URL. */
export function link(url: string | undefined | null, label?: Part): Rich {
  const shown = toRich(label ?? url ?? '');
  const href = safeUrl(url);
  if (href === undefined) return shown;
  return { text: shown.text, html: `<a href="${escapeHtml(href)}">${shown.html}</a>` };
}

/** The URL when it is absolute http(s) (what a room can safely link to), else undefined. */
export function safeUrl(url: unknown): string | undefined {
  if (typeof url !== 'string' || url.length > 4096) return undefined;
  try {
    const parsed = new URL(url);
    if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') return undefined;
    // As the sender wrote it (no added trailing slash), unless it holds spaces or control characters.
    // eslint-disable-next-line no-control-regex
    return /^[^\s\u0000-\u001f\u007f]+$/.test(url) ? url : parsed.href;
  } catch {
    return undefined;
  }
}

/** Lines: newlines in text, `<br>` in HTML. */
export function lines(parts: Part[]): Rich {
  return join(parts, { text: '\n', html: '<br>' });
}

/** Text that may hold newlines, shown as written. */
export function multiline(text: string): Rich {
  return lines(text.split(/\r?\n/));
}

/** A bulleted list: "• item" lines in text, `<ul>` in HTML. */
export function bulleted(items: Rich[]): Rich {
  if (items.length === 0) return EMPTY;
  return {
    text: items.map((item) => `• ${item.text}`).join('\n'),
    html: `<ul>${items.map((item) => `<li>${item.html}</li>`).join('')}</ul>`,
  };
}

/** A quoted block (a comment someone wrote). */
export function quoted(text: string): Rich {
  const body = multiline(text);
  return { text: body.text.split('\n').map((line) => `> ${line}`).join('\n'), html: `<blockquote>${body.html}</blockquote>` };
}

/** A preformatted block (JSON, logs). */
export function preformatted(text: string, language?: string): Rich {
  const cls = language ? ` class="language-${language}"` : '';
  return { text, html: `<pre><code${cls}>${escapeHtml(text)}</code></pre>` };
}

/** HTML written by our own code (never by the sender), with its plain-text form. */
export function trusted(html: string, text: string): Rich {
  return { text, html };
}

/** The whole message: summary (+ URL in text), details as a list, then the block. */
export function renderedMessage(message: RenderedWebhook): { text: string; html: string } {
  const url = safeUrl(message.url);
  const parts: Rich[] = [url && !message.summary.text.includes(url) ? rich(message.summary, ` ${url}`) : message.summary];
  const textParts = [parts[0]!.text];
  let html = `<p>${message.summary.html}</p>`;
  if (message.details && message.details.length > 0) {
    const list = bulleted(message.details);
    textParts.push(list.text);
    html += list.html;
  }
  if (message.block && message.block.text !== '') {
    textParts.push(message.block.text);
    html += message.block.html;
  }
  return { text: textParts.join('\n'), html };
}

// ---- reading untrusted payloads ----

/** A payload's object at `value`, or an empty object: renderers read fields without checks. */
export function obj(value: unknown): Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : {};
}

/** A non-empty string, trimmed, else undefined. */
export function str(value: unknown): string | undefined {
  if (typeof value === 'number' && Number.isFinite(value)) return String(value);
  if (typeof value !== 'string') return undefined;
  const trimmed = value.trim();
  return trimmed === '' ? undefined : trimmed;
}

export function num(value: unknown): number | undefined {
  if (typeof value === 'number' && Number.isFinite(value)) return value;
  if (typeof value === 'string' && /^-?\d+(\.\d+)?$/.test(value.trim())) return Number(value);
  return undefined;
}

export function arr(value: unknown): unknown[] {
  return Array.isArray(value) ? value : [];
}

/** The first line of a text (a commit message's subject), clipped to `max` characters. */
export function firstLine(value: unknown, max = 120): string | undefined {
  const text = str(value);
  if (text === undefined) return undefined;
  const line = text.split(/\r?\n/, 1)[0]!.trim();
  return clipChars(line, max);
}

export function clipChars(text: string, max: number): string {
  const chars = [...text];
  return chars.length > max ? `${chars.slice(0, max - 1).join('')}…` : text;
}

/** `table[key]` when the table has that key of its own (never an Object.prototype member). */
export function lookup<V>(table: Readonly<Record<string, V>>, key: string | undefined): V | undefined {
  return key !== undefined && Object.hasOwn(table, key) ? table[key] : undefined;
}

/** "1 commit", "3 commits". */
export function plural(count: number, one: string, many = `${one}s`): string {
  return `${count} ${count === 1 ? one : many}`;
}
