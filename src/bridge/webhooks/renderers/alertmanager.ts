/**
 * Prometheus Alertmanager's webhook (`webhook_configs`): a group of alerts that share a route.
 * The summary says what the group is (status, name, severity, where) and what the alerts say; each
 * alert gets a line below. Grafana's unified alerting sends the same shape, so its renderer reuses
 * the pieces exported here.
 */
import { arr, firstLine, join, link, obj, rich, str, type Part, type RenderedWebhook, type Rich } from './rich-text.js';
import type { WebhookRequest } from './types.js';

export type AlertStatus = 'firing' | 'resolved';
export const ALERT_EMOJI: Record<AlertStatus, string> = { firing: '🔥', resolved: '✅' };

/** Lines under the summary; a storm of alerts is counted, not listed. */
export const MAX_ALERT_LINES = 10;
/** Alert texts quoted in the summary itself, each shorter than on its own line. */
const MAX_SUMMARY_TEXTS = 3;
const MAX_SUMMARY_TEXT_CHARS = 150;
const MAX_TEXT_CHARS = 500;
const MAX_NAME_CHARS = 200;
/** Labels that say where an alert fires, in order of preference. */
const PLACE_LABELS = ['instance', 'host', 'hostname'];

export type Alert = Record<string, unknown>;

/** Decided per alert from `status`: `endsAt` is unreliable (zero time on resolved alerts, a future time on firing ones). */
export function alertStatus(alert: Alert): AlertStatus {
  return alert.status === 'resolved' ? 'resolved' : 'firing';
}

export function groupStatus(payload: Record<string, unknown>, alerts: Alert[]): AlertStatus {
  if (payload.status === 'resolved' || payload.status === 'firing') return payload.status;
  return alerts.some((alert) => alertStatus(alert) === 'firing') ? 'firing' : 'resolved';
}

function label(alert: Alert, name: string): string | undefined {
  return str(obj(alert.labels)[name]);
}

function place(alert: Alert): string | undefined {
  for (const name of PLACE_LABELS) {
    const value = label(alert, name);
    if (value !== undefined) return value;
  }
  return undefined;
}

/** The value every alert has for `read`, else undefined. Computed from the alerts: `commonLabels` may leave some out. */
function sharedValue(alerts: Alert[], read: (alert: Alert) => string | undefined): string | undefined {
  const first = alerts[0] === undefined ? undefined : read(alerts[0]);
  return first !== undefined && alerts.every((alert) => read(alert) === first) ? first : undefined;
}

/** What all alerts of a group have in common, so each alert's line can leave it out. */
export interface SharedFacts {
  name?: string | undefined;
  severity?: string | undefined;
  place?: string | undefined;
  summary?: string | undefined;
  generatorUrl?: string | undefined;
}

export function sharedFacts(alerts: Alert[], commonLabels: unknown): SharedFacts {
  if (alerts.length === 0) {
    const labels = obj(commonLabels);
    return { name: str(labels.alertname), severity: str(labels.severity), place: PLACE_LABELS.map((name) => str(labels[name])).find(Boolean) };
  }
  return {
    name: sharedValue(alerts, (alert) => label(alert, 'alertname')),
    severity: sharedValue(alerts, (alert) => label(alert, 'severity')),
    place: sharedValue(alerts, place),
    summary: sharedValue(alerts, (alert) => str(obj(alert.annotations).summary)),
    generatorUrl: sharedValue(alerts, (alert) => str(alert.generatorURL)),
  };
}

/**
 * What an alert says: its summary, unless every alert of the group has that same summary. Then it
 * names the rule rather than this alert, and the description tells the alerts apart.
 */
export function alertText(alert: Alert, shared: SharedFacts, maxChars = MAX_TEXT_CHARS): string | undefined {
  const annotations = obj(alert.annotations);
  const summary = str(annotations.summary);
  const description = str(annotations.description) ?? str(annotations.message);
  const text = summary !== undefined && summary !== shared.summary ? summary : (description ?? summary);
  return firstLine(text, maxChars);
}

/** The distinct texts of the alerts with `status`, a few of them: "a; b; …". */
export function summaryTexts(alerts: Alert[], status: AlertStatus, shared: SharedFacts): Rich {
  const texts = new Set<string>();
  for (const alert of alerts) {
    if (alertStatus(alert) !== status) continue;
    const text = alertText(alert, shared, MAX_SUMMARY_TEXT_CHARS);
    if (text === undefined) continue;
    texts.add(text);
    if (texts.size > MAX_SUMMARY_TEXTS) break;
  }
  const shown = [...texts].slice(0, MAX_SUMMARY_TEXTS);
  return join(texts.size > MAX_SUMMARY_TEXTS ? [...shown, '…'] : shown, '; ');
}

/** Up to three distinct alert names, for a group that does not share one. */
function alertNames(alerts: Alert[]): string {
  const names = new Set<string>();
  for (const alert of alerts) {
    const name = firstLine(label(alert, 'alertname'), 80);
    if (name !== undefined) names.add(name);
    if (names.size > 3) break;
  }
  const shown = [...names].slice(0, 3);
  return names.size === 0 ? 'alerts' : names.size > 3 ? `${shown.join(', ')}, …` : shown.join(', ');
}

/** One alert's line: status, its name linked to its source, whatever the group does not share, and its text. */
export function alertLine(alert: Alert, shared: SharedFacts, extra: Part[] = []): Rich {
  const status = alertStatus(alert);
  const severity = shared.severity === undefined ? label(alert, 'severity') : undefined;
  const where = shared.place === undefined ? place(alert) : undefined;
  const name = firstLine(label(alert, 'alertname'), MAX_NAME_CHARS) ?? 'alert';
  const text = alertText(alert, shared);
  return rich(
    `${ALERT_EMOJI[status]} `,
    link(str(alert.generatorURL), name),
    severity && ` [${firstLine(severity, 40)}]`,
    where && ` on ${firstLine(where, 100)}`,
    text && `: ${text}`,
    ...extra,
  );
}

/** Lines for the first alerts, then how many more there are (those listed and those the sender left out). */
export function alertLines(alerts: Alert[], shared: SharedFacts, truncated: number, extra: (alert: Alert) => Part[] = () => []): Rich[] {
  const lines = alerts.slice(0, MAX_ALERT_LINES).map((alert) => alertLine(alert, shared, extra(alert)));
  const more = alerts.length - lines.length + truncated;
  if (more > 0) lines.push(rich(`… and ${more} more`));
  return lines;
}

/** Alerts the sender counted but did not send (`max_alerts`). */
export function truncatedCount(payload: Record<string, unknown>): number {
  const count = payload.truncatedAlerts;
  return typeof count === 'number' && Number.isInteger(count) && count > 0 ? count : 0;
}

export function renderAlertmanager(request: WebhookRequest): RenderedWebhook {
  const payload = obj(request.payload);
  const alerts = arr(payload.alerts).map(obj);
  const truncated = truncatedCount(payload);
  const status = groupStatus(payload, alerts);
  const shared = sharedFacts(alerts, payload.commonLabels);
  // Alerts the sender left out count with the group's status: nothing else is known of them.
  const counted = alerts.filter((alert) => alertStatus(alert) === status).length + truncated;
  const others = alerts.length + truncated - counted;
  const otherWord = status === 'firing' ? 'resolved' : 'firing';
  const count = counted + others > 1 ? ` (${counted}${others > 0 ? `, ${others} ${otherWord}` : ''})` : '';
  const name = shared.name === undefined ? alertNames(alerts) : link(shared.generatorUrl, firstLine(shared.name, MAX_NAME_CHARS));
  const texts = summaryTexts(alerts, status, shared);
  const summary = rich(
    `${ALERT_EMOJI[status]} ${status.toUpperCase()}${count} `,
    name,
    // Severity matters while it fires; on resolution it is noise.
    status === 'firing' && shared.severity && ` [${firstLine(shared.severity, 40)}]`,
    shared.place && ` on ${firstLine(shared.place, 100)}`,
    texts.text !== '' && rich(': ', texts),
  );
  return { summary, details: alerts.length + truncated > 1 ? alertLines(alerts, shared, truncated) : undefined };
}
