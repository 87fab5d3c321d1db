// Format detection looks at the document itself: servers label feeds text/html, text/plain or
// application/octet-stream often enough that neither the URL nor the content type can be trusted.

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
