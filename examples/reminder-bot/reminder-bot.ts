/**
 * A reminder bot: `!remind 10m stand up` answers at once and, ten minutes later, reminds the
 * sender in the same room. Durations: s, m, h, d.
 * Run: HOMESERVER_URL=... BOT_USER=reminder BOT_PASSWORD=... node reminder-bot.js
 */
import { AutojoinRoomsMixin, MatrixAuth, type MatrixClient } from 'matrix-bot-sdk';

const UNITS: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const LONGEST_MS = 30 * UNITS.d!;

/** `!remind 10m text` → { ms, text }; null when the message is not a remind command. Pure. */
export function parseRemind(body: string): { ms: number; text: string } | { error: string } | null {
  if (!/^!remind(\s|$)/.test(body)) return null;
  const match = /^!remind\s+(\d+)([smhd])\s+(.+)$/s.exec(body.trim());
  if (!match) return { error: 'Usage: !remind <number><s|m|h|d> <text>, e.g. !remind 10m stand up' };
  const ms = Number(match[1]) * UNITS[match[2]!]!;
  if (ms <= 0 || ms > LONGEST_MS) return { error: 'I can remind you between 1 second and 30 days from now.' };
  return { ms, text: match[3]!.trim() };
}

/** When to run something; tests pass their own to fire reminders without waiting. */
export type Schedule = (ms: number, run: () => void) => void;

export async function setUpReminderBot(client: MatrixClient, schedule: Schedule = (ms, run) => void setTimeout(run, ms)): Promise<void> {
  const me = await client.getUserId();
  AutojoinRoomsMixin.setupOnClient(client);
  client.on('room.message', async (roomId: string, event: { sender: string; event_id: string; content?: { body?: unknown } }) => {
    const body = event.content?.body;
    if (event.sender === me || typeof body !== 'string') return;
    const command = parseRemind(body);
    if (command === null) return;
    // A bad command gets a human answer, not silence.
    if ('error' in command) {
      await client.replyNotice(roomId, event, command.error);
      return;
    }
    const when = body.trim().split(/\s+/)[1];
    await client.replyNotice(roomId, event, `OK, I will remind you in ${when}.`);
    schedule(command.ms, () => {
      void client.sendMessage(roomId, {
        msgtype: 'm.text',
        body: `${event.sender}: ⏰ ${command.text}`,
        'm.mentions': { user_ids: [event.sender] },
      });
    });
  });
}

export async function main(): Promise<void> {
  const { HOMESERVER_URL, BOT_USER, BOT_PASSWORD } = process.env;
  if (!HOMESERVER_URL || !BOT_USER || !BOT_PASSWORD) throw new Error('set HOMESERVER_URL, BOT_USER and BOT_PASSWORD');
  const client = await new MatrixAuth(HOMESERVER_URL).passwordLogin(BOT_USER, BOT_PASSWORD);
  await setUpReminderBot(client);
  await client.start();
}
