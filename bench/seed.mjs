#!/usr/bin/env node
/**
 * Seeds a bench database for the growth scenario: one bot joined to `rooms` rooms and `events`
 * messages spread over them, written through the server's own services (compiled, from dist/),
 * so every row is exactly what the server writes. Run it in its own process before the server
 * starts on the same file; it prints one JSON line: { bot, poster, rooms, events, seconds }.
 *
 *   node bench/seed.mjs --db FILE --rooms 1000 --events 1000000 [--batch 5000]
 *
 * Rooms and joins go through the room service; messages go straight to the event writer (the
 * same code a send ends in, auth rules included), up to 500 events per writer request and
 * `--batch` events per event-loop turn. The writer group-commits every request submitted in one
 * turn, so each turn is one transaction. This is about 5x faster than one send per message (the
 * per-request transaction-id lookup and promise overhead dominate at this scale).
 * synchronous=normal: it is seeding, not a measurement; the server later opens the file with the
 * mode under test.
 */
import { parseArgs } from 'node:util';

const { values: args } = parseArgs({
  options: {
    db: { type: 'string' },
    rooms: { type: 'string', default: '1000' },
    events: { type: 'string', default: '1000000' },
    batch: { type: 'string', default: '5000' },
    'server-name': { type: 'string', default: 'bench.local' },
  },
});
if (!args.db) {
  console.error('usage: node bench/seed.mjs --db FILE [--rooms N] [--events N] [--batch N]');
  process.exit(2);
}
const roomCount = Number(args.rooms);
const eventCount = Number(args.events);
const batch = Number(args.batch);

const dist = new URL('../dist/src/', import.meta.url);
const { finishConfig } = await import(new URL('config/index.js', dist).href);
const { openDatabase, Storage, migrateToLatest } = await import(new URL('storage/index.js', dist).href);
const { createServices } = await import(new URL('services.js', dist).href);
const { systemClock } = await import(new URL('core/clock.js', dist).href);

const started = performance.now();
const config = finishConfig({
  server_name: args['server-name'],
  database: { path: args.db, synchronous: 'normal' },
  ratelimiting_enabled: false,
  password_hashing: { memory_cost_kib: 8, time_cost: 1 },
  bridge: { enabled: false },
  logging: { level: 'warn' },
});
const storage = new Storage(openDatabase(config.database));
try {
  await migrateToLatest(storage.db);
  const services = await createServices(config, storage, systemClock);
  const { accounts, sessions, rooms } = services;

  /** A user with a password-less access token, as the server would issue at login. */
  const makeUser = async (localpart) => {
    await accounts.createUser({ localpart, password: `pw-${localpart}` });
    const session = await sessions.createSession(`@${localpart}:${config.server_name}`);
    return {
      user_id: session.user_id,
      access_token: session.access_token,
      requester: { userId: session.user_id, deviceId: session.device_id, accessTokenId: 0 },
    };
  };
  const bot = await makeUser('growthbot');
  const poster = await makeUser('growthposter');

  // The poster creates every room (public, so the bot may join) and the bot joins each one.
  const roomIds = [];
  for (let from = 0; from < roomCount; from += 200) {
    const n = Math.min(200, roomCount - from);
    const created = await Promise.all(
      Array.from({ length: n }, (_, i) => rooms.createRoom(poster.requester, { preset: 'public_chat', name: `growth ${from + i}` })),
    );
    await Promise.all(created.map((roomId) => rooms.join(bot.requester, roomId)));
    roomIds.push(...created);
  }

  // One writer request may write many events (each checked by the auth rules).
  const perRequest = 500;
  const writer = services.writer;
  const perRoom = Math.floor(eventCount / roomIds.length);
  const extra = eventCount - perRoom * roomIds.length;
  const plan = roomIds.map((roomId, i) => ({ roomId, count: perRoom + (i < extra ? 1 : 0), done: 0 }));
  let sent = 0;
  let lastReport = performance.now();
  const scope = (roomId) => `send\u0000${roomId}\u0000m.room.message`;
  const deviceId = poster.requester.deviceId;
  while (sent < eventCount) {
    const requests = [];
    let inTurn = 0;
    for (const room of plan) {
      if (room.done >= room.count || inTurn >= batch) continue;
      const n = Math.min(perRequest, room.count - room.done, batch - inTurn);
      const first = room.done;
      room.done += n;
      inTurn += n;
      requests.push(
        writer.submit({
          roomId: room.roomId,
          prepare: () =>
            Array.from({ length: n }, (_, i) => ({
              type: 'm.room.message',
              sender: poster.user_id,
              content: { msgtype: 'm.text', body: `seeded message ${first + i} in ${room.roomId}` },
              txn: { deviceId, scope: scope(room.roomId), txnId: `seed-${first + i}` },
            })),
        }),
      );
    }
    await Promise.all(requests);
    sent += inTurn;
    if (performance.now() - lastReport > 5000) {
      lastReport = performance.now();
      console.error(`  seeded ${sent} of ${eventCount} events (${Math.round(sent / ((lastReport - started) / 1000))}/s)`);
    }
  }
  const strip = ({ user_id, access_token }) => ({ user_id, access_token });
  console.log(
    JSON.stringify({
      bot: strip(bot),
      poster: strip(poster),
      rooms: roomIds,
      events: sent,
      seconds: Math.round((performance.now() - started) / 100) / 10,
    }),
  );
} finally {
  await storage.close();
}
