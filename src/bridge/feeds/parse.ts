// Bytes in, a clean feed out: decode, recognise the format from the content, read it with the
// format's reader, then give every item the same treatment (plain-text title, safe short summary,
// absolute link, stable id). Every failure is a FeedError whose message a chat user can act on.
import { decodeFeedText } from './decode-text.js';
import { FeedError } from './error.js';
import type { FeedDraft, FeedFormat, ItemDraft } from './draft.js';
import { htmlPageError } from './html-page.js';
import { absoluteUrl, htmlToText, summarizeHtml, truncateText } from './html-text.js';
import { assignItemIds } from './item-ids.js';
import { readJsonFeed } from './json-feed.js';
import { fromFirstMarkup, looksLikeHtml, looksLikeJson, rootElementName } from './sniff.js';
import { readXmlFeed } from './rss-atom.js';

export type { FeedFormat };

export interface FeedItem {
  /** Stable de-duplication key, unique within one parse (see item-ids.ts for the rules). */
  id: string;
  /** Plain text: entities decoded, whitespace collapsed, HTML tags stripped. */
  title?: string;
  /** Absolute http(s) URL. */
  link?: string;
  /** Plain text, cut to about 300 characters at a word boundary with "…". */
  summaryText?: string;
  /** Sanitized HTML (a few safe tags, absolute links), cut to a few hundred characters of text. */
  summaryHtml?: string;
  /** Published, else updated; undefined when absent or unparsable. */
  published?: Date;
}

export interface ParsedFeed {
  /** rss covers 0.91/0.92/2.0; rdf covers RSS 0.90 and 1.0. */
  format: FeedFormat;
  title?: string;
  /** The site link, absolute. */
  link?: string;
  /** Document order. */
  items: FeedItem[];
}

const SUMMARY_TEXT_CHARS = 300;
const SUMMARY_HTML_TEXT_CHARS = 500;

/** Detects the format from the content (not the URL or content-type), decodes the bytes, parses. Throws FeedError. */
export function parseFeed(body: Buffer, source: { url: string; contentType?: string }): ParsedFeed {
  try {
    const text = fromFirstMarkup(decodeFeedText(body, source.contentType));
    if (text.trim() === '') throw new FeedError('the document is empty');
    return finishFeed(readDraft(text, source.url), source.url);
  } catch (error) {
    if (error instanceof FeedError) throw error;
    // A document odd enough to trip up a library still gets an answer the caller can post.
    throw new FeedError(`the feed could not be read (${error instanceof Error ? error.message : String(error)})`, { cause: error });
  }
}

function readDraft(text: string, url: string): FeedDraft {
  if (looksLikeJson(text)) return readJsonFeed(text);
  if (looksLikeHtml(text)) throw htmlPageError(text, url);
  if (rootElementName(text) === undefined) throw new FeedError('that is not a feed: the document is neither XML nor JSON');
  return readXmlFeed(text);
}

function finishFeed(draft: FeedDraft, url: string): ParsedFeed {
  // An item with no title, link or text (Le Cercle Psy has one) has nothing to post.
  const items = draft.items
    .map((item) => finishItem(item, draft.format, url))
    .filter((item) => item.title !== undefined || item.link !== undefined || item.summaryText !== undefined);
  const ids = assignItemIds(items);
  const title = draft.title === undefined ? undefined : titleText(draft.title, draft.format);
  return withoutUndefined({
    format: draft.format,
    title: title || undefined,
    link: httpUrl(draft.link, url),
    items: items.flatMap((item, i) => {
      const id = ids[i];
      if (id === undefined) return [];
      const { guid: _guid, ...rest } = item;
      return [withoutUndefined({ id, ...rest })];
    }),
  });
}

/** An item ready to post, still carrying the guid its id is derived from. */
type FinishedItem = Omit<FeedItem, 'id'> & { guid?: string };

function finishItem(draft: ItemDraft, format: FeedFormat, url: string): FinishedItem {
  const title = draft.title === undefined ? undefined : titleText(draft.title, format);
  const summaryText = draft.summaryHtml === undefined ? undefined : htmlToText(draft.summaryHtml);
  const contentBase = (draft.baseUrl === undefined ? undefined : absoluteUrl(draft.baseUrl, url)) ?? url;
  return {
    guid: draft.guid,
    title: title || undefined,
    link: httpUrl(draft.link, url),
    summaryText: summaryText ? truncateText(summaryText, SUMMARY_TEXT_CHARS) : undefined,
    summaryHtml: draft.summaryHtml === undefined ? undefined : summarizeHtml(draft.summaryHtml, contentBase, SUMMARY_HTML_TEXT_CHARS),
    published: draft.published,
  };
}

/**
 * Titles in XML feeds are treated as HTML (type="html" titles, CDATA with markup). JSON Feed titles
 * are plain text, so "<i>" in one is literally "<i>" and stays; publishers still write entities
 * like "&amp;" there, which we decode.
 */
function titleText(title: string, format: FeedFormat): string {
  return htmlToText(format === 'json' ? title.replace(/</g, '&lt;') : title, { keepAllText: true });
}

/** Links we post must be web links; a `javascript:` or `data:` link in a feed is dropped. */
function httpUrl(link: string | undefined, baseUrl: string): string | undefined {
  const url = link === undefined ? undefined : absoluteUrl(link, baseUrl);
  return url !== undefined && /^https?:/i.test(url) ? url : undefined;
}

/** Leaves absent fields out entirely, so `'title' in item` and deep equality behave. */
function withoutUndefined<T extends object>(value: T): T {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as T;
}
