// JSON Feed 1.0 / 1.1 (https://jsonfeed.org/version/1.1), mapped by hand: it is plain JSON with a
// handful of fields, and the XML library does not read it.
import { FeedError } from './error.js';
import { newestItems, nonBlank, validDate, type FeedDraft, type ItemDraft } from './draft.js';

const VERSION_PREFIX = 'https://jsonfeed.org/version/';

export function readJsonFeed(text: string): FeedDraft {
  const document = parseJson(text);
  if (!isRecord(document)) throw new FeedError('that JSON document is not a JSON Feed (it is not an object)');

  const version = document.version;
  if (typeof version !== 'string' || !version.startsWith(VERSION_PREFIX)) {
    if ('rss' in document) {
      throw new FeedError('that is RSS written as JSON ("RSS in JSON"), not a JSON Feed; use the site\'s XML RSS feed instead');
    }
    throw new FeedError(`that JSON document is not a JSON Feed (it has no "version" starting with ${VERSION_PREFIX})`);
  }
  if (!Array.isArray(document.items)) throw new FeedError('that JSON Feed has no "items" list');

  return {
    format: 'json',
    title: stringField(document.title),
    link: stringField(document.home_page_url),
    items: newestItems(document.items.filter(isRecord), (item) => validDate(stringField(item.date_published)) ?? validDate(stringField(item.date_modified))).map(readItem),
  };
}

function readItem(item: Record<string, unknown>): ItemDraft {
  // `id` must be a string, but 1.0 feeds sometimes write numbers.
  const guid = typeof item.id === 'number' ? String(item.id) : stringField(item.id);
  const summaryHtml =
    escapeIfText(stringField(item.summary)) ?? stringField(item.content_html) ?? escapeIfText(stringField(item.content_text));
  const published = validDate(stringField(item.date_published)) ?? validDate(stringField(item.date_modified));
  return {
    guid,
    title: stringField(item.title),
    link: stringField(item.url) ?? stringField(item.external_url),
    summaryHtml,
    published,
  };
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new FeedError(`not valid JSON: ${describeJsonError(error, text)}`);
  }
}

/** V8 reports a character position; a line number is what a person can look up. */
function describeJsonError(error: unknown, text: string): string {
  const message = error instanceof Error ? error.message : String(error);
  const position = /at position (\d+)/.exec(message);
  if (position?.[1] !== undefined) {
    const offset = Number(position[1]);
    const atEnd = offset >= text.trimEnd().length;
    const line = lineAt(text, offset);
    const what = message.replace(/\s*in JSON at position \d+.*$/s, '').toLowerCase();
    return atEnd ? `the document ends early, at line ${line} (${what})` : `${what} at line ${line}`;
  }
  if (/unexpected end/i.test(message)) return `the document ends early at line ${lineAt(text, text.length)}`;
  return message;
}

function lineAt(text: string, offset: number): number {
  let line = 1;
  for (let i = 0; i < offset && i < text.length; i++) if (text.charCodeAt(i) === 10) line++;
  return line;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function stringField(value: unknown): string | undefined {
  return typeof value === 'string' ? nonBlank(value) : undefined;
}

/**
 * JSON Feed's `summary` and `content_text` are plain text; the shared pipeline expects HTML. Only
 * `<` is escaped: publishers write entities like "&amp;" into these fields and mean the character.
 */
function escapeIfText(text: string | undefined): string | undefined {
  return text?.replace(/</g, '&lt;');
}
