/**
 * Discord's webhook format (`content`, `username`, `embeds[]`), which tools with a "Discord" option
 * send. Also the Markdown subset Discord and Teams cards share, used by the Teams renderer.
 */
import { arr, bold, clipChars, italic, join, link, obj, rich, safeUrl, str, strike, type RenderedWebhook, type Rich } from './rich-text.js';
import { boundedText, inlineMarkup, linkParagraph, markup, messageFromParagraphs, richParagraph, textWithBreaks, type MarkupSyntax, type Paragraph } from './slack.js';
import type { WebhookRequest } from './types.js';

/** Discord's own limit. */
const MAX_FIELDS = 25;

/** Neither part may hold a bracket of its own kind, so each try stops at the next `[`: linear on hostile text. */
const MARKDOWN_LINK = /\[([^[\]\n]{1,500})\]\(\s*([^()[\]\s]{1,2048})\s*\)/y;
const ANGLE_URL = /<(https?:\/\/[^<>\s]+)>/y;
const ESCAPABLE = /[\\`*_{}[\]()#+\-.!~|<>]/;

const MARKDOWN_SYNTAX: MarkupSyntax = {
  spans: [
    { marker: '**', wrap: bold, intraword: true },
    // Discord underlines `__x__`; Matrix's HTML subset has no underline worth the difference.
    { marker: '__', wrap: bold, intraword: false },
    { marker: '~~', wrap: strike, intraword: true },
    { marker: '*', wrap: italic, intraword: true },
    { marker: '_', wrap: italic, intraword: false },
  ],
  token(src, at) {
    const char = src[at];
    if (char === '\\' && ESCAPABLE.test(src[at + 1] ?? '')) return { piece: rich(src[at + 1]!), end: at + 2 };
    if (char === '[') {
      MARKDOWN_LINK.lastIndex = at;
      const match = MARKDOWN_LINK.exec(src);
      if (match === null || safeUrl(match[2]) === undefined) return undefined;
      return { piece: link(match[2], inlineMarkup(match[1]!, MARKDOWN_SYNTAX, 2)), end: at + match[0].length };
    }
    if (char === '<') {
      ANGLE_URL.lastIndex = at;
      const match = ANGLE_URL.exec(src);
      return match === null ? undefined : { piece: link(match[1]), end: at + match[0].length };
    }
    return undefined;
  },
  plain: textWithBreaks,
  verbatim: (text) => text,
};

/** Inline Markdown as chat services write it: **bold**, *italic*, ~~strike~~, `code`, ```blocks```, [label](url). */
export function chatMarkdown(text: string): Rich {
  return inlineMarkup(text, MARKDOWN_SYNTAX);
}

function embedParagraphs(embed: Record<string, unknown>): (Paragraph | undefined)[] {
  const author = obj(embed.author);
  const authorName = str(author.name);
  const title = str(embed.title);
  const url = safeUrl(embed.url) === undefined ? undefined : (embed.url as string);
  const footer = boundedText(obj(embed.footer).text);
  return [
    authorName === undefined ? undefined : { rich: link(str(author.url), clipChars(authorName, 200)) },
    title === undefined ? undefined : { rich: bold(link(url, chatMarkdown(clipChars(title, 256)))), url },
    markup(embed.description, chatMarkdown),
    ...arr(embed.fields).slice(0, MAX_FIELDS).map((field) => embedField(obj(field))),
    linkParagraph(obj(embed.image).url, 'image'),
    footer === undefined ? undefined : { rich: italic(chatMarkdown(footer)) },
  ];
}

/** `{name, value}`: "name: value", either part skipped when missing. */
function embedField(field: Record<string, unknown>): Paragraph | undefined {
  const name = str(field.name);
  const value = boundedText(field.value);
  return richParagraph(join([name === undefined ? undefined : bold(chatMarkdown(clipChars(name, 256))), value === undefined ? undefined : chatMarkdown(value)], ': '));
}

function* discordParagraphs(message: Record<string, unknown>): Generator<Paragraph | undefined> {
  yield markup(message.content, chatMarkdown);
  for (const embed of arr(message.embeds)) yield* embedParagraphs(obj(embed));
}

export function renderDiscord(request: WebhookRequest): RenderedWebhook {
  const message = obj(request.payload);
  return messageFromParagraphs(discordParagraphs(message), str(message.username), 'Discord-style message with no content or embeds');
}
