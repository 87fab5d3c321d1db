/**
 * JSON from a sender we do not recognise (or that its renderer could not read): say what arrived
 * and show the start of it, pretty-printed. The excerpt is written with a budget, so a 1 MB body or
 * one nested 10,000 levels deep costs no more than a small one.
 */
import { clipChars, plural, preformatted, rich, type RenderedWebhook } from './rich-text.js';
import type { WebhookRequest } from './types.js';
import { editDistance } from '../../../core/edit-distance.js';

// Short: the summary line says what arrived; the excerpt is a glimpse, not the document.
const MAX_LINES = 12;
const MAX_CHARS = 800;
/** Deeper containers are shown as `{…}` / `[…]`; this also bounds the recursion. */
const MAX_DEPTH = 8;
const MAX_STRING_CHARS = 120;
const MAX_KEY_CHARS = 60;
const SUMMARY_KEYS = 3;
const MAX_SUMMARY_KEY_CHARS = 40;

/** The first `max` characters, without copying all of a huge string first. */
function clipLong(text: string, max: number): string {
  return clipChars(text.slice(0, max * 2), max);
}

class Excerpt {
  readonly lines: string[] = [];
  private chars = 0;
  full = false;

  add(line: string): void {
    if (this.full) return;
    if (this.lines.length >= MAX_LINES || this.chars + line.length > MAX_CHARS) {
      this.full = true;
      return;
    }
    this.lines.push(line);
    this.chars += line.length + 1;
  }

  /** Writes `value` as indented JSON, stopping as soon as the budget is spent. */
  write(value: unknown, indent: string, prefix: string, suffix: string, depth: number): void {
    if (this.full) return;
    if (typeof value !== 'object' || value === null) {
      this.add(`${indent}${prefix}${scalar(value)}${suffix}`);
      return;
    }
    const isArray = Array.isArray(value);
    const [open, close] = isArray ? ['[', ']'] : ['{', '}'];
    // An array's indices need no list of keys (a 1 MB array of numbers would make one of 100,000 strings).
    const keys = isArray ? undefined : Object.keys(value);
    const size = keys === undefined ? (value as unknown[]).length : keys.length;
    if (size === 0 || depth >= MAX_DEPTH) {
      this.add(`${indent}${prefix}${open}${size === 0 ? '' : '…'}${close}${suffix}`);
      return;
    }
    this.add(`${indent}${prefix}${open}`);
    for (let index = 0; index < size && !this.full; index += 1) {
      const key = keys === undefined ? index : keys[index]!;
      const label = keys === undefined ? '' : `${JSON.stringify(clipLong(String(key), MAX_KEY_CHARS))}: `;
      this.write((value as Record<string | number, unknown>)[key], `${indent}  `, label, index < size - 1 ? ',' : '', depth + 1);
    }
    this.add(`${indent}${close}${suffix}`);
  }
}

function scalar(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(clipLong(value, MAX_STRING_CHARS));
  // Parsed JSON holds only finite numbers, booleans and null; String() prints 1.417566161e+09 as 1417566161.
  return String(value);
}

/** "JSON, 3 top-level keys: a, b, c" and the like. */
function describe(payload: unknown): string {
  if (Array.isArray(payload)) return `JSON array of ${plural(payload.length, 'item')}`;
  if (typeof payload !== 'object' || payload === null) return `JSON ${payload === null ? 'null' : typeof payload}`;
  const keys = Object.keys(payload);
  if (keys.length === 0) return 'JSON, empty object';
  const shown = keys.slice(0, SUMMARY_KEYS).map((key) => clipLong(key.replace(/\s+/g, ' '), MAX_SUMMARY_KEY_CHARS));
  return `JSON, ${plural(keys.length, 'top-level key')}: ${shown.join(', ')}${keys.length > SUMMARY_KEYS ? ', …' : ''}`;
}

/** The fields of our own `{"text", "html"}` format, which a mistyped key was probably meant to be. */
const OWN_FIELDS = ['text', 'html'];

/**
 * `{"txt": "..."}` and the like: a small object with a key one or two letters from one of ours,
 * and none of ours. Named in the summary, so the sender sees what to fix.
 */
function mistypedField(payload: unknown): { given: string; meant: string } | undefined {
  if (typeof payload !== 'object' || payload === null || Array.isArray(payload)) return undefined;
  const keys = Object.keys(payload);
  if (keys.length === 0 || keys.length > 6 || keys.some((key) => OWN_FIELDS.includes(key))) return undefined;
  for (const key of keys) {
    // Same first letter too: "next" is one letter from "text" but is no typo of it.
    const lower = key.toLowerCase();
    const meant = OWN_FIELDS.find((field) => lower[0] === field[0] && key.length <= 8 && editDistance(lower, field) <= 2 && lower !== field);
    if (meant) return { given: key, meant };
    if (OWN_FIELDS.includes(key.toLowerCase())) return { given: key, meant: key.toLowerCase() };
  }
  return undefined;
}

export function renderUnknown(request: WebhookRequest): RenderedWebhook {
  const excerpt = new Excerpt();
  excerpt.write(request.payload, '', '', '', 0);
  const text = excerpt.lines.join('\n') + (excerpt.full ? '\n…' : '');
  const typo = mistypedField(request.payload);
  const summary = typo
    ? `Webhook received without a "${typo.meant}" field (it has "${clipLong(typo.given, MAX_SUMMARY_KEY_CHARS)}"; send {"${typo.meant}": "..."})`
    : `Webhook received (${describe(request.payload)})`;
  return { summary: rich(summary), block: preformatted(text, 'json') };
}
