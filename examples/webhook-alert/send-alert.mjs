#!/usr/bin/env node
// Posts an alert to a bridge webhook, which the bridge user turns into a room message.
//   WEBHOOK_URL=https://matrix.example.org/webhook/<id> node send-alert.mjs "disk almost full on db-1"
// The same with curl:
//   curl -sS -X POST "$WEBHOOK_URL" -d '{"text": "[WARNING] disk almost full on db-1", "username": "send-alert"}'
// Get a webhook URL by saying `!bridge webhook <name>` in a room the bridge is in (docs/bridge.md).
// Exits non-zero (and says why) when the hook refuses the alert, so a cron job or CI step notices.

export async function sendAlert(url, text, { severity = 'warning', source = 'send-alert', fetchImpl = fetch } = {}) {
  const label = severity.toUpperCase();
  const escaped = text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
  const response = await fetchImpl(url, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({
      text: `[${label}] ${text}`,
      html: `<strong>[${label}]</strong> ${escaped}`,
      username: source,
    }),
  });
  const answer = await response.text();
  if (!response.ok) throw new Error(`the webhook answered ${response.status}: ${answer}`);
  return JSON.parse(answer).event_id;
}

const isMain = import.meta.url === new URL(process.argv[1] ?? '', 'file:').href;
if (isMain) {
  const url = process.env.WEBHOOK_URL;
  const text = process.argv.slice(2).join(' ');
  if (!url || !text) {
    console.error('usage: WEBHOOK_URL=... send-alert.mjs <text>');
    process.exit(2);
  }
  sendAlert(url, text, { severity: process.env.SEVERITY ?? 'warning' }).then(
    (eventId) => console.log(`alert sent (${eventId})`),
    (err) => {
      console.error(`send-alert: ${err.message}`);
      process.exit(1);
    },
  );
}
