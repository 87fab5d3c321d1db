// Every document in the shared corpus, with what parseFeed must make of it. A file added to the
// corpus without a row here fails the first test, so nobody forgets to decide what it should do.
import { describe, expect, it } from 'vitest';
import { FeedError } from '../../src/bridge/feeds/error.js';
import { parseFeed, type ParsedFeed } from '../../src/bridge/feeds/parse.js';
import { feedFixture, feedFixtureNames } from '../support/feeds.js';

type Expectation =
  | { format: ParsedFeed['format']; items: number; url?: string; note?: string }
  | { error: RegExp; url?: string };

const DEFAULT_URL = 'https://feeds.example.org/feed';

const EXPECTED: Record<string, Expectation> = {
  'atom-daringfireball-xml-base-html.xml': { format: 'atom', items: 48, url: 'https://daringfireball.net/feeds/main' },
  'atom-github-commits-miniflux.xml': { format: 'atom', items: 20, url: 'https://github.com/miniflux/v2/commits/main.atom' },
  'atom-github-releases-gulp.xml': { format: 'atom', items: 10, url: 'https://github.com/gulpjs/gulp/releases.atom' },
  'atom-google-alerts-html-titles.xml': { format: 'atom', items: 20 },
  'atom-intertwingly-xhtml-relative-links.xml': { format: 'atom', items: 20, url: 'http://intertwingly.net/blog/index.atom' },
  'atom-reddit-relative-xml-base.xml': { format: 'atom', items: 24, url: 'https://www.reddit.com/.rss' },
  'atom-youtube-channel-l2inc.xml': { format: 'atom', items: 15 },
  'broken-truncated-jsonfeed-allthis.json': { error: /^not valid JSON: the document ends early, at line \d+/ },
  'broken-truncated-rss-reuters.xml': { error: /^not valid XML: unexpected end of document at line 19 \(<rss>, <channel> never closed\)$/ },
  'broken-undeclared-latin1-lecerclepsy.xml': { format: 'rss', items: 9, note: 'recovered: sniffed as windows-1252; one empty <item> dropped' },
  'broken-undefined-html-entity-dbengines.xml': { format: 'rss', items: 1, note: 'recovered: &nbsp; left as text' },
  'jsonfeed-1.0-daringfireball.json': { format: 'json', items: 48 },
  'jsonfeed-1.1-journal3960.json': { format: 'json', items: 20 },
  'jsonfeed-1.1-lukedorny-escaped-slashes.json': { format: 'json', items: 30 },
  'not-a-feed-daringfireball-homepage.html': {
    error: /^that page is HTML, not a feed \(it links to a feed at https:\/\/daringfireball\.net\/feeds\/main\)$/,
    url: 'https://daringfireball.net/',
  },
  'not-a-feed-document-moved.html': { error: /^that page is HTML, not a feed \(its title is "Document Moved"\)$/ },
  'not-jsonfeed-rssjs-scriptingnews.json': { error: /^that is RSS written as JSON \("RSS in JSON"\), not a JSON Feed/ },
  'rss090-rdf-heise-no-dates-no-guids.xml': { format: 'rdf', items: 60 },
  'rss091-dicas-l-iso-8859-1.xml': { format: 'rss', items: 1 },
  'rss092-userland-untitled-items-enclosure.xml': { format: 'rss', items: 3 },
  'rss1-rdf-craigslist-cdata-entities.xml': { format: 'rdf', items: 25 },
  'rss2-bogus-phpxml-prolog.xml': { format: 'rss', items: 20 },
  'rss2-braingle-feedburner-duplicate-guid-elements.xml': { format: 'rss', items: 1 },
  'rss2-dustri-very-long-items.xml': { format: 'rss', items: 25 },
  'rss2-gb2312-kc0011.xml': { format: 'rss', items: 20 },
  'rss2-guardian-html-description.xml': { format: 'rss', items: 55 },
  'rss2-hackernews-no-guid-no-xmldecl.xml': { format: 'rss', items: 30 },
  'rss2-iso-8859-1-golem.xml': { format: 'rss', items: 40 },
  'rss2-macworld-no-xmldecl-no-guid-image-enclosures.xml': { format: 'rss', items: 30 },
  'rss2-medium-cdata-content-encoded.xml': { format: 'rss', items: 7 },
  'rss2-pcmag-illegally-nested-items.xml': { format: 'rss', items: 10, note: 'recovered: the stray self-closed <item /> is skipped' },
  'rss2-podcast-omnishow-itunes-enclosures.xml': { format: 'rss', items: 4 },
  'rss2-rsscom-wordpress-numeric-entities.xml': { format: 'rss', items: 100 },
  'rss2-scriptingnews-untitled-items-guid-collisions.xml': { format: 'rss', items: 50 },
  'rss2-squarespace-feedpress-opaque-guids.xml': { format: 'rss', items: 20 },
  'rss2-utf8-bom-donthitsave.xml': { format: 'rss', items: 10 },
  'rss2-windows-1251-ibash.xml': { format: 'rss', items: 50 },
  'rss2-wordpress-manton-missing-titles.xml': { format: 'rss', items: 10 },
  'rss2-wordpress-natashatherobot.xml': { format: 'rss', items: 10 },
};

describe('the shared feed corpus', () => {
  it('has an expectation for every file and a file for every expectation', () => {
    expect(feedFixtureNames()).toEqual(Object.keys(EXPECTED).sort());
  });

  describe.each(feedFixtureNames())('%s', (name) => {
    const expected = EXPECTED[name];
    if (expected === undefined) return;
    const source = { url: expected.url ?? DEFAULT_URL };

    // A partial download must not pass for a feed with fewer items.
    it('fails with a FeedError, never anything else, when cut short anywhere', () => {
      const whole = feedFixture(name);
      for (let eighth = 1; eighth < 8; eighth++) {
        const cut = whole.subarray(0, Math.floor((whole.length * eighth) / 8));
        expect(() => parseFeed(cut, source), `cut at ${eighth}/8`).toThrow(FeedError);
      }
    });

    if ('error' in expected) {
      it('fails with a readable FeedError', () => {
        let thrown: unknown;
        try {
          parseFeed(feedFixture(name), source);
        } catch (error) {
          thrown = error;
        }
        expect(thrown).toBeInstanceOf(FeedError);
        expect((thrown as FeedError).message).toMatch(expected.error);
      });
      return;
    }

    it(`yields ${expected.items} ${expected.format} items with sensible fields`, () => {
      const feed = parseFeed(feedFixture(name), source);
      expect(feed.format).toBe(expected.format);
      expect(feed.items).toHaveLength(expected.items);
      expect(feed.title).toBeTruthy();
      expect(new Set(feed.items.map((item) => item.id)).size).toBe(feed.items.length);
      for (const item of feed.items) {
        expect(item.id).not.toBe('');
        // Something to show in the room: a title, else a summary.
        expect(item.title ?? item.summaryText).toBeTruthy();
        if (item.link !== undefined) expect(item.link).toMatch(/^https?:\/\/[^/]/);
        for (const text of [item.title, item.summaryText, feed.title]) {
          // No mojibake, no entities left undecoded, no stray whitespace.
          expect(text ?? '').not.toMatch(/\uFFFD|&(amp|lt|gt|quot|#\d+);/);
          expect(text ?? '').toBe((text ?? '').trim());
        }
        // XML titles are HTML and lose their tags (JSON Feed titles are plain text and keep "<i>").
        if (feed.format !== 'json') expect(item.title ?? '').not.toMatch(/<\/?[a-z]+[ >]/i);
        if (item.published !== undefined) expect(Number.isNaN(item.published.getTime())).toBe(false);
        if (item.summaryHtml !== undefined) {
          expect(item.summaryHtml).not.toMatch(/<(img|script|iframe|style|object)\b|\son\w+=|javascript:/i);
          for (const [, href] of item.summaryHtml.matchAll(/href="([^"]*)"/g)) expect(href).toMatch(/^(https?:\/\/|mailto:)/);
        }
      }
    });

    it('gives the same ids when parsed again', () => {
      const ids = (buffer: Buffer) => parseFeed(buffer, source).items.map((item) => item.id);
      expect(ids(feedFixture(name))).toEqual(ids(feedFixture(name)));
    });
  });
});
