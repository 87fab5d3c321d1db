/** STUB: to be written. */
import { rich, type RenderedWebhook } from './rich-text.js';
import type { WebhookRequest } from './types.js';

export function renderGitlab(_request: WebhookRequest): RenderedWebhook {
  return { summary: rich('TODO') };
}
