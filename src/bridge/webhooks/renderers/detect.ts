/**
 * Which sender posted a webhook: headers first (they name the sender and the event), then the
 * body's shape. Forgejo and Gitea also send GitHub's event header, so they are asked about first.
 */
import { arr, obj, str } from './rich-text.js';
import { header, type Sender, type WebhookRequest } from './types.js';

/** Fields only Slack's incoming-webhook format has (ours shares `text` and `username`). */
const SLACK_ONLY_FIELDS = ['icon_emoji', 'icon_url', 'channel', 'mrkdwn', 'unfurl_links', 'unfurl_media', 'link_names', 'thread_ts'];

export function detectSender(request: WebhookRequest): Sender {
  // Some Gitea/Forgejo events (status, package) leave the event header empty and name only the type.
  if (header(request, 'x-forgejo-event') || header(request, 'x-forgejo-event-type')) return 'forgejo';
  if (header(request, 'x-gitea-event') || header(request, 'x-gitea-event-type') || header(request, 'x-gogs-event')) return 'gitea';
  if (header(request, 'x-github-event')) return 'github';
  if (header(request, 'x-gitlab-event')) return 'gitlab';
  if (header(request, 'sentry-hook-resource')) return 'sentry';
  return senderOfBody(request.payload);
}

function senderOfBody(payload: unknown): Sender {
  if (Array.isArray(payload)) return 'unknown';
  // Nothing to show (a scalar, `{}`): the `{text}` path refuses it with a message saying what to send.
  if (typeof payload !== 'object' || payload === null || Object.keys(payload).length === 0) return 'text';
  const body = obj(payload);
  const has = (key: string) => Object.hasOwn(body, key);
  const alerts = Array.isArray(body.alerts);
  // Grafana's unified alerting extends Alertmanager's shape, so it is told apart first.
  if (alerts && (has('orgId') || (has('state') && has('title') && str(body.version) !== '4'))) return 'grafana';
  if (has('ruleName') && has('state') && (has('evalMatches') || has('ruleUrl'))) return 'grafana';
  if (alerts && (str(body.version) === '4' || has('groupKey'))) return 'alertmanager';
  if (has('heartbeat') && has('monitor') && typeof body.msg === 'string') return 'uptime-kuma';
  if (typeof body.object_kind === 'string' && has('project')) return 'gitlab';
  if (body['@type'] === 'MessageCard' || (Array.isArray(body.sections) && (has('summary') || has('title') || has('text')))) return 'teams';
  if (arr(body.attachments).some((attachment) => str(obj(attachment).contentType)?.startsWith('application/vnd.microsoft.card.'))) return 'teams';
  if (Array.isArray(body.embeds) || (typeof body.content === 'string' && !has('text'))) return 'discord';
  // `blocks` and `attachments` are Slack's even when null (Alertmanager's slack_configs sends "blocks": null).
  if (has('blocks') || has('attachments') || SLACK_ONLY_FIELDS.some(has)) return 'slack';
  if (has('text')) return 'text';
  return 'unknown';
}
