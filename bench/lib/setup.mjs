/** Accounts and rooms for a scenario, made through the same HTTP API the bots use. */
import { Client, CS, registerUser, roomPath } from './http-client.mjs';

/** Registers `count` users named `<prefix><i>`; returns [{ user_id, access_token }]. */
export async function registerUsers(ctx, prefix, count) {
  const client = new Client(ctx.server.baseUrl, { maxSockets: 4 });
  try {
    const users = [];
    for (let i = 0; i < count; i++) users.push(await registerUser(client, ctx.sharedSecret, `${prefix}${i}`, `pw-${prefix}${i}`));
    return users;
  } finally {
    client.close();
  }
}

/** The first user creates a public room; the others join it. Returns the room id. */
export async function roomWith(ctx, users) {
  const client = new Client(ctx.server.baseUrl);
  try {
    const { room_id: roomId } = await client.ok('POST', `${CS}/createRoom`, { token: users[0].access_token, body: { preset: 'public_chat' } });
    for (const user of users.slice(1)) await client.ok('POST', `${CS}/join/${roomPath(roomId)}`, { token: user.access_token, body: {} });
    return roomId;
  } finally {
    client.close();
  }
}
