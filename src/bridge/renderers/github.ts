/** STUB: to be written. */
import { rich, type RenderedWebhook } from './rich-text.js';
import type { WebhookRequest } from './types.js';

export type GithubFamily = 'github' | 'gitea' | 'forgejo';

export function renderGithub(_request: WebhookRequest, _forge: GithubFamily): RenderedWebhook {
  return { summary: rich('TODO') };
}
