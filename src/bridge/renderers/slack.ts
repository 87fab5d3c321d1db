/** STUB: to be written. */
import { rich, type Rich, type RenderedWebhook } from './rich-text.js';
import type { WebhookRequest } from './types.js';

export function renderSlack(_request: WebhookRequest): RenderedWebhook {
  return { summary: rich('TODO') };
}

/** Slack's mrkdwn (links, *bold*, _italic_, ~strike~, `code`, ```blocks```, :emoji:, &amp; escapes) as rich text. */
export function slackMrkdwn(text: string): Rich {
  return rich(text);
}

/**
 * For a plain `{text}` body: when it holds Slack-style `<https://url|label>` or `<https://url>` links,
 * the text with links written as "label (url)" and HTML with real links; undefined when it holds none.
 */
export function slackLinksInText(_text: string): { text: string; html: string } | undefined {
  return undefined;
}
