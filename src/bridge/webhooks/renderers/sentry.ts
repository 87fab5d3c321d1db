/**
 * Sentry's integration-platform webhooks (internal integrations). The `Sentry-Hook-Resource`
 * header names the kind (issue, event_alert, metric_alert, error, comment, installation); the
 * body's `action` says what happened to it.
 */
import { clipChars, firstLine, join, link, lookup, obj, quoted, rich, safeUrl, str, type RenderedWebhook, type Rich } from './rich-text.js';
import { header, type WebhookRequest } from './types.js';

const MAX_TITLE_CHARS = 200;
const MAX_COMMENT_CHARS = 500;

/** A page a person can open: Sentry also sends API URLs (`/api/0/…`), which answer JSON. */
function pageUrl(...candidates: unknown[]): string | undefined {
  for (const candidate of candidates) {
    const url = safeUrl(candidate);
    if (url !== undefined && !new URL(url).pathname.startsWith('/api/')) return candidate as string;
  }
  return undefined;
}

/** "(error, __main__ in <module>)": level and culprit, when present. */
function levelAndCulprit(item: Record<string, unknown>): string | undefined {
  const parts = [firstLine(item.level, 20), firstLine(item.culprit, MAX_TITLE_CHARS)].filter((part) => part !== undefined);
  return parts.length > 0 ? `(${parts.join(', ')})` : undefined;
}

/** The person who did it; Sentry itself (an "application" actor) is not worth naming. */
function actorName(payload: Record<string, unknown>): string | undefined {
  const actor = obj(payload.actor);
  return actor.type === 'user' ? firstLine(actor.name, 100) : undefined;
}

function renderIssue(payload: Record<string, unknown>, action: string): RenderedWebhook {
  const issue = obj(obj(payload.data).issue);
  const id = firstLine(issue.shortId, 100) ?? firstLine(issue.id, 100);
  const project = firstLine(obj(issue.project).name, 100) ?? firstLine(obj(issue.project).slug, 100);
  const url = pageUrl(issue.web_url, issue.permalink, issue.url);
  const title = firstLine(issue.title, MAX_TITLE_CHARS);
  const issueRef = link(url, join(['Sentry issue', id], ' '));
  const where = project && ` in ${project}`;
  const about = join([title, levelAndCulprit(issue)], ' ');
  // resolved, assigned, ignored, archived read as they are; "unresolved" means someone reopened it.
  const verb = action === 'unresolved' ? 'reopened' : action;
  const assignee = action === 'assigned' ? firstLine(obj(issue.assignedTo).name ?? obj(issue.assignedTo).email, 100) : undefined;
  const actor = actorName(payload);
  let lead: Rich;
  if (action === 'created') lead = rich('New ', issueRef, where);
  else if (actor !== undefined) lead = rich(`${actor} ${verb} `, issueRef, assignee && ` to ${assignee}`, where);
  else lead = rich(issueRef, where, ` was ${verb}`, assignee && ` to ${assignee}`);
  return { summary: join([lead, about], ': '), url };
}

function renderEventAlert(payload: Record<string, unknown>): RenderedWebhook {
  const data = obj(payload.data);
  const event = obj(data.event);
  const rule = firstLine(data.triggered_rule, MAX_TITLE_CHARS);
  const url = pageUrl(event.web_url, event.url);
  const title = firstLine(event.title, MAX_TITLE_CHARS) ?? firstLine(event.message, MAX_TITLE_CHARS);
  return {
    summary: rich('🚨 ', link(url, rule === undefined ? 'Sentry alert' : `Sentry alert "${rule}"`), ': ', join([title ?? 'an event', levelAndCulprit(event)], ' ')),
    url,
  };
}

const METRIC_ALERT_EMOJI: Record<string, string> = { critical: '🔴', warning: '🟡', resolved: '✅' };

function renderMetricAlert(payload: Record<string, unknown>, action: string): RenderedWebhook {
  const data = obj(payload.data);
  const metricAlert = obj(data.metric_alert);
  const title = firstLine(data.description_title, MAX_TITLE_CHARS) ?? firstLine(metricAlert.title, MAX_TITLE_CHARS) ?? firstLine(obj(metricAlert.alert_rule).name, MAX_TITLE_CHARS);
  const url = pageUrl(data.web_url);
  return {
    summary: rich(`${lookup(METRIC_ALERT_EMOJI, action) ?? '🔔'} `, link(url, `Sentry metric alert ${action}`), title && `: ${title}`),
    url,
    details: [firstLine(data.description_text, 300)].filter((line) => line !== undefined).map((line) => rich(line)),
  };
}

function renderError(payload: Record<string, unknown>): RenderedWebhook {
  const error = obj(obj(payload.data).error);
  const url = pageUrl(error.web_url, error.url);
  const title = firstLine(error.title, MAX_TITLE_CHARS) ?? firstLine(error.message, MAX_TITLE_CHARS) ?? 'an error';
  return { summary: rich('⚠️ ', link(url, 'Sentry error'), ': ', join([title, levelAndCulprit(error)], ' ')), url };
}

const COMMENT_VERBS: Record<string, string> = { created: 'commented on', updated: 'edited a comment on', deleted: 'deleted a comment on' };

function renderComment(payload: Record<string, unknown>, action: string): RenderedWebhook {
  const data = obj(payload.data);
  const who = actorName(payload) ?? firstLine(obj(payload.actor).name, 100) ?? 'Someone';
  const issue = firstLine(data.issue_id, 40);
  const project = firstLine(data.project_slug, 100);
  const comment = action === 'deleted' ? undefined : str(data.comment);
  return {
    summary: rich(`${who} ${lookup(COMMENT_VERBS, action) ?? `${action} a comment on`} Sentry issue`, issue && ` ${issue}`, project && ` in ${project}`),
    block: comment === undefined ? undefined : quoted(clipChars(comment.slice(0, MAX_COMMENT_CHARS * 2), MAX_COMMENT_CHARS)),
  };
}

function renderInstallation(payload: Record<string, unknown>, action: string): RenderedWebhook {
  const installation = obj(obj(payload.data).installation);
  const app = firstLine(obj(installation.app).slug, 100) ?? 'Sentry integration';
  const organization = firstLine(obj(installation.organization).slug, 100);
  const verb = action === 'deleted' ? 'uninstalled from' : 'installed in';
  return { summary: rich(`Sentry integration ${app} ${organization ? `${verb} ${organization}` : action}`) };
}

export function renderSentry(request: WebhookRequest): RenderedWebhook {
  const payload = obj(request.payload);
  const resource = header(request, 'sentry-hook-resource') ?? 'event';
  const action = firstLine(payload.action, 40) ?? 'received';
  switch (resource) {
    case 'issue':
      return renderIssue(payload, action);
    case 'event_alert':
      return renderEventAlert(payload);
    case 'metric_alert':
      return renderMetricAlert(payload, action);
    case 'error':
      return renderError(payload);
    case 'comment':
      return renderComment(payload, action);
    case 'installation':
      return renderInstallation(payload, action);
    default:
      return { summary: rich(`Sentry ${firstLine(resource, 40)} ${action}`) };
  }
}
