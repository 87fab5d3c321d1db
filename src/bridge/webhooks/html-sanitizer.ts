/**
 * Sanitizing HTML to the tags and attributes the spec lets clients render, and cutting HTML to a
 * size without leaving a broken message. Loaded with the webhook renderers, on first use.
 */
import sanitizeHtml from 'sanitize-html';
import { cutText, jsonBytes } from '../matrix-html.js';

/** The spec's suggested set (Client-Server API, "m.room.message msgtypes"), minus images. */
const MATRIX_HTML: sanitizeHtml.IOptions = {
  allowedTags: [
    'font', 'del', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'blockquote', 'p', 'a', 'ul', 'ol', 'sup', 'sub', 'li', 'b', 'i',
    'u', 'strong', 'em', 'strike', 's', 'code', 'hr', 'br', 'div', 'table', 'thead', 'tbody', 'tr', 'th', 'td', 'caption',
    'pre', 'span', 'details', 'summary',
    // Only so that exclusiveFilter below sees it and drops it whole.
    'mx-reply',
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
  // A reply fallback goes with everything in it: the bridge's messages reply to nobody, and the
  // quote it holds would make a webhook's text look like a reply to someone else's words.
  exclusiveFilter: (frame) => frame.tag === 'mx-reply',
};

export function sanitizeMatrixHtml(html: string): string {
  return sanitizeHtml(html, MATRIX_HTML);
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
