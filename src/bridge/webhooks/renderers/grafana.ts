/**
 * Grafana's webhook contact point. Unified alerting (Grafana 8+) sends Alertmanager's shape plus
 * a ready-made `title`, per-alert `values` and links to the dashboard, panel and silence form.
 * Legacy dashboard alerts (`ruleName`, `state`, `evalMatches`) come here too.
 */
import { ALERT_EMOJI, alertLines, groupStatus, sharedFacts, summaryTexts, truncatedCount, type Alert } from './alertmanager.js';
import { arr, clipChars, firstLine, join, link, lookup, num, obj, plural, rich, safeUrl, str, type Part, type RenderedWebhook, type Rich } from './rich-text.js';
import type { WebhookRequest } from './types.js';

const MAX_VALUES = 8;
const MAX_EVAL_MATCHES = 10;

/** Links the HTML shows after an alert; the plain text would only gain bare words. */
function htmlOnly(piece: Rich): Rich {
  return { text: '', html: piece.html };
}

function formatValue(value: unknown): string | undefined {
  const number = num(value);
  if (number === undefined) return firstLine(value, 40);
  // Query results come with every digit the float has: six significant ones say enough.
  return Number.isInteger(number) ? String(number) : String(Number(number.toPrecision(6)));
}

/** "A=2473545728, B=0" from `values`, or the start of `valueString` when that is all there is. */
function alertValues(alert: Alert): string | undefined {
  const entries = Object.entries(obj(alert.values));
  if (entries.length > 0) {
    const shown = entries.slice(0, MAX_VALUES).map(([key, value]) => `${clipChars(key, 40)}=${formatValue(value) ?? '?'}`);
    return shown.join(', ') + (entries.length > MAX_VALUES ? ', …' : '');
  }
  return firstLine(alert.valueString, 120);
}

function alertExtras(alert: Alert): Part[] {
  const values = alertValues(alert);
  const links = (
    [
      ['dashboard', alert.dashboardURL],
      ['panel', alert.panelURL],
      ['silence', alert.silenceURL],
    ] as const
  )
    .filter(([, url]) => safeUrl(url) !== undefined)
    .map(([label, url]) => link(url as string, label));
  return [values && ` — ${values}`, links.length > 0 && htmlOnly(rich(' (', join(links, ' · '), ')'))];
}

function renderUnifiedAlerting(payload: Record<string, unknown>): RenderedWebhook {
  const alerts = arr(payload.alerts).map(obj);
  const status = groupStatus(payload, alerts);
  const shared = sharedFacts(alerts, payload.commonLabels);
  const texts = summaryTexts(alerts, status, shared);
  const title = firstLine(payload.title, 200) ?? `${status.toUpperCase()} ${plural(alerts.length, 'alert')}`;
  // The rule's page when all alerts come from one rule; Grafana itself otherwise.
  const url = [shared.generatorUrl, str(payload.externalURL)].find((candidate) => safeUrl(candidate) !== undefined);
  return {
    summary: rich(`${ALERT_EMOJI[status]} `, link(url, title), texts.text !== '' && rich(': ', texts)),
    url,
    details: alertLines(alerts, shared, truncatedCount(payload), alertExtras),
  };
}

/** Legacy alerting's states (`alerting`, `ok`, `no_data`, `pending`, `paused`). */
const LEGACY_STATE_EMOJI: Record<string, string> = { alerting: '🔥', ok: '✅', no_data: '❓', pending: '⏳', paused: '⏸️' };

function renderLegacyAlert(payload: Record<string, unknown>): RenderedWebhook {
  const state = str(payload.state)?.toLowerCase() ?? 'alerting';
  const title = firstLine(payload.title, 200) ?? `[${state}] ${firstLine(payload.ruleName, 200) ?? 'Grafana alert'}`;
  const message = firstLine(payload.message, 300);
  const url = safeUrl(payload.ruleUrl) === undefined ? undefined : (payload.ruleUrl as string);
  const matches = arr(payload.evalMatches);
  const details = matches
    .slice(0, MAX_EVAL_MATCHES)
    .map((entry) => join([firstLine(obj(entry).metric, 120), formatValue(obj(entry).value)], ': '))
    .filter((line) => line.text !== '');
  if (matches.length > MAX_EVAL_MATCHES) details.push(rich(`… and ${matches.length - MAX_EVAL_MATCHES} more`));
  return {
    summary: rich(`${lookup(LEGACY_STATE_EMOJI, state) ?? '🔔'} `, link(url, title), message && `: ${message}`),
    url,
    details,
  };
}

export function renderGrafana(request: WebhookRequest): RenderedWebhook {
  const payload = obj(request.payload);
  return Array.isArray(payload.alerts) ? renderUnifiedAlerting(payload) : renderLegacyAlert(payload);
}
