// Item ids are how the bridge knows what it already posted, so they must be unique within one
// parse and come out the same on the next poll of an unchanged feed. Publishers reuse guids
// (Scripting News gives two different posts the same guid) and repeat items, hence the rules below.
import { createHash } from 'node:crypto';

export interface IdentifiableItem {
  /** guid / id as the feed wrote it. */
  guid?: string;
  title?: string;
  link?: string;
  summaryText?: string;
  published?: Date;
}

/**
 * The id for each item, or undefined for an item that repeats an earlier one exactly (drop it).
 * Base id: guid, else link, else a hash of title + date (+ summary when either is missing).
 * A later item whose base id is taken gets `#` and a hash of its own content appended.
 */
export function assignItemIds(items: IdentifiableItem[]): Array<string | undefined> {
  const fingerprintsById = new Map<string, Set<string>>();
  const taken = new Set<string>();
  return items.map((item) => {
    const base = baseId(item);
    const fingerprint = contentFingerprint(item);
    const seen = fingerprintsById.get(base) ?? new Set<string>();
    fingerprintsById.set(base, seen);
    if (seen.has(fingerprint)) return undefined;
    seen.add(fingerprint);

    const id = taken.has(base) ? `${base}#${fingerprint.slice(0, 12)}` : base;
    taken.add(id);
    return id;
  });
}

function baseId(item: IdentifiableItem): string {
  if (item.guid) return item.guid;
  if (item.link) return item.link;
  const date = item.published?.toISOString() ?? '';
  const parts = [item.title ?? '', date];
  if (!item.title || !date) parts.push(item.summaryText ?? '');
  return `hash:${sha256(parts.join('\n')).slice(0, 32)}`;
}

function contentFingerprint(item: IdentifiableItem): string {
  return sha256(JSON.stringify([item.title ?? '', item.link ?? '', item.summaryText ?? '', item.published?.toISOString() ?? '']));
}

function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}
