// Feed titles and summaries arrive as HTML of unknown quality. Chat messages need either plain text
// or a small, safe subset of HTML, both short. These helpers do that conversion.
import { Parser } from 'htmlparser2';
import sanitizeHtml from 'sanitize-html';

/** Tags whose text is not readable content. */
const SKIPPED_TAGS = new Set(['script', 'style', 'noscript', 'template', 'head', 'title', 'iframe', 'object', 'mx-reply']);
/** Tags that separate words even without surrounding whitespace (`<p>a</p><p>b</p>` reads "a b"). */
const BREAKING_TAGS = new Set([
  'br', 'p', 'div', 'li', 'ul', 'ol', 'tr', 'td', 'th', 'table', 'blockquote', 'pre',
  'h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'hr', 'section', 'article', 'header', 'footer', 'figure', 'figcaption', 'dd', 'dt',
]);

/**
 * Plain text of an HTML fragment: tags dropped, entities decoded, whitespace collapsed. Titles pass
 * `keepAllText`: a title saying "Why <script> tags block rendering" must not lose its last words.
 */
export function htmlToText(html: string, { keepAllText = false } = {}): string {
  const parts: string[] = [];
  const skipped = keepAllText ? new Set<string>() : SKIPPED_TAGS;
  let skipDepth = 0;
  const parser = new Parser(
    {
      onopentag(name) {
        if (skipped.has(name)) skipDepth++;
        if (BREAKING_TAGS.has(name)) parts.push(' ');
      },
      onclosetag(name) {
        if (skipped.has(name)) skipDepth = Math.max(0, skipDepth - 1);
        if (BREAKING_TAGS.has(name)) parts.push(' ');
      },
      ontext(text) {
        if (skipDepth === 0) parts.push(text);
      },
    },
    { decodeEntities: true },
  );
  parser.end(html);
  return collapseWhitespace(parts.join(''));
}

export function collapseWhitespace(text: string): string {
  return text.replace(/\s+/g, ' ').trim();
}

/** Cuts text to at most `maxChars` (plus "…"), at a word boundary when one is reasonably close. */
export function truncateText(text: string, maxChars: number): string {
  if (text.length <= maxChars) return text;
  const cut = text.slice(0, maxChars);
  const lastSpace = cut.lastIndexOf(' ');
  const atWord = lastSpace >= maxChars * 0.6 ? cut.slice(0, lastSpace) : cut;
  return `${atWord.replace(/[\s,;:.\-–—]+$/u, '')}…`;
}

/** What chat clients render safely; everything else is dropped (its text kept, except for scripts). */
const SAFE_TAGS = ['a', 'b', 'strong', 'i', 'em', 'code', 'pre', 'p', 'br', 'ul', 'ol', 'li', 'blockquote'];

/**
 * Safe, short HTML for a chat message: only SAFE_TAGS, links made absolute against `baseUrl` and
 * limited to http/https/mailto, then cut to about `maxTextChars` characters of text with every
 * open tag closed. Returns undefined when nothing readable is left.
 */
export function summarizeHtml(html: string, baseUrl: string, maxTextChars: number): string | undefined {
  const safe = sanitizeHtml(html, {
    // mx-reply only so that exclusiveFilter sees it and drops it, quote and all.
    allowedTags: [...SAFE_TAGS, 'mx-reply'],
    allowedAttributes: { a: ['href'] },
    allowedSchemes: ['http', 'https', 'mailto'],
    allowedSchemesAppliedToAttributes: ['href'],
    allowProtocolRelative: false,
    transformTags: {
      a: (tagName, attribs) => {
        const href = attribs.href === undefined ? undefined : absoluteUrl(attribs.href, baseUrl);
        const kept: Record<string, string> = href === undefined ? {} : { href };
        return { tagName, attribs: kept };
      },
    },
    // Links left empty once their images are gone (feed "share" buttons, tracking pixels).
    // A reply fallback would make a feed item look like a reply to someone.
    exclusiveFilter: (frame) => (frame.tag === 'a' && frame.text.trim() === '') || frame.tag === 'mx-reply',
  });
  const cut = truncateHtml(safe, maxTextChars);
  return htmlToText(cut) === '' ? undefined : cut.trim();
}

/** Resolves a possibly relative URL; undefined when it cannot be parsed. */
export function absoluteUrl(url: string, baseUrl: string | undefined): string | undefined {
  try {
    return new URL(url.trim(), baseUrl).href;
  } catch {
    return undefined;
  }
}

const VOID_TAGS = new Set(['br']);

/**
 * Re-serializes already sanitized HTML, stopping once `maxTextChars` characters of text have been
 * written and closing whatever is still open, so a cut never leaves `<b>` or `<a>` dangling.
 */
function truncateHtml(html: string, maxTextChars: number): string {
  const out: string[] = [];
  const open: string[] = [];
  let budget = maxTextChars;
  let done = false;
  const parser = new Parser(
    {
      onopentag(name, attribs) {
        if (done) return;
        const attrs = Object.entries(attribs)
          .map(([key, value]) => ` ${key}="${escapeHtml(value)}"`)
          .join('');
        out.push(`<${name}${attrs}>`);
        if (!VOID_TAGS.has(name)) open.push(name);
      },
      onclosetag(name) {
        if (done || VOID_TAGS.has(name)) return;
        if (open.at(-1) === name) {
          open.pop();
          out.push(`</${name}>`);
        }
      },
      ontext(text) {
        if (done) return;
        // Outside <pre>, line breaks and indentation in the source are just spaces.
        const readable = open.includes('pre') ? text : text.replace(/\s+/g, ' ');
        if (readable.length <= budget) {
          out.push(escapeHtml(readable));
          budget -= readable.length;
          return;
        }
        out.push(escapeHtml(truncateText(readable, budget)));
        done = true;
      },
    },
    { decodeEntities: true },
  );
  parser.end(html);
  while (open.length > 0) out.push(`</${open.pop()}>`);
  return out.join('');
}

function escapeHtml(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}
