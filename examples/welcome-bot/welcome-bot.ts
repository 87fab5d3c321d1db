/**
 * A welcome bot: joins rooms it is invited to and greets every new member.
 * Run: HOMESERVER_URL=... BOT_USER=welcome BOT_PASSWORD=... node welcome-bot.js
 */
import { AutojoinRoomsMixin, MatrixAuth, type MatrixClient } from 'matrix-bot-sdk';

/** Wires the welcome behaviour onto a logged-in client; call `client.start()` afterwards. */
export async function setUpWelcomeBot(client: MatrixClient, greeting = (name: string) => `Welcome, ${name}! 👋`): Promise<void> {
  const me = await client.getUserId();
  AutojoinRoomsMixin.setupOnClient(client);
  // Rooms where the bot has seen its own join: joins before it are history, not newcomers.
  const present = new Set<string>();
  client.on('room.event', async (roomId: string, event: { type: string; state_key?: string; content?: { membership?: string; displayname?: string }; unsigned?: { prev_content?: { membership?: string } } }) => {
    if (event.type !== 'm.room.member' || event.state_key === undefined) return;
    if (event.state_key === me) {
      if (event.content?.membership === 'join') present.add(roomId);
      else present.delete(roomId);
      return;
    }
    if (!present.has(roomId)) return;
    // A join that follows a join is a profile change, not a newcomer.
    if (event.content?.membership !== 'join' || event.unsigned?.prev_content?.membership === 'join') return;
    const name = event.content.displayname ?? event.state_key;
    await client.sendNotice(roomId, greeting(name));
  });
}

export async function main(): Promise<void> {
  const { HOMESERVER_URL, BOT_USER, BOT_PASSWORD } = process.env;
  if (!HOMESERVER_URL || !BOT_USER || !BOT_PASSWORD) throw new Error('set HOMESERVER_URL, BOT_USER and BOT_PASSWORD');
  const client = await new MatrixAuth(HOMESERVER_URL).passwordLogin(BOT_USER, BOT_PASSWORD);
  await setUpWelcomeBot(client);
  await client.start();
}
