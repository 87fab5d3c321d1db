/**
 * From a webhook request to a room message: detect the sender, render with its renderer, and fit
 * the result into one event. `{"text": ...}` bodies keep their own, stricter path.
 */
import type { JsonObject } from '../../../rooms/events.js';
import { readWebhookPayload, webhookMessage } from '../message.js';
import { renderAlertmanager } from './alertmanager.js';
import { detectSender } from './detect.js';
import { renderDiscord } from './discord.js';
import { renderUnknown } from './fallback.js';
import { renderGithub } from './github.js';
import { renderGitlab } from './gitlab.js';
import { renderGrafana } from './grafana.js';
import { renderedMessage, type RenderedWebhook } from './rich-text.js';
import { renderSentry } from './sentry.js';
import { renderSlack, slackLinksInText } from './slack.js';
import { renderTeams } from './teams.js';
import { isSkipped, type Renderer, type Sender, type SkippedWebhook, type WebhookRequest } from './types.js';
import { renderUptimeKuma } from './uptime-kuma.js';

export type { Sender, WebhookRequest } from './types.js';
export { detectSender } from './detect.js';

/** Chat-sized: a `{text}` longer than this is posted as written, without link conversion. */
const MAX_LINKED_TEXT_CHARS = 8_000;

const RENDERERS: Record<Exclude<Sender, 'text'>, Renderer> = {
  forgejo: (request) => renderGithub(request, 'forgejo'),
  gitea: (request) => renderGithub(request, 'gitea'),
  github: (request) => renderGithub(request, 'github'),
  gitlab: renderGitlab,
  sentry: renderSentry,
  grafana: renderGrafana,
  alertmanager: renderAlertmanager,
  'uptime-kuma': renderUptimeKuma,
  teams: renderTeams,
  discord: renderDiscord,
  slack: renderSlack,
  unknown: renderUnknown,
};

export type RenderOutcome =
  | {
      sender: Sender;
      content: JsonObject;
      /** A renderer failed on this payload and the generic rendering was used instead. */
      rendererError?: unknown;
    }
  | { sender: Sender; skipped: string };

/** The m.room.message content for a webhook request; throws MatrixError for a refused `{text}` body. */
export function renderWebhook(request: WebhookRequest): RenderOutcome {
  const sender = detectSender(request);
  if (sender === 'text') {
    const payload = readWebhookPayload(request.payload);
    // Slack-style <url|label> links in a short plain {text} (Mattermost, Google Chat senders) become
    // links. Long texts (CI logs) stay exactly as sent: they keep the whole size budget for text.
    const linked = payload.html === undefined && payload.text.length <= MAX_LINKED_TEXT_CHARS ? slackLinksInText(payload.text) : undefined;
    return { sender, content: webhookMessage(linked === undefined ? payload : { ...payload, ...linked }) };
  }
  let rendered: RenderedWebhook | SkippedWebhook;
  let rendererError: unknown;
  try {
    rendered = RENDERERS[sender](request);
  } catch (err) {
    // A payload no renderer foresaw is still posted, generically, rather than refused.
    rendererError = err;
    rendered = renderUnknown(request);
  }
  if (isSkipped(rendered)) return { sender, skipped: rendered.skipped };
  const { text, html } = renderedMessage(rendered);
  const content = webhookMessage({ text, html, msgtype: 'm.notice' });
  return rendererError === undefined ? { sender, content } : { sender, content, rendererError };
}
