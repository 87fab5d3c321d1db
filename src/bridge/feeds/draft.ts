// What each format's reader hands to parse.ts: the feed's fields as found, before the shared
// clean-up (plain-text titles, safe summaries, absolute links, ids).

/** rss covers 0.91/0.92/2.0; rdf covers RSS 0.90 and 1.0. */
export type FeedFormat = 'rss' | 'rdf' | 'atom' | 'json';

export interface ItemDraft {
  /** guid / id as written, if any. */
  guid?: string;
  /** As written: HTML in the XML formats, plain text in JSON Feed. */
  title?: string;
  /** Possibly relative. */
  link?: string;
  /** The short description if there is one, else the full content; HTML. */
  summaryHtml?: string;
  /** xml:base in force for summaryHtml, possibly relative to the feed URL. */
  baseUrl?: string;
  published?: Date;
}

export interface FeedDraft {
  format: FeedFormat;
  title?: string;
  link?: string;
  items: ItemDraft[];
}

/** A Date, or undefined for missing and unparsable dates (we never post "Invalid Date"). */
export function validDate(value: Date | string | null | undefined): Date | undefined {
  if (value === null || value === undefined || value === '') return undefined;
  const date = value instanceof Date ? value : new Date(value);
  return Number.isNaN(date.getTime()) ? undefined : date;
}

/** Trimmed text, or undefined when blank. */
export function nonBlank(value: string | null | undefined): string | undefined {
  const trimmed = value?.trim();
  return trimmed ? trimmed : undefined;
}

/**
 * Items read from one document at most. A feed lists what is new and a poll posts at most
 * `max_items_per_poll` (100 at most): an archive of 20,000 items costs no more to read than this.
 * Reading stops before anything about the others is resolved.
 */
export const MAX_ITEMS_READ = 500;

/**
 * The items worth reading when a document holds more than MAX_ITEMS_READ: the newest. Feeds list
 * newest first, except the few that append; which one this is shows in the dates of the first and
 * last items, so only those two are looked at.
 */
export function newestItems<T>(items: readonly T[], dateOf: (item: T) => Date | undefined): readonly T[] {
  if (items.length <= MAX_ITEMS_READ) return items;
  const first = dateOf(items[0]!)?.getTime();
  const last = dateOf(items[items.length - 1]!)?.getTime();
  const appending = first !== undefined && last !== undefined && last > first;
  return appending ? items.slice(items.length - MAX_ITEMS_READ) : items.slice(0, MAX_ITEMS_READ);
}
