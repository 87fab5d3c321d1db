/**
 * HTML for Matrix messages: escaping, sanitizing to the tags and attributes the spec lets clients
 * render, and cutting text or HTML to a size without leaving a broken message.
 */
import sanitizeHtml from 'sanitize-html';

/** The spec's suggested set (Client-Server API, "m.room.message msgtypes"), minus images. */
const MATRIX_HTML: sanitizeHtml.IOptions = {
  allowedTags: [
    'font', 'del', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'blockquote', 'p', 'a', 'ul', 'ol', 'sup', 'sub', 'li', 'b', 'i',
    'u', 'strong', 'em', 'strike', 's', 'code', 'hr', 'br', 'div', 'table', 'thead', 'tbody', 'tr', 'th', 'td', 'caption',
    'pre', 'span', 'details', 'summary',
  ],
  allowedAttributes: {
    font: ['data-mx-bg-color', 'data-mx-color', 'color'],
    span: ['data-mx-bg-color', 'data-mx-color', 'data-mx-spoiler'],
    a: ['name', 'target', 'href'],
    ol: ['start'],
    code: ['class'],
  },
  allowedClasses: { code: [/^language-[\w-]+$/] },
  allowedSchemes: ['https', 'http', 'ftp', 'mailto', 'magnet', 'matrix'],
  allowProtocolRelative: false,
  // Scripts and styles go with their content; other unknown tags keep their text.
  nonTextTags: ['script', 'style', 'textarea', 'option', 'noscript', 'title', 'head'],
  disallowedTagsMode: 'discard',
};

export function sanitizeMatrixHtml(html: string): string {
  return sanitizeHtml(html, MATRIX_HTML);
}

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

/**
 * Cuts sanitized HTML to fit: the raw prefix is re-sanitized, which closes any tag it cut through
 * and drops a half-written one. Undefined when not even the marker fits.
 */
export function cutHtml(html: string, maxJsonBytes: number, markerHtml: string): string | undefined {
  if (jsonBytes(html) <= maxJsonBytes) return html;
  let budget = maxJsonBytes;
  for (let attempt = 0; attempt < 8 && budget > 0; attempt += 1) {
    const prefix = cutText(html, budget, '');
    const candidate = sanitizeMatrixHtml(prefix) + markerHtml;
    if (jsonBytes(candidate) <= maxJsonBytes) return candidate;
    // Re-sanitizing can grow the text (closing tags, escaped characters): try again with less.
    budget -= Math.max(64, jsonBytes(candidate) - maxJsonBytes);
  }
  return undefined;
}
