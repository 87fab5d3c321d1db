#!/usr/bin/env node
// Posts an alert to a bridge webhook, which the bridge bot turns into a room message.
//   WEBHOOK_URL=http://127.0.0.1:8008/<your hook's path> node send-alert.mjs "disk almost full on db-1"
// The same with curl:
//   curl -sS -X POST "$WEBHOOK_URL" -H 'Content-Type: application/json' -d '{"text": "disk almost full on db-1"}'
// Exits non-zero (and says why) when the hook refuses the alert, so a cron job or CI step notices.

export async function sendAlert(url, text, { severity = 'warning', fetchImpl = fetch } = {}) {
  const response = await fetchImpl(url, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ text, severity, source: 'send-alert' }),
  });
  if (!response.ok) throw new Error(`the webhook answered ${response.status}: ${await response.text()}`);
  return response.status;
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
    () => console.log('alert sent'),
    (err) => {
      console.error(`send-alert: ${err.message}`);
      process.exit(1);
    },
  );
}
