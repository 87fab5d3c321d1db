/**
 * Turns the JSON posted to a webhook into a room message. Pure: the same payload always makes the
 * same content, and every refusal is a MatrixError that the webhook endpoint answers with.
 */
import { MatrixError } from '../../core/errors.js';
import type { JsonObject } from '../../rooms/events.js';
import { cutText, escapeHtml, jsonBytes } from '../matrix-html.js';
import { cutHtml, sanitizeMatrixHtml } from './html-sanitizer.js';

/**
 * Room events are capped at 64 KiB; the message content stays well under it, leaving room for the
 * event's own fields (ids, sender, timestamps).
 */
export const MAX_MESSAGE_CONTENT_BYTES = 60_000;
export const TRUNCATION_MARKER = '\n… (message truncated)';
const TRUNCATION_MARKER_HTML = '<br><em>… (message truncated)</em>';
const MAX_USERNAME_CHARS = 100;
const MSGTYPES = ['m.notice', 'm.text'] as const;

export interface WebhookPayload {
  text: string;
  html?: string | undefined;
  username?: string | undefined;
  msgtype?: (typeof MSGTYPES)[number] | undefined;
}

/** Checks the shape of a parsed body: an object with a non-empty `text` and optional fields. */
export function readWebhookPayload(body: unknown): WebhookPayload {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new MatrixError('M_BAD_JSON', 'The body must be a JSON object such as {"text": "Hello"}.');
  }
  const fields = body as Record<string, unknown>;
  const { text, html, username, msgtype } = fields;
  if (text === undefined) throw new MatrixError('M_BAD_JSON', 'The body has no "text" field: send {"text": "Hello"}.');
  if (typeof text !== 'string' || text.trim() === '') throw new MatrixError('M_BAD_JSON', '"text" must be a non-empty string.');
  if (html !== undefined && typeof html !== 'string') throw new MatrixError('M_BAD_JSON', '"html" must be a string.');
  if (username !== undefined && typeof username !== 'string') throw new MatrixError('M_BAD_JSON', '"username" must be a string.');
  if (msgtype !== undefined && !MSGTYPES.includes(msgtype as never)) {
    throw new MatrixError('M_BAD_JSON', '"msgtype" must be "m.notice" or "m.text".');
  }
  return { text, html, username, msgtype: msgtype as WebhookPayload['msgtype'] };
}

/** The m.room.message content for a payload, cut to fit when it would be too large. */
export function webhookMessage(payload: WebhookPayload): JsonObject {
  const username = cleanUsername(payload.username);
  const prefixText = username ? `${username}: ` : '';
  const prefixHtml = username ? `<strong>${escapeHtml(username)}</strong>: ` : '';
  const sanitized = payload.html === undefined ? undefined : sanitizeMatrixHtml(payload.html);
  const html = sanitized === undefined || sanitized.trim() === '' ? undefined : sanitized;

  const msgtype = payload.msgtype ?? 'm.notice';
  // With HTML the budget is shared: plain text gets up to two fifths, the HTML the rest.
  const overhead = 200 + jsonBytes(prefixText) + jsonBytes(prefixHtml);
  const textBudget = html === undefined ? MAX_MESSAGE_CONTENT_BYTES - overhead : Math.floor((MAX_MESSAGE_CONTENT_BYTES - overhead) * 0.4);
  const body = prefixText + cutText(payload.text, textBudget, TRUNCATION_MARKER);
  const content: JsonObject = { msgtype, body };
  if (html !== undefined) {
    const htmlBudget = MAX_MESSAGE_CONTENT_BYTES - overhead - jsonBytes(body);
    const cut = cutHtml(html, htmlBudget, TRUNCATION_MARKER_HTML);
    if (cut !== undefined) {
      content.format = 'org.matrix.custom.html';
      content.formatted_body = prefixHtml + cut;
    }
  } else if (prefixHtml) {
    // The sender's name in bold reads better; the text itself is shown as written.
    content.format = 'org.matrix.custom.html';
    content.formatted_body = prefixHtml + escapeHtml(body.slice(prefixText.length)).replace(/\n/g, '<br>');
    if (jsonBytes(content.formatted_body as string) + jsonBytes(body) > MAX_MESSAGE_CONTENT_BYTES - 200) {
      delete content.format;
      delete content.formatted_body;
    }
  }
  return content;
}

/** One line, no control characters, short: it is shown as a name. */
function cleanUsername(username: string | undefined): string | undefined {
  if (username === undefined) return undefined;
  // eslint-disable-next-line no-control-regex
  const cleaned = username.replace(/[\u0000-\u001f\u007f\u2028\u2029]+/g, ' ').trim();
  if (cleaned === '') return undefined;
  const chars = [...cleaned];
  return chars.length > MAX_USERNAME_CHARS ? `${chars.slice(0, MAX_USERNAME_CHARS).join('')}…` : cleaned;
}
