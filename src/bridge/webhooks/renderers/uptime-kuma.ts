/**
 * Uptime Kuma's Webhook notification (JSON body): `heartbeat` (the check that changed the
 * monitor's state), `monitor` and a ready-made `msg`. The "Test" button and certificate-expiry
 * notices send `heartbeat: null`; then `msg` is all there is.
 */
import { firstLine, link, num, obj, rich, safeUrl, str, type RenderedWebhook, type Rich } from './rich-text.js';
import type { WebhookRequest } from './types.js';

/** `heartbeat.status`: Uptime Kuma's DOWN, UP, PENDING, MAINTENANCE constants. */
const STATES: Record<number, { emoji: string; words: string }> = {
  0: { emoji: '🔴', words: 'is DOWN' },
  1: { emoji: '✅', words: 'is UP' },
  2: { emoji: '🟡', words: 'is PENDING' },
  3: { emoji: '🔧', words: 'is under MAINTENANCE' },
};

/** What the monitor checks: its URL for HTTP monitors (others carry a placeholder "https://"), else host and port. */
function monitorTarget(monitor: Record<string, unknown>): Rich | undefined {
  const url = str(monitor.url);
  if (url !== undefined && safeUrl(url) !== undefined) return link(url);
  const host = firstLine(monitor.hostname, 200);
  if (host === undefined) return undefined;
  const port = num(monitor.port);
  return rich(port === undefined ? host : `${host}:${port}`);
}

export function renderUptimeKuma(request: WebhookRequest): RenderedWebhook {
  const payload = obj(request.payload);
  const heartbeat = obj(payload.heartbeat);
  const monitor = obj(payload.monitor);
  const state = STATES[num(heartbeat.status) ?? -1];
  if (payload.heartbeat === null || state === undefined) {
    return { summary: rich('🔔 Uptime Kuma: ', firstLine(payload.msg, 300) ?? 'notification') };
  }
  // "[pmwiki] [🔴 Down] …": the name is in the message when the monitor object is missing.
  const name = firstLine(monitor.name, 200) ?? /^\[([^\]]+)\]/.exec(str(payload.msg) ?? '')?.[1] ?? 'Monitor';
  const message = firstLine(heartbeat.msg, 300);
  const target = monitorTarget(monitor);
  const ping = num(heartbeat.ping);
  const checkedAt = firstLine(heartbeat.localDateTime, 40) ?? firstLine(heartbeat.time, 40);
  const timezone = firstLine(heartbeat.timezone, 60);
  return {
    summary: rich(`${state.emoji} ${name} ${state.words}`, message && `: ${message}`, target && rich(' (', target, ')')),
    details: [
      checkedAt && rich(`Checked at ${checkedAt}${timezone ? ` (${timezone})` : ''}`),
      ping !== undefined && rich(`Response time: ${ping} ms`),
    ].filter((line): line is Rich => line !== undefined && line !== false),
  };
}
