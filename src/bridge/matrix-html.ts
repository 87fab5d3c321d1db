/**
 * Text for Matrix messages: escaping for HTML, and cutting text to a size. Sanitizing HTML is in
 * webhooks/html-sanitizer.ts, which only the webhook renderers load (sanitize-html and its parser
 * are a third of the server's code, loaded on the first webhook instead of at start).
 */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (char) => `&#${char.charCodeAt(0)};`);
}

/** At most `max` characters (whole code points) of `text`, with "…" when cut: for quoting in a room. */
export function clip(text: string, max: number): string {
  const chars = [...text];
  return chars.length > max ? `${chars.slice(0, max).join('')}…` : text;
}

/** Bytes a string takes inside a JSON document (quotes and escapes included). */
export function jsonBytes(value: string): number {
  return Buffer.byteLength(JSON.stringify(value), 'utf8');
}

/**
 * The longest prefix of `text` (whole code points) that, with `marker` appended, takes at most
 * `maxJsonBytes` as a JSON string. Returns `text` itself when it already fits.
 */
export function cutText(text: string, maxJsonBytes: number, marker: string): string {
  if (jsonBytes(text) <= maxJsonBytes) return text;
  const points = [...text];
  let low = 0;
  let high = points.length;
  while (low < high) {
    const mid = Math.ceil((low + high) / 2);
    if (jsonBytes(points.slice(0, mid).join('') + marker) <= maxJsonBytes) low = mid;
    else high = mid - 1;
  }
  return points.slice(0, low).join('') + marker;
}
