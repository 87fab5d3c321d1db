import { describe, expect, it } from 'vitest';
import iconv from 'iconv-lite';
import { FeedError } from '../../src/bridge/feeds/error.js';
import { MAX_ITEMS_READ } from '../../src/bridge/feeds/draft.js';
import { parseFeed, type ParsedFeed } from '../../src/bridge/feeds/parse.js';
import { feedFixture } from '../support/feeds.js';

const FEED_URL = 'https://feeds.example.org/feed';

function parseFixture(name: string, url = FEED_URL, contentType?: string): ParsedFeed {
  return parseFeed(feedFixture(name), { url, ...(contentType ? { contentType } : {}) });
}

function parseText(text: string, url = FEED_URL): ParsedFeed {
  return parseFeed(Buffer.from(text), { url });
}

function errorOf(run: () => unknown): FeedError {
  try {
    run();
  } catch (error) {
    if (error instanceof FeedError) return error;
    throw error;
  }
  throw new Error('expected a FeedError');
}

function rss(items: string, channel = '<title>T</title><link>https://site.example/</link>'): string {
  return `<?xml version="1.0"?><rss version="2.0"><channel>${channel}${items}</channel></rss>`;
}

describe('decoding', () => {
  it('reads ISO-8859-1 declared in the XML declaration (golem umlauts)', () => {
    const titles = parseFixture('rss2-iso-8859-1-golem.xml').items.map((item) => item.title);
    expect(titles).toContain('Machine Learning: Von KI erstelltes Porträt für 432.500 US.Dollar versteigert');
  });

  it('prefers the XML declaration over the HTTP charset', () => {
    const feed = parseFixture('rss2-iso-8859-1-golem.xml', FEED_URL, 'application/rss+xml; charset=utf-8');
    expect(feed.items.map((item) => item.title).join(' ')).toContain('Porträt für');
  });

  it('reads windows-1251 Cyrillic (ibash)', () => {
    expect(parseFixture('rss2-windows-1251-ibash.xml').items[0]?.title).toBe('Цитата #17703');
  });

  it('reads gb2312 Chinese (kc0011)', () => {
    expect(parseFixture('rss2-gb2312-kc0011.xml').items[0]?.title).toBe('建国35周年纪念，华表，和平鸽');
  });

  it('reads ISO-8859-1 Portuguese (dicas-l)', () => {
    expect(parseFixture('rss091-dicas-l-iso-8859-1.xml').items[0]?.title).toBe('bash - Expansão de Parâmetros');
  });

  it('skips a UTF-8 byte order mark (donthitsave)', () => {
    const feed = parseFixture('rss2-utf8-bom-donthitsave.xml');
    expect(feed.items[0]?.title).toBe('Skipping Around');
  });

  it('ignores a bogus <?phpxml?> prolog and reads UTF-8', () => {
    expect(parseFixture('rss2-bogus-phpxml-prolog.xml').items[0]?.title).toMatch(/^Serdar Gözübüyük scheidsrechter/);
  });

  it('falls back to windows-1252 for undeclared Latin-1 bytes instead of U+FFFD', () => {
    const feed = parseFixture('broken-undeclared-latin1-lecerclepsy.xml');
    expect(feed.items[0]?.summaryText).toContain("nombre d'études montrent");
    expect(JSON.stringify(feed)).not.toContain('\uFFFD');
  });

  it('uses the HTTP charset when the document declares none', () => {
    const body = iconv.encode(rss('<item><title>Привет</title><link>https://site.example/1</link></item>').replace('<?xml version="1.0"?>', ''), 'windows-1251');
    const feed = parseFeed(body, { url: FEED_URL, contentType: 'text/xml; charset="windows-1251"' });
    expect(feed.items[0]?.title).toBe('Привет');
  });

  it('reads UTF-16 with a byte order mark', () => {
    const text = rss('<item><title>Grüße</title><link>https://site.example/1</link></item>');
    const body = Buffer.concat([Buffer.from([0xff, 0xfe]), iconv.encode(text, 'utf-16le')]);
    expect(parseFeed(body, { url: FEED_URL }).items[0]?.title).toBe('Grüße');
  });
});

describe('titles', () => {
  it('strips the HTML of type="html" titles (Google Alerts)', () => {
    expect(parseFixture('atom-google-alerts-html-titles.xml').items[1]?.title).toBe(
      'Slack Stock Has a Compelling Story and the Numbers to Back It Up',
    );
  });

  it('decodes character references and markup inside CDATA (craigslist)', () => {
    expect(parseFixture('rss1-rdf-craigslist-cdata-entities.xml').items[0]?.title).toBe(
      'Bright, Spacious Beautiful Victorian (oakland north / temescal) $4300 3bd 1930ft2',
    );
  });

  it('decodes numeric entities (rss.com)', () => {
    const titles = parseFixture('rss2-rsscom-wordpress-numeric-entities.xml').items.map((item) => item.title);
    expect(titles).toContain('How to Visualize Your Podcast’s Audience');
    expect(titles).toContain('RSS.com Now Offers Early Access & Exclusive Episodes Through Apple Podcasts Subscriptions');
  });

  it('collapses the whitespace around titles (GitHub commits)', () => {
    expect(parseFixture('atom-github-commits-miniflux.xml').items[0]?.title).toBe('Parse podcast categories');
  });

  it('leaves titles out for untitled items and keeps their text (manton, scriptingnews)', () => {
    const untitled = parseFixture('rss2-wordpress-manton-missing-titles.xml').items.filter((item) => item.title === undefined);
    expect(untitled).toHaveLength(4);
    for (const item of untitled) expect(item.summaryText).toBeTruthy();
    expect(parseFixture('rss2-scriptingnews-untitled-items-guid-collisions.xml').items.filter((item) => !item.title)).toHaveLength(39);
  });

  it('keeps the words after a tag-like word in a title', () => {
    const feed = parseText(rss('<item><title>Why &lt;script&gt; tags block rendering</title><link>https://site.example/1</link></item>'));
    expect(feed.items[0]?.title).toBe('Why tags block rendering');
  });

  it('keeps JSON Feed titles as the plain text they are, decoding entities', () => {
    const titles = parseFixture('jsonfeed-1.1-journal3960.json').items.map((item) => item.title);
    expect(titles).toContain('Die Rückkehr von <i> und <b>');
  });
});

describe('links', () => {
  it('resolves relative links against the feed URL (intertwingly, gulp)', () => {
    const intertwingly = parseFixture('atom-intertwingly-xhtml-relative-links.xml', 'http://intertwingly.net/blog/index.atom');
    expect(intertwingly.link).toBe('http://intertwingly.net/blog/');
    expect(intertwingly.items[0]?.link).toBe('http://intertwingly.net/blog/2012/07/16/Inhibiting-Suspend');
    const gulp = parseFixture('atom-github-releases-gulp.xml', 'https://github.com/gulpjs/gulp/releases.atom');
    expect(gulp.items[0]?.link).toBe('https://github.com/gulpjs/gulp/releases/tag/v3.9.0');
  });

  it('makes links inside content absolute (Daring Fireball, reddit)', () => {
    const df = parseFixture('atom-daringfireball-xml-base-html.xml', 'https://daringfireball.net/feeds/main');
    const reddit = parseFixture('atom-reddit-relative-xml-base.xml', 'https://www.reddit.com/.rss');
    const html = [...df.items, ...reddit.items].map((item) => item.summaryHtml ?? '').join('\n');
    expect(html).toContain('<a href="https://daringfireball.net/linked/2017/06/26/arkit-the-verge"> ★ </a>');
    expect(html).not.toMatch(/href="(?!https?:)/);
  });

  it('resolves content links against xml:base, itself relative to the feed URL', () => {
    const atom = `<feed xmlns="http://www.w3.org/2005/Atom" xml:base="https://cdn.example/root/"><title>A</title>
      <entry><id>1</id><title>one</title><link href="posts/1"/>
        <content type="html" xml:base="../other/">&lt;a href="page"&gt;page&lt;/a&gt;</content></entry>
      <entry><id>2</id><title>two</title><content type="html">&lt;a href="page"&gt;page&lt;/a&gt;</content></entry></feed>`;
    const items = parseText(atom, 'https://site.example/feed.atom').items;
    expect(items[0]).toMatchObject({ link: 'https://cdn.example/root/posts/1', summaryHtml: '<a href="https://cdn.example/other/page">page</a>' });
    expect(items[1]?.summaryHtml).toBe('<a href="https://cdn.example/root/page">page</a>');
    const relative = atom.replace('xml:base="https://cdn.example/root/"', 'xml:base="/root/"');
    expect(parseText(relative, 'https://site.example/feed.atom').items[1]?.summaryHtml).toBe('<a href="https://site.example/root/page">page</a>');
  });

  it('uses the RSS guid as the link when the item has no <link> (braingle)', () => {
    const [item] = parseFixture('rss2-braingle-feedburner-duplicate-guid-elements.xml').items;
    expect(item).toMatchObject({ id: 'http://www.braingle.com/50366.html', link: 'http://www.braingle.com/50366.html' });
  });

  it('prefers url to external_url in JSON Feed, and uses external_url when there is no url', () => {
    const json = JSON.stringify({
      version: 'https://jsonfeed.org/version/1.1',
      title: 'J',
      items: [
        { id: '1', url: 'https://site.example/1', external_url: 'https://elsewhere.example/1', content_text: 'one' },
        { id: '2', external_url: 'https://elsewhere.example/2', content_text: 'two' },
      ],
    });
    expect(parseText(json).items.map((item) => item.link)).toEqual(['https://site.example/1', 'https://elsewhere.example/2']);
  });

  it('drops links that are not http(s)', () => {
    const feed = parseText(rss('<item><title>x</title><link>javascript:alert(1)</link></item>'));
    expect(feed.items[0]?.link).toBeUndefined();
  });
});

describe('summaries', () => {
  it('cuts long text at a word boundary with an ellipsis (dustri)', () => {
    for (const item of parseFixture('rss2-dustri-very-long-items.xml').items) {
      expect(item.summaryText!.length).toBeLessThanOrEqual(301);
      expect(item.summaryText).toMatch(/\S…$/);
    }
  });

  it('drops a Matrix reply fallback from summaries, quote and all', () => {
    const description = '<mx-reply><blockquote><a href="https://matrix.to/#/@ceo:x">@ceo:x</a> Wire the money</blockquote></mx-reply><p>Post</p>';
    const escaped = description.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
    const [item] = parseText(rss(`<item><title>x</title><link>https://site.example/1</link><description>${escaped}</description></item>`)).items;
    expect(item!.summaryHtml).toBe('<p>Post</p>');
    expect(item!.summaryText).toBe('Post');
  });

  it('keeps safe tags, drops everything else, and closes what the cut leaves open', () => {
    const description = [
      '<p>Hello <b>bold</b> <a href="/post" onclick="steal()">post</a> <img src="https://t.example/pixel.gif" width="1">',
      '<script>alert(1)</script><a href="javascript:alert(1)">bad</a> <iframe src="https://x.example"></iframe>',
      '<a href="jav&#x61;script:alert(2)">x</a><a href=" data:text/html,boom">d</a><span style="x" onmouseover="alert(3)">s</span>',
      `<em>${'long words '.repeat(100)}</em></p>`,
    ].join('');
    const escaped = description.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
    const [item] = parseText(rss(`<item><title>x</title><link>https://site.example/1</link><description>${escaped}</description></item>`)).items;
    const html = item!.summaryHtml!;
    expect(html).toMatch(/^<p>Hello <b>bold<\/b> <a href="https:\/\/feeds\.example\.org\/post">post<\/a>/);
    expect(html).not.toMatch(/script|alert|onclick|onmouseover|style|<img|iframe|data:|<span/);
    expect(html).toContain('<a>x</a><a>d</a>s');
    expect(html).toMatch(/…<\/em><\/p>$/);
    expect(html.length).toBeLessThan(800);
    expect(item!.summaryText).toMatch(/^Hello bold post bad xdslong words/);
  });

  it('takes the description before the full content, and the content when the description is empty (squarespace)', () => {
    const items = parseFixture('rss2-squarespace-feedpress-opaque-guids.xml').items;
    expect(items.every((item) => item.summaryText)).toBe(true);
  });
});

describe('dates', () => {
  it('leaves published out when the feed has no dates (heise)', () => {
    expect(parseFixture('rss090-rdf-heise-no-dates-no-guids.xml').items.every((item) => item.published === undefined)).toBe(true);
  });

  it('reads RFC 822, W3C and JSON Feed dates', () => {
    expect(parseFixture('rss2-hackernews-no-guid-no-xmldecl.xml').items[0]?.published?.toISOString()).toBe('2022-04-06T21:07:47.000Z');
    expect(parseFixture('atom-youtube-channel-l2inc.xml').items[0]?.published?.toISOString()).toBe('2017-09-14T18:03:34.000Z');
    expect(parseFixture('jsonfeed-1.0-daringfireball.json').items[0]?.published?.toISOString()).toBe('2017-06-27T00:54:17.000Z');
  });

  it('leaves out a date it cannot parse', () => {
    const feed = parseText(rss('<item><title>x</title><link>https://site.example/1</link><pubDate>sometime soon</pubDate></item>'));
    expect(feed.items[0]?.published).toBeUndefined();
  });
});

describe('ids', () => {
  it('uses the guid, else the link (hackernews, heise)', () => {
    const hn = parseFixture('rss2-hackernews-no-guid-no-xmldecl.xml').items[0]!;
    expect(hn.id).toBe(hn.link);
    expect(parseFixture('rss2-wordpress-natashatherobot.xml').items[0]?.id).toMatch(/^https:\/\/www\.natashatherobot\.com\/\?p=\d+$/);
  });

  it('hashes the text of items with no guid, link or date (userland)', () => {
    const ids = parseFixture('rss092-userland-untitled-items-enclosure.xml').items.map((item) => item.id);
    expect(ids).toHaveLength(3);
    for (const id of ids) expect(id).toMatch(/^hash:[0-9a-f]{32}$/);
  });

  it('keeps both items when a guid is reused for different posts, with a content-derived suffix (scriptingnews)', () => {
    const base = 'http://scripting.com/2017/06/25.html#a080631';
    const items = parseFixture('rss2-scriptingnews-untitled-items-guid-collisions.xml').items;
    const sharing = items.filter((item) => item.id.startsWith(base));
    expect(sharing.map((item) => item.id)).toEqual([base, expect.stringMatching(/^http:\/\/scripting\.com\/2017\/06\/25\.html#a080631#[0-9a-f]{12}$/)]);
    expect(sharing[0]?.summaryText).not.toBe(sharing[1]?.summaryText);
    expect(items.filter((item) => /#[0-9a-f]{12}$/.test(item.id))).toHaveLength(2);
  });

  it('gives a colliding item the same id whatever comes before it', () => {
    const first = '<item><guid>g</guid><title>first</title></item>';
    const second = '<item><guid>g</guid><title>second</title></item>';
    const other = '<item><guid>h</guid><title>other</title></item>';
    const a = parseText(rss(first + second)).items[1]!.id;
    const b = parseText(rss(other + first + second)).items[2]!.id;
    expect(a).toBe(b);
    expect(a).toMatch(/^g#[0-9a-f]{12}$/);
  });

  it('drops an item that repeats an earlier one exactly', () => {
    const item = '<item><guid>g</guid><title>same</title><description>text</description></item>';
    const feed = parseText(rss(item + item + '<item><guid>k</guid><title>same</title><description>text</description></item>'));
    expect(feed.items.map((entry) => entry.id)).toEqual(['g', 'k']);
  });
});

describe('formats and errors', () => {
  it('recognises RSS 0.90 and 1.0 as rdf, everything else by content', () => {
    expect(parseFixture('rss090-rdf-heise-no-dates-no-guids.xml').format).toBe('rdf');
    expect(parseFixture('rss1-rdf-craigslist-cdata-entities.xml').format).toBe('rdf');
    expect(parseFixture('rss091-dicas-l-iso-8859-1.xml').format).toBe('rss');
    // The reddit Atom feed is served under a .rss URL; the URL does not decide.
    expect(parseFixture('atom-reddit-relative-xml-base.xml', 'https://www.reddit.com/.rss').format).toBe('atom');
  });

  it('reads a bare "&" literally, in text, in links and next to CDATA', () => {
    const feed = parseText(
      rss('<item><title>AT&T & co &amp; more</title><link>https://site.example/?a=1&b=2</link><description><![CDATA[x &amp; y]]></description></item>'),
    );
    expect(feed.items[0]).toMatchObject({ title: 'AT&T & co & more', link: 'https://site.example/?a=1&b=2', summaryText: 'x & y' });
  });

  it('reports a structural error rather than losing the items after it', () => {
    const broken = rss('<item><title>one</title><description>a <br> b</description></item><item><title>two</title></item>');
    expect(errorOf(() => parseText(broken)).message).toMatch(/^not valid XML: Expected closing tag 'br' .* at line 1$/);
  });

  it.each([
    ['', /^the document is empty$/],
    ['   \n', /^the document is empty$/],
    ['just some words', /^that is not a feed: the document is neither XML nor JSON$/],
    ['<opml version="2.0"><body/></opml>', /^that XML document is not an RSS or Atom feed \(its root element is <opml>\)$/],
    [
      `<rss><channel><title>x</titl>\n${'<item><title>later</title></item>\n'.repeat(5)}</channel></rss>`,
      /^not valid XML: Expected closing tag 'title' .* at line 1$/,
    ],
    [`<rss><channel><title>x</title>\n${'<item><title>later</title></item>\n'.repeat(5)}<item><tit`, /^not valid XML: unexpected end of document at line 7 \(<rss>, <channel>, <item>, <tit> never closed\)$/],
    [`<rss><channel><title>x</title>\n<item><link href="https://site.example/a`, /^not valid XML: unexpected end of document at line 2/],
    ['[1, 2]', /^that JSON document is not a JSON Feed \(it is not an object\)$/],
    ['{"title": "x", "items": []}', /^that JSON document is not a JSON Feed \(it has no "version" starting with https:\/\/jsonfeed\.org\/version\/\)$/],
    ['{"version": "https://jsonfeed.org/version/1.1", "title": "x"}', /^that JSON Feed has no "items" list$/],
    ['{"version": "https://jsonfeed.org/version/1", "items": [', /^not valid JSON: the document ends early/],
    [
      '<?xml version="1.0"?><!DOCTYPE r [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;">]><rss><channel><title>&b;</title></channel></rss>',
      /^the feed declares its own XML entities, which we do not read$/,
    ],
  ])('explains %j', (text, message) => {
    expect(errorOf(() => parseText(text)).message).toMatch(message);
  });

  it('names the feeds an HTML page links to, made absolute against <base> or the page URL', () => {
    const page = `<!DOCTYPE html><html><head><title>Blog</title>
      <link rel="alternate" type="application/rss+xml" href="/rss.xml">
      <link rel="alternate" type="application/atom+xml" href="atom.xml"></head><body></body></html>`;
    expect(errorOf(() => parseText(page, 'https://blog.example/posts/')).message).toBe(
      'that page is HTML, not a feed (it links to a feed at https://blog.example/rss.xml and 1 other feed)',
    );
  });

  it('reads a minimal JSON Feed', () => {
    const json = JSON.stringify({
      version: 'https://jsonfeed.org/version/1.1',
      title: 'J',
      home_page_url: '/home',
      items: [{ id: 7, title: 'Seven', summary: 'Tom & Jerry <3', date_modified: '2024-01-02T03:04:05Z' }],
    });
    expect(parseText(json, 'https://site.example/feed.json')).toEqual({
      format: 'json',
      title: 'J',
      link: 'https://site.example/home',
      items: [
        {
          id: '7',
          title: 'Seven',
          summaryText: 'Tom & Jerry <3',
          summaryHtml: 'Tom &amp; Jerry &lt;3',
          published: new Date('2024-01-02T03:04:05Z'),
        },
      ],
    });
  });
});

describe('large documents', () => {
  const hour = 3_600_000;
  const date = (i: number) => new Date(Date.UTC(2020, 0, 1) + i * hour);
  const rssItems = (count: number, order: 'newest-first' | 'oldest-first') =>
    Array.from({ length: count }, (_, n) => {
      const i = order === 'newest-first' ? count - 1 - n : n;
      return `<item><title>Post ${i}</title><link>https://site.example/${i}</link><pubDate>${date(i).toUTCString()}</pubDate></item>`;
    }).join('');

  it(`reads at most ${MAX_ITEMS_READ} items: the first ones of a feed that lists newest first`, () => {
    const feed = parseText(rss(rssItems(20_000, 'newest-first')));
    expect(feed.items).toHaveLength(MAX_ITEMS_READ);
    expect(feed.items[0]?.title).toBe('Post 19999');
    expect(feed.items.at(-1)?.title).toBe(`Post ${20_000 - MAX_ITEMS_READ}`);
  });

  it('reads the last ones of a feed that appends (its dates rise)', () => {
    const feed = parseText(rss(rssItems(20_000, 'oldest-first')));
    expect(feed.items).toHaveLength(MAX_ITEMS_READ);
    expect(feed.items.at(-1)?.title).toBe('Post 19999');
    // Links are still resolved against the feed's link, which is read once for all items.
    expect(feed.link).toBe('https://site.example/');
  });

  it('caps Atom and JSON Feed the same way', () => {
    const entries = Array.from({ length: 2_000 }, (_, i) => `<entry><id>e${i}</id><title>E${i}</title><link href="/e/${i}"/><updated>${date(2_000 - i).toISOString()}</updated></entry>`);
    const atom = parseText(`<?xml version="1.0"?><feed xmlns="http://www.w3.org/2005/Atom"><title>A</title><link href="https://a.example/"/>${entries.join('')}</feed>`);
    expect(atom.items.map((item) => item.id)).toEqual(Array.from({ length: MAX_ITEMS_READ }, (_, i) => `e${i}`));
    expect(atom.items[1]?.link).toBe('https://a.example/e/1');
    const json = JSON.stringify({
      version: 'https://jsonfeed.org/version/1.1',
      items: Array.from({ length: 2_000 }, (_, i) => ({ id: `j${i}`, title: `J${i}`, date_published: date(i).toISOString() })),
    });
    const parsed = parseText(json);
    expect(parsed.items).toHaveLength(MAX_ITEMS_READ);
    expect(parsed.items.at(-1)?.id).toBe('j1999');
  });
});

describe('what comes before the document', () => {
  const feed = '<?xml version="1.0" encoding="UTF-8"?><rss version="2.0"><channel><title>Blog</title><link>https://blog.example/</link><item><title>Hello</title><link>https://blog.example/hello</link></item></channel></rss>';

  it.each([
    ['a newline (a WordPress theme with a stray blank line)', `\n${feed}`],
    ['blank lines, tabs and spaces', ` \t\r\n\n${feed}`],
    ['a byte order mark and a zero-width space', `\uFEFF\u200B${feed}`],
    ['a PHP warning', `<br />\n<b>Warning</b>: Cannot modify header information in <b>/var/www/wp-includes/feed.php</b> on line 8<br />\n${feed}`],
    ['a PHP notice in plain text, before a feed without a declaration', `Notice: Undefined index: q in /var/www/feed.php on line 3\n${feed.replace(/^<\?xml[^>]*>/, '')}`],
  ])('is skipped: %s', (_what, text) => {
    const parsed = parseText(text);
    expect(parsed.title).toBe('Blog');
    expect(parsed.items.map((item) => item.title)).toEqual(['Hello']);
  });

  it('still reads the declared encoding after a stray line', () => {
    const latin1 = Buffer.concat([Buffer.from('<br />\n<b>Warning</b>: headers already sent<br />\n'), iconv.encode(feed.replace('UTF-8', 'ISO-8859-1').replace('Hello', 'Grüße'), 'latin1')]);
    expect(parseFeed(latin1, { url: FEED_URL }).items[0]?.title).toBe('Grüße');
  });
});
