import { afterEach, describe, expect, it } from 'vitest';
import { FeedError } from '../../src/bridge/feeds/error.js';
import { FeedParserThread } from '../../src/bridge/feeds/parser-thread.js';

const feed = (items: number) =>
  Buffer.from(
    `<?xml version="1.0"?><rss version="2.0"><channel><title>T</title><link>https://t.example/</link>${Array.from(
      { length: items },
      (_, i) => `<item><title>Item ${i}</title><link>https://t.example/${i}</link></item>`,
    ).join('')}</channel></rss>`,
  );

let parser: FeedParserThread | undefined;
afterEach(async () => {
  await parser?.close();
  parser = undefined;
});

async function failure(promise: Promise<unknown>): Promise<FeedError> {
  const error = await promise.then(() => undefined, (thrown: unknown) => thrown);
  expect(error).toBeInstanceOf(FeedError);
  return error as FeedError;
}

describe('FeedParserThread', () => {
  it('parses in a worker, one document after another, keeping dates as dates', async () => {
    parser = new FeedParserThread({ deadlineMs: 30_000 });
    const json = Buffer.from(JSON.stringify({ version: 'https://jsonfeed.org/version/1.1', items: [{ id: '1', title: 'x', date_published: '2024-01-02T03:04:05Z' }] }));
    const [rss, jsonFeed] = await Promise.all([parser.parse(feed(3), { url: 'https://t.example/feed' }), parser.parse(json, { url: 'https://t.example/feed.json' })]);
    expect(rss.items.map((item) => item.title)).toEqual(['Item 0', 'Item 1', 'Item 2']);
    expect(jsonFeed.items[0]?.published).toEqual(new Date('2024-01-02T03:04:05Z'));
    expect(parser.busy).toBe(false);
  });

  it('passes on what was wrong with a document, in words for the chat user', async () => {
    parser = new FeedParserThread({ deadlineMs: 30_000 });
    expect((await failure(parser.parse(Buffer.from('<rss><channel>'), { url: 'https://t.example/' }))).message).toMatch(/^not valid XML: unexpected end of document/);
    // The worker is still there for the next one.
    expect((await parser.parse(feed(1), { url: 'https://t.example/' })).items).toHaveLength(1);
  });

  it('gives up on a document that takes longer than the deadline, and starts afresh for the next', async () => {
    parser = new FeedParserThread({ deadlineMs: 1 });
    expect((await failure(parser.parse(feed(50_000), { url: 'https://t.example/' }))).message).toBe('reading the feed took longer than 0.001 s');
    const quick = new FeedParserThread({ deadlineMs: 30_000 });
    try {
      expect((await quick.parse(feed(2), { url: 'https://t.example/' })).items).toHaveLength(2);
    } finally {
      await quick.close();
    }
  });

  it('fails what is still waiting when it is closed, and everything after', async () => {
    parser = new FeedParserThread({ deadlineMs: 30_000 });
    const pending = [parser.parse(feed(20_000), { url: 'https://t.example/' }), parser.parse(feed(1), { url: 'https://t.example/' })].map(failure);
    await parser.close();
    for (const error of await Promise.all(pending)) expect(error.message).toBe('the server is shutting down');
    expect((await failure(parser.parse(feed(1), { url: 'https://t.example/' }))).message).toBe('the server is shutting down');
  });
});
