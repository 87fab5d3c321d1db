/**
 * Microsoft Teams connector bodies: the legacy MessageCard (GitLab's and many monitoring tools'
 * "Microsoft Teams" integration) and Adaptive Cards sent as `attachments[].content` (Power Automate
 * style). Both are cards; the message reads them top to bottom.
 */
import { chatMarkdown } from './discord.js';
import { arr, bold, clipChars, concat, firstLine, join, link, obj, rich, safeUrl, str, type RenderedWebhook, type Rich } from './rich-text.js';
import { boundedText, linkParagraph, linkWithUrl, markup, messageFromParagraphs, paragraphRich, richParagraph, type Paragraph } from './slack.js';
import type { WebhookRequest } from './types.js';

const MAX_SECTIONS = 10;
const MAX_FACTS = 20;
const MAX_ACTIONS = 10;
const MAX_CARDS = 5;
/** Adaptive Cards nest containers in columns in containers; deeper than this is layout, not content. */
const MAX_CARD_DEPTH = 6;
const MAX_CARD_ELEMENTS = 80;

/** Teams renders a little HTML in card text; line breaks are the part that carries meaning. */
function cardMarkdown(text: string): Rich {
  return chatMarkdown(text.replace(/<br\s*\/?>/gi, '\n'));
}

function cardText(value: unknown): Paragraph | undefined {
  return markup(value, cardMarkdown);
}

function headed(paragraph: Paragraph | undefined): Paragraph | undefined {
  return paragraph === undefined ? undefined : { rich: bold(paragraphRich(paragraph)) };
}

/** A fact or field: "name: value", either part skipped when missing. */
function fact(name: unknown, value: unknown): Paragraph | undefined {
  const label = boundedText(name)?.replace(/:$/, '');
  const text = boundedText(value);
  return richParagraph(join([label === undefined ? undefined : bold(cardMarkdown(clipChars(label, 200))), text === undefined ? undefined : cardMarkdown(text)], ': '));
}

function actionLinks(actions: { label: unknown; url: unknown }[]): Paragraph | undefined {
  const links = actions
    .slice(0, MAX_ACTIONS)
    .filter((action) => safeUrl(action.url) !== undefined)
    .map((action) => linkWithUrl(action.url as string, clipChars(str(action.label) ?? '', 100)));
  return richParagraph(join(links, ' · '));
}

// ---- MessageCard ----

/** `potentialAction`: OpenUri has per-OS `targets`, the older ViewAction a `target` list. */
function messageCardActions(value: unknown): Paragraph | undefined {
  return actionLinks(
    arr(value).map((entry) => {
      const action = obj(entry);
      const targets = arr(action.targets).map(obj);
      const uri = targets.find((target) => target.os === 'default')?.uri ?? targets[0]?.uri ?? arr(action.target)[0];
      return { label: action.name, url: uri };
    }),
  );
}

function renderMessageCard(card: Record<string, unknown>): RenderedWebhook {
  // `summary` is the card's notification line: one sentence saying what happened.
  const summary = cardText(card.summary);
  const title = cardText(card.title);
  const lead = summary ?? title;
  const leadText = lead === undefined ? '' : paragraphRich(lead).text;
  // Card headings often repeat what the summary already said.
  const unlessRepeated = (paragraph: Paragraph | undefined) =>
    paragraph === undefined || leadText.includes(paragraphRich(paragraph).text) ? undefined : paragraph;
  const sections = arr(card.sections).slice(0, MAX_SECTIONS).map(obj);
  return messageFromParagraphs(
    [
      lead,
      summary === undefined ? undefined : headed(unlessRepeated(title)),
      cardText(card.text),
      ...sections.flatMap((section) => [
        headed(unlessRepeated(cardText(section.title))),
        unlessRepeated(cardText(section.activityTitle)),
        unlessRepeated(cardText(section.activitySubtitle)),
        unlessRepeated(cardText(section.activityText)),
        ...arr(section.facts)
          .slice(0, MAX_FACTS)
          .map((entry) => fact(obj(entry).name, obj(entry).value)),
        cardText(section.text),
        messageCardActions(section.potentialAction),
      ]),
      messageCardActions(card.potentialAction),
    ],
    undefined,
    'Teams card with no text',
  );
}

// ---- Adaptive Cards ----

/** Walks a card's elements in reading order, with budgets on depth and on elements visited. */
function adaptiveParagraphs(elements: unknown, depth: number, budget: { left: number }): (Paragraph | undefined)[] {
  if (depth > MAX_CARD_DEPTH) return [];
  const out: (Paragraph | undefined)[] = [];
  for (const entry of arr(elements)) {
    if (budget.left <= 0) break;
    budget.left -= 1;
    const element = obj(entry);
    switch (element.type) {
      case 'TextBlock': {
        const text = cardText(element.text);
        const isHeading = str(element.weight)?.toLowerCase() === 'bolder' || ['large', 'extralarge'].includes(str(element.size)?.toLowerCase() ?? '');
        out.push(isHeading ? headed(text) : text);
        break;
      }
      case 'RichTextBlock':
        out.push(richParagraph(concat(arr(element.inlines).slice(0, MAX_CARD_ELEMENTS).map(textRun))));
        break;
      case 'FactSet':
        out.push(...arr(element.facts).slice(0, MAX_FACTS).map((entry) => fact(obj(entry).title, obj(entry).value)));
        break;
      case 'Image':
        out.push(linkParagraph(element.url, firstLine(element.altText, 100) ?? 'image'));
        break;
      case 'ActionSet':
        out.push(adaptiveActions(element.actions));
        break;
      case 'ColumnSet':
        for (const column of arr(element.columns)) {
          if (budget.left <= 0) break;
          out.push(...adaptiveParagraphs(obj(column).items, depth + 1, budget));
        }
        break;
      case 'Container':
        out.push(...adaptiveParagraphs(element.items, depth + 1, budget));
        break;
      case 'Table':
        for (const row of arr(element.rows)) {
          if (budget.left <= 0) break;
          const cells = arr(obj(row).cells).flatMap((cell) => adaptiveParagraphs(obj(cell).items, depth + 1, budget));
          const texts = cells.map((cell) => (cell === undefined ? undefined : paragraphRich(cell)));
          out.push(richParagraph(join(texts, ' | ')));
        }
        break;
      default:
        break;
    }
  }
  return out;
}

/** A RichTextBlock's TextRun (a bare string is allowed too). */
function textRun(value: unknown): Rich {
  if (typeof value === 'string') return rich(clipChars(value.slice(0, 2_000), 1_000));
  const run = obj(value);
  const text = clipChars(typeof run.text === 'string' ? run.text.slice(0, 2_000) : '', 1_000);
  const url = obj(run.selectAction).url;
  const shown = link(typeof url === 'string' ? url : undefined, text);
  return str(run.weight)?.toLowerCase() === 'bolder' ? bold(shown) : shown;
}

function adaptiveActions(value: unknown): Paragraph | undefined {
  return actionLinks(
    arr(value)
      .map(obj)
      .filter((action) => action.type === 'Action.OpenUrl')
      .map((action) => ({ label: action.title, url: action.url })),
  );
}

function renderAdaptiveCards(message: Record<string, unknown>): RenderedWebhook {
  const cards = arr(message.attachments)
    .map(obj)
    .filter((attachment) => str(attachment.contentType)?.startsWith('application/vnd.microsoft.card.'))
    .slice(0, MAX_CARDS)
    .map((attachment) => obj(attachment.content));
  const budget = { left: MAX_CARD_ELEMENTS };
  return messageFromParagraphs(
    [
      cardText(message.summary) ?? cardText(message.text),
      ...cards.flatMap((card) => [...adaptiveParagraphs(card.body, 0, budget), adaptiveActions(card.actions)]),
    ],
    undefined,
    'Teams card with no text',
  );
}

export function renderTeams(request: WebhookRequest): RenderedWebhook {
  const message = obj(request.payload);
  return Array.isArray(message.sections) || message['@type'] === 'MessageCard' ? renderMessageCard(message) : renderAdaptiveCards(message);
}
