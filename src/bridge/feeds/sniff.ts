// Format detection looks at the document itself: servers label feeds text/html, text/plain or
// application/octet-stream often enough that neither the URL nor the content type can be trusted.

/**
 * The document from its first markup on. Real feeds arrive with a newline before `<?xml ...?>`
 * (a WordPress theme's stray blank line), byte order marks or zero-width characters, or a PHP
 * warning printed before the feed; XML allows nothing before the declaration, lenient readers
 * (feedparser, Miniflux) skip it, and so do we: everything before the XML declaration, or before
 * the first `<` in a document without one. JSON is left
 * as it is (its reader allows leading whitespace, and its errors count lines).
 */
export function fromFirstMarkup(text: string): string {
  const start = text.search(/[^\s\uFEFF\u200B]/);
  if (start === -1 || text[start] === '{' || text[start] === '[') return text;
  // PHP writes its warnings as HTML (`<br />\n<b>Warning</b>: ...`): an XML declaration a little
  // further on is where the document starts.
  const declaration = text.slice(0, 4096).search(/<\?xml\s/);
  if (declaration > start) return text.slice(declaration);
  const markup = text.indexOf('<', start);
  return markup === -1 ? text : text.slice(markup);
}

/** The first element's name, past the XML declaration, processing instructions, comments and doctype. */
export function rootElementName(text: string): string | undefined {
  return /^<([A-Za-z_][\w.:-]*)/.exec(text.slice(prologLength(text)))?.[1];
}

/** Everything before the root element: declaration, processing instructions, comments, doctype. */
export function prologOf(text: string): string {
  return text.slice(0, prologLength(text));
}

function prologLength(text: string): number {
  let rest = text.trimStart();
  for (;;) {
    if (rest.startsWith('<?')) rest = after(rest, '?>');
    else if (rest.startsWith('<!--')) rest = after(rest, '-->');
    else if (/^<!doctype/i.test(rest)) rest = afterDoctype(rest);
    else break;
    rest = rest.trimStart();
  }
  return text.length - rest.length;
}

function after(text: string, terminator: string): string {
  const end = text.indexOf(terminator);
  return end === -1 ? '' : text.slice(end + terminator.length);
}

/** A doctype may carry an internal subset in brackets, which can itself contain `>`. */
function afterDoctype(text: string): string {
  const bracket = text.indexOf('[');
  const close = text.indexOf('>');
  if (bracket !== -1 && bracket < close) return after(after(text, ']'), '>');
  return after(text, '>');
}

/** Elements that only an HTML page starts with (an IIS "Object Moved" page starts at `<head>`). */
const HTML_ROOTS = new Set([
  'html', 'head', 'body', 'title', 'meta', 'link', 'script', 'style', 'div', 'p', 'a', 'h1', 'h2',
  'table', 'center', 'font', 'pre', 'span', 'br', 'form', 'iframe', 'noscript',
]);

export function looksLikeHtml(text: string): boolean {
  if (/^\s*(<\?xml[^>]*>\s*)?<!doctype\s+html/i.test(text)) return true;
  const root = rootElementName(text);
  return root !== undefined && HTML_ROOTS.has(root.toLowerCase());
}

export function looksLikeJson(text: string): boolean {
  return /^\s*[{[]/.test(text);
}
