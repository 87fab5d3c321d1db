/**
 * Slack's incoming-webhook format (`text`, `blocks`, legacy `attachments`), which many tools send
 * to any "Slack webhook URL": Alertmanager's slack_configs, CI services, backup tools. Also the
 * inline-markup parser and the paragraphs-to-message step the Teams and Discord renderers share.
 */
import { replaceEmojiShortcodes } from './emoji.js';
import {
  arr,
  bold,
  clipChars,
  code,
  concat,
  firstLine,
  italic,
  join,
  link,
  obj,
  preformatted,
  rich,
  safeUrl,
  str,
  strike,
  trusted,
  type Part,
  type RenderedWebhook,
  type Rich,
} from './rich-text.js';
import type { WebhookRequest } from './types.js';

// ---- inline markup, shared with the Teams and Discord renderers ----

const LINE_BREAK: Rich = { text: '\n', html: '<br>' };

/** Text that only the plain-text body shows (the URL after a link's label). */
const textOnly = (text: string): Rich => ({ text, html: '' });

/** Plain text with its newlines kept (`multiline` would drop blank lines and a trailing break). */
export function textWithBreaks(text: string): Rich {
  const parts: Part[] = [];
  text.split(/\r?\n/).forEach((line, index) => {
    if (index > 0) parts.push(LINE_BREAK);
    parts.push(line);
  });
  return concat(parts);
}

export interface MarkupSyntax {
  /** Emphasis markers, longest first. `intraword`: may open or close inside a word (`*` in Markdown, unlike `_`). */
  spans: { marker: string; wrap: (inner: Rich) => Rich; intraword: boolean }[];
  /** A link, mention or escape starting at `at`, and the index after it; undefined when there is none. */
  token(src: string, at: number): { piece: Rich; end: number } | undefined;
  /** Plain text between the markup. */
  plain(text: string): Rich;
  /** The inside of `code` and ```blocks```. */
  verbatim(text: string): string;
}

/** Emphasis inside emphasis is rare; the cap keeps a hostile `*_*_*_…` from recursing deeply. */
const MAX_SPAN_NESTING = 3;
const WORD_CHAR = /[\p{L}\p{N}]/u;
const isSpace = (char: string | undefined) => char === undefined || /\s/.test(char);

/** Inline markup (emphasis, code, links) as rich text, in time close to linear in the length of `src`. */
export function inlineMarkup(src: string, syntax: MarkupSyntax, depth = 0): Rich {
  return new InlineParser(src, syntax, depth).parse();
}

class InlineParser {
  /** Per marker, where it could close a span, and how far along the openers have come (they only move forward). */
  private readonly closers = new Map<string, { positions: number[]; next: number }>();
  /** Newlines before each position: a span closes on the line it opened. */
  private newlinesBefore: Uint32Array | undefined;

  constructor(
    private readonly src: string,
    private readonly syntax: MarkupSyntax,
    private readonly depth: number,
  ) {}

  parse(): Rich {
    const parts: Rich[] = [];
    let plainStart = 0;
    let at = 0;
    while (at < this.src.length) {
      const found = this.markupAt(at);
      if (found === undefined) {
        at += 1;
        continue;
      }
      if (at > plainStart) parts.push(this.syntax.plain(this.src.slice(plainStart, at)));
      parts.push(found.piece);
      at = plainStart = found.end;
    }
    if (plainStart < this.src.length) parts.push(this.syntax.plain(this.src.slice(plainStart)));
    return concat(parts);
  }

  private markupAt(at: number): { piece: Rich; end: number } | undefined {
    const { src, syntax } = this;
    if (src.startsWith('```', at)) {
      const close = src.indexOf('```', at + 3);
      if (close > at + 3) return { piece: preformatted(syntax.verbatim(src.slice(at + 3, close).replace(/^\r?\n|\r?\n$/g, ''))), end: close + 3 };
    }
    if (src[at] === '`') {
      const close = src.indexOf('`', at + 1);
      const inner = close > at + 1 ? src.slice(at + 1, close) : '';
      if (inner !== '' && !inner.includes('\n')) return { piece: code(syntax.verbatim(inner)), end: close + 1 };
    }
    const token = syntax.token(src, at);
    if (token !== undefined) return token;
    if (this.depth >= MAX_SPAN_NESTING) return undefined;
    for (const span of syntax.spans) {
      if (!src.startsWith(span.marker, at)) continue;
      const innerStart = at + span.marker.length;
      if (isSpace(src[innerStart]) || (!span.intraword && WORD_CHAR.test(src[at - 1] ?? ''))) continue;
      const close = this.closingMarker(span.marker, span.intraword, innerStart);
      if (close === undefined) continue;
      return { piece: span.wrap(inlineMarkup(src.slice(innerStart, close), syntax, this.depth + 1)), end: close + span.marker.length };
    }
    return undefined;
  }

  /** Where a span whose text starts at `from` closes (its text is not empty), if it does on that line. */
  private closingMarker(marker: string, intraword: boolean, from: number): number | undefined {
    let closers = this.closers.get(marker);
    if (closers === undefined) {
      closers = { positions: closerPositions(this.src, marker, intraword), next: 0 };
      this.closers.set(marker, closers);
    }
    while (closers.next < closers.positions.length && closers.positions[closers.next]! <= from) closers.next += 1;
    const close = closers.positions[closers.next];
    if (close === undefined) return undefined;
    this.newlinesBefore ??= newlineCounts(this.src);
    return this.newlinesBefore[close] === this.newlinesBefore[from] ? close : undefined;
  }
}

/** Positions where `marker` can close a span: after a non-space, and not inside a word unless allowed. */
function closerPositions(src: string, marker: string, intraword: boolean): number[] {
  const positions: number[] = [];
  for (let at = src.indexOf(marker, 1); at !== -1; at = src.indexOf(marker, at + 1)) {
    const after = src[at + marker.length];
    // "**" must not close a "*" span half-way.
    if (isSpace(src[at - 1]) || after === marker[0]) continue;
    if (intraword || !WORD_CHAR.test(after ?? '')) positions.push(at);
  }
  return positions;
}

function newlineCounts(src: string): Uint32Array {
  const counts = new Uint32Array(src.length + 1);
  for (let index = 0; index < src.length; index += 1) counts[index + 1] = counts[index]! + (src.charCodeAt(index) === 10 ? 1 : 0);
  return counts;
}

/** A link whose URL the plain text shows too: "label (url)", or the URL alone when it is its own label. */
export function linkWithUrl(url: string, label: string): Rich {
  const href = safeUrl(url);
  if (href === undefined) return rich(label);
  if (label === '' || label === url) return link(href, url);
  return rich(link(href, label), textOnly(` (${url})`));
}

// ---- Slack mrkdwn ----

/** Slack escapes exactly these three in text. */
function decodeSlackEntities(text: string): string {
  return text.replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&amp;/g, '&');
}

const BROADCASTS = new Set(['here', 'channel', 'everyone']);
/** `<…>` on one line; stopping at the next `<` keeps a run of unclosed ones linear. */
const SLACK_ANGLE = /<([^<>\n]+)>/y;

/** The inside of a `<…>`: a link, a mention, a channel or a broadcast; undefined for anything else. */
function slackAngle(inner: string): Rich | undefined {
  const bar = inner.indexOf('|');
  const target = bar === -1 ? inner : inner.slice(0, bar);
  const label = bar === -1 ? undefined : decodeSlackEntities(inner.slice(bar + 1)).trim() || undefined;
  if (target.startsWith('@')) return rich(`@${label?.replace(/^@/, '') ?? target.slice(1)}`);
  if (target.startsWith('#')) return rich(`#${label?.replace(/^#/, '') ?? target.slice(1)}`);
  if (target.startsWith('!')) {
    // <!date^…|fallback>, <!subteam^ID|@team>: the label is what Slack shows.
    if (label !== undefined) return rich(label);
    const name = target.slice(1).split('^', 1)[0]!;
    return BROADCASTS.has(name) ? rich(`@${name}`) : undefined;
  }
  const url = decodeSlackEntities(target);
  if (/^mailto:/i.test(url)) return mailto(url, label);
  if (safeUrl(url) === undefined) return undefined;
  return linkWithUrl(url, replaceEmojiShortcodes(label ?? ''));
}

/** Shown, not linked: the room only links http(s). */
function mailto(url: string, label: string | undefined): Rich {
  const address = url.slice('mailto:'.length);
  return rich(label === undefined || label === address ? address : `${label} (${address})`);
}

const SLACK_SYNTAX: MarkupSyntax = {
  spans: [
    { marker: '*', wrap: bold, intraword: false },
    { marker: '_', wrap: italic, intraword: false },
    { marker: '~', wrap: strike, intraword: false },
  ],
  token(src, at) {
    if (src[at] !== '<') return undefined;
    SLACK_ANGLE.lastIndex = at;
    const match = SLACK_ANGLE.exec(src);
    const piece = match === null ? undefined : slackAngle(match[1]!);
    return piece === undefined ? undefined : { piece, end: at + match![0].length };
  },
  plain: (text) => textWithBreaks(replaceEmojiShortcodes(decodeSlackEntities(text))),
  verbatim: decodeSlackEntities,
};

/** Slack's mrkdwn (links, *bold*, _italic_, ~strike~, `code`, ```blocks```, :emoji:, &amp; escapes) as rich text. */
export function slackMrkdwn(text: string): Rich {
  return inlineMarkup(text, SLACK_SYNTAX);
}

/** Slack's plain_text objects: no markup, but emoji shortcodes still count. */
function slackPlainText(text: string): Rich {
  return textWithBreaks(replaceEmojiShortcodes(text));
}

/** Neither part may hold a `<`: a body full of unclosed `<http…` is then read in linear time. */
const TEXT_LINK = /<((?:https?|mailto):[^|<>\s]+)(?:\|([^<>]*))?>/gi;

/**
 * For a plain `{text}` body: when it holds Slack-style `<https://url|label>` or `<https://url>` links,
 * the text with links written as "label (url)" and HTML with real links; undefined when it holds none.
 */
export function slackLinksInText(text: string): { text: string; html: string } | undefined {
  const parts: Rich[] = [];
  let copied = 0;
  let converted = false;
  for (const match of text.matchAll(TEXT_LINK)) {
    const [whole, url = '', label] = match;
    const isMail = /^mailto:/i.test(url);
    if (!isMail && safeUrl(url) === undefined) continue;
    parts.push(textWithBreaks(text.slice(copied, match.index)), isMail ? mailto(url, label) : linkWithUrl(url, label ?? ''));
    copied = match.index + whole.length;
    converted = true;
  }
  if (!converted) return undefined;
  parts.push(textWithBreaks(text.slice(copied)));
  return concat(parts);
}

// ---- from paragraphs to a message (Slack, Teams, Discord) ----

/** One piece of a chat-style message: markup still to render (so its first line can be the summary), or rich text. */
export type Paragraph = { markup: string; render: (markup: string) => Rich } | { rich: Rich; url?: string | undefined };

/** A rendered piece as a paragraph, unless it has nothing to show. */
export function richParagraph(piece: Rich | undefined): Paragraph | undefined {
  return piece === undefined || piece.text.trim() === '' ? undefined : { rich: piece };
}

/** A link on its own line (an image, a button): only when it can be linked, and with its URL in the text. */
export function linkParagraph(url: unknown, label: string): Paragraph | undefined {
  return typeof url === 'string' && safeUrl(url) !== undefined ? { rich: linkWithUrl(url, label) } : undefined;
}

export function paragraphRich(paragraph: Paragraph): Rich {
  return 'rich' in paragraph ? paragraph.rich : paragraph.render(paragraph.markup);
}

/** Enough for a long alert text; a message with more is cut by the room's size limit anyway. */
const MAX_MARKUP_CHARS = 3_000;
const MAX_PARAGRAPHS = 60;
/** Past this much text a room message is no longer read; the rest is left out, not cut mid-way. */
const MAX_MESSAGE_TEXT_CHARS = 10_000;
/** Markup-heavy text makes much more HTML; this keeps it inside the room's event size too. */
const MAX_MESSAGE_HTML_CHARS = 30_000;
const MAX_SUMMARY_CHARS = 300;

/** A payload string clipped before parsing, so the parser's work stays bounded; spaces before line ends dropped. */
export function boundedText(value: unknown): string | undefined {
  const text = str(value);
  return text === undefined ? undefined : clipChars(text.slice(0, MAX_MARKUP_CHARS * 2), MAX_MARKUP_CHARS).replace(/[ \t]+(?=\r?\n)/g, '');
}

export function markup(value: unknown, render: (markup: string) => Rich): Paragraph | undefined {
  const text = boundedText(value);
  return text === undefined ? undefined : { markup: text, render };
}

/**
 * The message: the first line of the first paragraph is the summary (after the sender's name in
 * bold, when given); everything else, in order, is the block under it. Paragraphs are read only
 * as far as the message goes, so producers may yield from payloads of any size.
 */
export function messageFromParagraphs(found: Iterable<Paragraph | undefined>, username: string | undefined, nothing: string): RenderedWebhook {
  const rest: Rich[] = [];
  let summary: Rich | undefined;
  let url: string | undefined;
  let seen = 0;
  let textChars = 0;
  let htmlChars = 0;
  for (const paragraph of found) {
    if (paragraph === undefined) continue;
    if (rest.length >= MAX_PARAGRAPHS || textChars >= MAX_MESSAGE_TEXT_CHARS || htmlChars >= MAX_MESSAGE_HTML_CHARS) {
      rest.push(rich('… (more not shown)'));
      break;
    }
    seen += 1;
    if (seen > 1) {
      rest.push(paragraphRich(paragraph));
    } else if ('rich' in paragraph) {
      summary = paragraph.rich;
      url = paragraph.url;
    } else {
      const { head, tail } = splitFirstLine(paragraph.markup);
      if (head !== '') summary = paragraph.render(clipChars(head, MAX_SUMMARY_CHARS));
      if (tail !== '') rest.push(paragraph.render(tail));
    }
    textChars += rest.at(-1)?.text.length ?? 0;
    htmlChars += rest.at(-1)?.html.length ?? 0;
  }
  const givenName = str(username);
  const name = givenName === undefined ? undefined : bold(clipChars(givenName, 100));
  let lead: Rich;
  if (summary !== undefined) lead = name === undefined ? summary : rich(name, ': ', summary);
  // A message that opens with a code block has no sentence to lead with.
  else if (seen > 0) lead = name === undefined ? rich('Message:') : rich(name, ':');
  else lead = name === undefined ? rich(nothing) : rich(name, ': ', nothing);
  return { summary: lead, url, block: rest.length > 0 ? join(rest, LINE_BREAK) : undefined };
}

/** The first non-blank line, stopping before a code block, and what follows it. */
function splitFirstLine(text: string): { head: string; tail: string } {
  const trimmed = text.replace(/^\s+/, '');
  const newline = trimmed.indexOf('\n');
  const fence = trimmed.indexOf('```');
  const candidates = [newline, fence].filter((index) => index !== -1);
  const cut = candidates.length === 0 ? trimmed.length : Math.min(...candidates);
  return { head: trimmed.slice(0, cut).trim(), tail: trimmed.slice(cut).replace(/^\r?\n/, '').trimEnd() };
}

// ---- Slack messages ----

const MAX_FIELDS = 20;
const MAX_ELEMENTS = 20;
/** A rich_text section is many small styled runs. */
const MAX_INLINE_ELEMENTS = 50;
const MAX_INLINE_CHARS = 1_000;

const DIVIDER = trusted('<hr>', '———');

/** A Slack text object (`{type: "mrkdwn" | "plain_text", text}`). */
function textObject(value: unknown): Paragraph | undefined {
  const object = obj(value);
  return markup(object.text, object.type === 'plain_text' ? slackPlainText : slackMrkdwn);
}

/** A text object as one rendered piece, for fields and context elements. */
function inlineText(value: unknown): Rich | undefined {
  const object = obj(value);
  const text = boundedText(object.text);
  if (text === undefined) return undefined;
  return object.type === 'plain_text' ? slackPlainText(text) : slackMrkdwn(text);
}

/** A section field: Slack's "*Label*\nvalue" convention reads better as "Label: value". */
function sectionField(value: unknown): Rich | undefined {
  const object = obj(value);
  const text = str(object.text);
  if (text === undefined) return undefined;
  const labelled = object.type !== 'plain_text' ? /^\*([^*\n]+?):?\*:?\n([\s\S]+)$/.exec(text.slice(0, MAX_MARKUP_CHARS)) : null;
  if (labelled) return rich(bold(labelled[1]!), ': ', slackMrkdwn(labelled[2]!.replace(/\n/g, ' ')));
  return inlineText(value);
}

function buttonLinks(elements: unknown): Rich | undefined {
  const links = arr(elements)
    .slice(0, MAX_ELEMENTS)
    .map(obj)
    .filter((element) => safeUrl(element.url) !== undefined)
    .map((element) => linkWithUrl(element.url as string, str(obj(element.text).text) ?? ''));
  return links.length > 0 ? join(links, ' · ') : undefined;
}

function blockParagraphs(block: Record<string, unknown>): (Paragraph | undefined)[] {
  switch (block.type) {
    case 'header':
      return [richParagraph(bold(slackPlainText(boundedText(obj(block.text).text) ?? '')))];
    case 'section': {
      const accessory = obj(block.accessory);
      const button = accessory.type === 'button' ? buttonLinks([accessory]) : undefined;
      return [
        textObject(block.text),
        ...arr(block.fields).slice(0, MAX_FIELDS).map((field) => richParagraph(sectionField(field))),
        richParagraph(button),
      ];
    }
    case 'context': {
      const texts = arr(block.elements).slice(0, MAX_ELEMENTS).map(inlineText);
      return [richParagraph(join(texts, ' '))];
    }
    case 'divider':
      return [{ rich: DIVIDER }];
    case 'actions':
      return [richParagraph(buttonLinks(block.elements))];
    case 'image':
      return [linkParagraph(block.image_url, firstLine(obj(block.title).text, 200) ?? firstLine(block.alt_text, 200) ?? 'image')];
    case 'rich_text':
      return arr(block.elements).slice(0, MAX_ELEMENTS).map((element) => richParagraph(richTextElement(obj(element), 0)));
    default:
      return [];
  }
}

/** Slack indents lists with an attribute; nesting deeper than this is not a list someone wrote. */
const MAX_LIST_NESTING = 3;

/** A `rich_text` block's section, list, quote or preformatted part (best effort). */
function richTextElement(element: Record<string, unknown>, depth: number): Rich | undefined {
  const inline = () => concat(arr(element.elements).slice(0, MAX_INLINE_ELEMENTS).map((item) => richTextInline(obj(item))));
  switch (element.type) {
    case 'rich_text_section':
      return inline();
    case 'rich_text_preformatted':
      return preformatted(inline().text);
    case 'rich_text_quote':
      return rich('> ', inline());
    case 'rich_text_list': {
      if (depth >= MAX_LIST_NESTING) return undefined;
      const ordered = element.style === 'ordered';
      const items = arr(element.elements)
        .slice(0, MAX_ELEMENTS)
        .map((item, index) => rich(ordered ? `${index + 1}. ` : '• ', richTextElement(obj(item), depth + 1)));
      return join(items, LINE_BREAK);
    }
    default:
      return undefined;
  }
}

function richTextInline(item: Record<string, unknown>): Rich {
  const style = obj(item.style);
  const styled = (piece: Rich): Rich => {
    let out = piece;
    if (style.code === true) out = code(out);
    if (style.bold === true) out = bold(out);
    if (style.italic === true) out = italic(out);
    if (style.strike === true) out = strike(out);
    return out;
  };
  const text = (value: unknown) => (typeof value === 'string' ? clipChars(value.slice(0, MAX_INLINE_CHARS * 2), MAX_INLINE_CHARS) : '');
  switch (item.type) {
    case 'text':
      return styled(textWithBreaks(text(item.text)));
    case 'link':
      return styled(linkWithUrl(text(item.url), text(item.text)));
    case 'emoji': {
      // `unicode` is the code points in hex ("1f44d-1f3fb"); the name serves when it is missing or invalid.
      const points = /^[0-9a-f]{2,6}(-[0-9a-f]{2,6}){0,9}$/i.test(text(item.unicode)) ? text(item.unicode).split('-').map((hex) => parseInt(hex, 16)) : [];
      const valid = points.length > 0 && points.every((point) => point <= 0x10ffff);
      return rich(valid ? String.fromCodePoint(...points) : replaceEmojiShortcodes(`:${text(item.name)}:`));
    }
    case 'user':
      return rich(`@${text(item.user_id)}`);
    case 'usergroup':
      return rich(`@${text(item.usergroup_id)}`);
    case 'channel':
      return rich(`#${text(item.channel_id)}`);
    case 'broadcast':
      return rich(`@${text(item.range)}`);
    case 'date':
      return rich(text(item.fallback));
    default:
      return rich();
  }
}

function attachmentParagraphs(attachment: Record<string, unknown>): Paragraph[] {
  const title = str(attachment.title);
  const titleLink = safeUrl(attachment.title_link) === undefined ? undefined : (attachment.title_link as string);
  const author = str(attachment.author_name);
  const footer = str(attachment.footer);
  const found: (Paragraph | undefined)[] = [
    markup(attachment.pretext, slackMrkdwn),
    author === undefined ? undefined : { rich: link(str(attachment.author_link), clipChars(author, 200)) },
    title === undefined ? undefined : { rich: link(titleLink, slackPlainText(clipChars(decodeSlackEntities(title), 200))), url: titleLink },
    markup(attachment.text, slackMrkdwn),
    ...arr(attachment.fields).slice(0, MAX_FIELDS).map((field) => richParagraph(attachmentField(obj(field)))),
    ...arr(attachment.blocks).slice(0, MAX_ELEMENTS).flatMap((block) => blockParagraphs(obj(block))),
    richParagraph(buttonLinks(attachment.actions)),
    linkParagraph(attachment.image_url, 'image'),
    footer === undefined ? undefined : { rich: italic(slackMrkdwn(clipChars(footer, 200))) },
  ];
  const present = found.filter((paragraph): paragraph is Paragraph => paragraph !== undefined);
  if (present.length > 0) return present;
  // The fallback is the plain-text version of everything above: only for an attachment with nothing else.
  const fallback = markup(attachment.fallback, slackPlainText);
  return fallback === undefined ? [] : [fallback];
}

/** `{title, value}`, either of which may be missing or null. */
function attachmentField(field: Record<string, unknown>): Rich {
  const title = str(field.title);
  const value = boundedText(field.value);
  return join([title === undefined ? undefined : bold(clipChars(title, 200)), value === undefined ? undefined : slackMrkdwn(value.replace(/\n/g, ' '))], ': ');
}

/** Block types this renderer shows; with any of them, `text` is only the notification stand-in. */
const SHOWN_BLOCKS = new Set(['header', 'section', 'context', 'divider', 'actions', 'image', 'rich_text']);

function* slackParagraphs(message: Record<string, unknown>): Generator<Paragraph | undefined> {
  const blocks = arr(message.blocks);
  if (!blocks.some((block) => SHOWN_BLOCKS.has(obj(block).type as string))) yield markup(message.text, slackMrkdwn);
  for (const block of blocks) yield* blockParagraphs(obj(block));
  for (const attachment of arr(message.attachments)) yield* attachmentParagraphs(obj(attachment));
}

export function renderSlack(request: WebhookRequest): RenderedWebhook {
  const message = obj(request.payload);
  return messageFromParagraphs(slackParagraphs(message), str(message.username), 'Slack-style message with no text, blocks or attachments');
}
