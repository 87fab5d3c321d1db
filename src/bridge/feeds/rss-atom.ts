// RSS 0.9x/1.0/2.0 and Atom through @rowanmanning/feed-parser, which already copes with the mess
// real feeds are (namespaced RDF, xml:base, CDATA, missing fields). Its XML parser (fast-xml-parser)
// is lenient to the point of accepting a truncated document as a feed with no items, so we check
// well-formedness first with the same library's validator to give truncated downloads a clear error.
import { parseFeed as parseXmlFeedDocument } from '@rowanmanning/feed-parser';
import { XMLValidator } from 'fast-xml-parser';
import { FeedError } from './error.js';
import { newestItems, nonBlank, validDate, type FeedDraft, type FeedFormat, type ItemDraft } from './draft.js';
import { prologOf, rootElementName } from './sniff.js';

export function readXmlFeed(document: string): FeedDraft {
  refuseEntityDeclarations(document);
  const text = escapeBareAmpersands(document);
  checkWellFormed(text);

  const root = rootElementName(text);
  let feed: ReturnType<typeof parseXmlFeedDocument>;
  try {
    feed = parseXmlFeedDocument(text);
  } catch {
    throw new FeedError(`that XML document is not an RSS or Atom feed (its root element is <${root ?? '?'}>)`);
  }
  const format = formatOf(feed.meta.type, root);
  // Every item's link getter resolves against the feed's link, which the library finds by walking
  // all of the channel's children again: 20,000 items took a minute. Resolved once, it is pinned
  // on the feed object, where the items' getters read it.
  const link = feed.url;
  Object.defineProperty(feed, 'url', { value: link });
  const items = newestItems(feed.items, (item) => validDate(item.published) ?? validDate(item.updated));
  return {
    format,
    title: nonBlank(feed.title),
    link: nonBlank(link),
    items: items.map((item): ItemDraft => {
      const guid = nonBlank(item.id);
      const description = nonBlank(item.description);
      return {
        guid,
        title: nonBlank(item.title),
        // An RSS guid is a permalink unless marked otherwise; Braingle's items have a guid and no link.
        link: nonBlank(item.url) ?? (format === 'rss' && guid && /^https?:\/\//i.test(guid) ? guid : undefined),
        summaryHtml: description ?? nonBlank(item.content),
        baseUrl: contentBaseUrl(item.element, format === 'atom' ? (description ? 'summary' : 'content') : undefined),
        published: validDate(item.published) ?? validDate(item.updated),
      };
    }),
  };
}

type XmlElement = ReturnType<typeof parseXmlFeedDocument>['element'];

/**
 * The xml:base in force for the item's summary or content (Daring Fireball and reddit put one on
 * every <content>); possibly relative, to be resolved against the feed URL.
 */
function contentBaseUrl(itemElement: XmlElement, childName: string | undefined): string | undefined {
  const child = childName === undefined ? null : itemElement.findElementWithName(childName);
  return nonBlank((child ?? itemElement).baseUrl);
}

function formatOf(type: string, root: string | undefined): FeedFormat {
  if (type === 'atom') return 'atom';
  return root !== undefined && /(^|:)RDF$/.test(root) ? 'rdf' : 'rss';
}

/**
 * Internal DTD entities are how "billion laughs" documents explode in memory, and the library
 * lifts fast-xml-parser's expansion limit. Real feeds do not declare entities.
 */
function refuseEntityDeclarations(text: string): void {
  if (/<!ENTITY/i.test(prologOf(text))) {
    throw new FeedError('the feed declares its own XML entities, which we do not read');
  }
}

/**
 * The commonest breakage in real feeds is a bare "&" ("AT&T", "?a=1&b=2"). Lenient readers take it
 * literally and so do we, by escaping it (outside CDATA, where it is already literal) before the
 * well-formedness check, which would otherwise stop at it.
 */
function escapeBareAmpersands(text: string): string {
  return text
    .split(/(<!\[CDATA\[[\s\S]*?\]\]>)/)
    .map((part, i) => (i % 2 === 1 ? part : part.replace(/&(?!#\d+;|#x[0-9a-f]+;|[a-z][\w.-]*;)/gi, '&amp;')))
    .join('');
}

/**
 * Structural errors are reported rather than guessed around: the lenient parser "recovers" from an
 * unclosed tag by swallowing the items after it, which would silently lose posts.
 */
function checkWellFormed(text: string): void {
  const result = XMLValidator.validate(text, { allowBooleanAttributes: true });
  if (result === true) return;
  const { msg, line, col } = result.err;
  // For a document that stops early the validator lists the elements left open.
  const unclosed = /^Invalid '(\[.*\])' found\.?$/s.exec(msg)?.[1];
  if (unclosed !== undefined) {
    const names = parseNameList(unclosed);
    const open = names.length > 0 ? ` (${names.map((name) => `<${name}>`).join(', ')} never closed)` : '';
    throw new FeedError(`not valid XML: unexpected end of document at line ${lineCount(text)}${open}`);
  }
  const unclosedTag = /^Unclosed tag '([^']+)'/.exec(msg)?.[1];
  if (unclosedTag !== undefined) {
    throw new FeedError(`not valid XML: unexpected end of document at line ${lineCount(text)} (<${unclosedTag}> never closed)`);
  }
  // A download cut inside a tag shows up as some complaint about that tag, right at the end.
  if (text.trimEnd().length - offsetOf(text, line, col) < 64) {
    throw new FeedError(`not valid XML: unexpected end of document at line ${lineCount(text)}`);
  }
  throw new FeedError(`not valid XML: ${msg.replace(/\.$/, '')} at line ${line}`);
}

function offsetOf(text: string, line: number, col: number): number {
  let offset = 0;
  for (let current = 1; current < line; current++) {
    const newline = text.indexOf('\n', offset);
    if (newline === -1) break;
    offset = newline + 1;
  }
  return offset + col - 1;
}

function parseNameList(json: string): string[] {
  try {
    const names: unknown = JSON.parse(json);
    return Array.isArray(names) ? names.filter((name): name is string => typeof name === 'string') : [];
  } catch {
    return [];
  }
}

function lineCount(text: string): number {
  return text.trimEnd().split('\n').length;
}
