// What to tell a user who pasted a web page's address instead of its feed's: that it is a page,
// and, when the page advertises its feed the standard way (`<link rel="alternate" type=...>`),
// where the feed is.
import { Parser } from 'htmlparser2';
import { FeedError } from './error.js';
import { absoluteUrl, collapseWhitespace } from './html-text.js';

const FEED_TYPES = new Set(['application/rss+xml', 'application/atom+xml', 'application/feed+json', 'application/rdf+xml']);

export interface HtmlPageFacts {
  title?: string;
  /** Absolute URLs of the feeds the page links to, in document order. */
  feedUrls: string[];
}

export function readHtmlPage(html: string, pageUrl: string): HtmlPageFacts {
  let baseUrl = pageUrl;
  const hrefs: string[] = [];
  let title = '';
  let inTitle = false;
  let titleDone = false;
  const parser = new Parser(
    {
      onopentag(name, attribs) {
        if (name === 'base' && attribs.href) baseUrl = absoluteUrl(attribs.href, pageUrl) ?? pageUrl;
        if (name === 'title' && !titleDone) inTitle = true;
        const rels = (attribs.rel ?? '').toLowerCase().split(/\s+/);
        const type = (attribs.type ?? '').toLowerCase().split(';')[0]?.trim() ?? '';
        if (name === 'link' && rels.includes('alternate') && FEED_TYPES.has(type) && attribs.href) {
          hrefs.push(attribs.href);
        }
      },
      ontext(text) {
        if (inTitle) title += text;
      },
      onclosetag(name) {
        if (name === 'title' && inTitle) {
          inTitle = false;
          titleDone = true;
        }
      },
    },
    { decodeEntities: true, lowerCaseTags: true, lowerCaseAttributeNames: true },
  );
  parser.end(html);
  const feedUrls = [...new Set(hrefs.map((href) => absoluteUrl(href, baseUrl)).filter((url) => url !== undefined))];
  const cleanTitle = collapseWhitespace(title);
  return { feedUrls, ...(cleanTitle ? { title: cleanTitle } : {}) };
}

export function htmlPageError(html: string, pageUrl: string): FeedError {
  const page = readHtmlPage(html, pageUrl);
  const [first, ...others] = page.feedUrls;
  if (first !== undefined) {
    const more = others.length === 0 ? '' : ` and ${others.length} other feed${others.length === 1 ? '' : 's'}`;
    return new FeedError(`that page is HTML, not a feed (it links to a feed at ${first}${more})`);
  }
  const titled = page.title ? ` (its title is "${page.title}")` : '';
  return new FeedError(`that page is HTML, not a feed${titled}`);
}
