/** What a renderer sees of a webhook request, and the senders we recognise. */
import type { RenderedWebhook } from './rich-text.js';

export interface WebhookRequest {
  /** Header names in lower case (Node's own form); values as sent. */
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  /** The parsed JSON body (for form posts, the parsed `payload=` field). */
  readonly payload: unknown;
}

/**
 * A delivery that is deliberately not posted: a duplicate (GitHub sends "published" and
 * "released" for one release) or a run that has not finished yet. The sender is still answered 200.
 */
export interface SkippedWebhook {
  skipped: string;
}

export type Renderer = (request: WebhookRequest) => RenderedWebhook | SkippedWebhook;

export function isSkipped(value: RenderedWebhook | SkippedWebhook): value is SkippedWebhook {
  return typeof (value as SkippedWebhook).skipped === 'string';
}

export const SENDERS = [
  'forgejo',
  'gitea',
  'github',
  'gitlab',
  'sentry',
  'grafana',
  'alertmanager',
  'uptime-kuma',
  'teams',
  'discord',
  'slack',
  'text',
  'unknown',
] as const;
export type Sender = (typeof SENDERS)[number];

/** A header's value as one string (the first when it was repeated). */
export function header(request: WebhookRequest, name: string): string | undefined {
  const value = request.headers[name.toLowerCase()];
  const first = Array.isArray(value) ? value[0] : value;
  return first === undefined || first.trim() === '' ? undefined : first.trim();
}
