// The bot: answers `!ping` with `pong` in the rooms it is in.
/** @param {import('matrix-bot-sdk').MatrixClient} client */
export async function setUpMyBot(client) {
  const me = await client.getUserId();
  client.on('room.message', async (roomId, event) => {
    if (event.sender === me || event.content?.body !== '!ping') return;
    await client.sendText(roomId, 'pong');
  });
}
