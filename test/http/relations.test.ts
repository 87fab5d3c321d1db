/** Relations and threads (/_matrix/client/v1): edits, reactions and thread replies a bot sends and reads. */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { client, type TestClient } from '../support/client.js';
import { createUser, startTestHomeserver, type TestHomeserver } from '../support/homeserver.js';
import { expectMatchesSpec, expectMatrixError } from '../support/spec-validator.js';
import { persistentDatabase } from '../support/test-schemas.js';

let hs: TestHomeserver;
let alice: TestClient;
let bot: TestClient;
let room: string;
const bearer = { type: 'bearer' } as const;
beforeEach(async () => {
  hs = await startTestHomeserver();
  alice = client(hs, await createUser(hs, 'alice'));
  bot = client(hs, await createUser(hs, 'bot'));
  room = await alice.createRoom({ preset: 'public_chat' });
  await bot.join(room);
});
afterEach(() => hs.close());

const v1 = (path: string, who: TestClient) => hs.http.get(`/_matrix/client/v1${path}`).auth(who.user.accessToken, bearer);
const rel = (relType: string, eventId: string, extra: object = {}) => ({ 'm.relates_to': { rel_type: relType, event_id: eventId, ...extra } });

describe('relations', () => {
  it('lists edits, reactions and replies of an event, by type, page by page', async () => {
    const root = await bot.send(room, { msgtype: 'm.text', body: 'Deploying…' });
    const edit = await bot.send(room, { msgtype: 'm.text', body: '* Deployed', 'm.new_content': { msgtype: 'm.text', body: 'Deployed' }, ...rel('m.replace', root) });
    const reactions: string[] = [];
    for (const key of ['👍', '🎉', '🚀']) reactions.push(await alice.send(room, { ...rel('m.annotation', root, { key }) }, 'm.reaction'));
    await alice.send(room, { msgtype: 'm.text', body: 'unrelated' });

    const path = `/rooms/${encodeURIComponent(room)}/relations/${encodeURIComponent(root)}`;
    const all = await v1(path, alice);
    expectMatchesSpec('GET', `/_matrix/client/v1${path}`, all);
    expect(all.body.chunk.map((e: { event_id: string }) => e.event_id)).toEqual([...reactions].reverse().concat(edit).slice(0, 4));

    const edits = await v1(`${path}/m.replace`, alice);
    expect(edits.body.chunk.map((e: { event_id: string }) => e.event_id)).toEqual([edit]);
    const reactionsOnly = await v1(`${path}/m.annotation/m.reaction?limit=2`, alice);
    expectMatchesSpec('GET', `/_matrix/client/v1${path}/m.annotation/m.reaction`, reactionsOnly);
    expect(reactionsOnly.body.chunk.map((e: { event_id: string }) => e.event_id)).toEqual([reactions[2], reactions[1]]);
    const next = await v1(`${path}/m.annotation/m.reaction?limit=2&from=${reactionsOnly.body.next_batch}`, alice);
    expect(next.body.chunk.map((e: { event_id: string }) => e.event_id)).toEqual([reactions[0]]);
    expect(next.body.next_batch).toBeUndefined();
    const forwards = await v1(`${path}/m.annotation?dir=f`, alice);
    expect(forwards.body.chunk.map((e: { event_id: string }) => e.event_id)).toEqual(reactions);

    // A redacted reaction relates to nothing any more.
    await alice.ok('PUT', `/rooms/${encodeURIComponent(room)}/redact/${encodeURIComponent(reactions[1]!)}/r1`, {});
    expect((await v1(`${path}/m.annotation`, alice)).body.chunk.map((e: { event_id: string }) => e.event_id)).toEqual([reactions[2], reactions[0]]);
  });

  it('answers 404 for an event one cannot see, and 403 outside the room', async () => {
    const root = await bot.send(room, { msgtype: 'm.text', body: 'x' });
    const outsider = client(hs, await createUser(hs, 'outsider'));
    expectMatrixError(await v1(`/rooms/${encodeURIComponent(room)}/relations/${encodeURIComponent('$nope')}`, alice), 404, 'M_NOT_FOUND');
    const refused = await v1(`/rooms/${encodeURIComponent(room)}/relations/${encodeURIComponent(root)}`, outsider);
    expect(refused.status).toBe(403);
  });
});

describe('threads', () => {
  it('lists thread roots by latest activity with their summary, all or participated', async () => {
    const first = await alice.send(room, { msgtype: 'm.text', body: 'first topic' });
    const second = await bot.send(room, { msgtype: 'm.text', body: 'second topic' });
    await bot.send(room, { msgtype: 'm.text', body: 'reply 1', ...rel('m.thread', first) });
    const latestOfFirst = await bot.send(room, { msgtype: 'm.text', body: 'reply 2', ...rel('m.thread', first) });
    await bot.send(room, { msgtype: 'm.text', body: 'on second', ...rel('m.thread', second) });

    const path = `/rooms/${encodeURIComponent(room)}/threads`;
    const all = await v1(path, alice);
    expectMatchesSpec('GET', `/_matrix/client/v1${path}`, all);
    expect(all.body.chunk.map((e: { event_id: string }) => e.event_id)).toEqual([second, first]);
    const firstSummary = all.body.chunk[1].unsigned['m.relations']['m.thread'];
    expect(firstSummary).toMatchObject({ count: 2, current_user_participated: true, latest_event: { event_id: latestOfFirst } });
    expect(all.body.chunk[0].unsigned['m.relations']['m.thread'].current_user_participated).toBe(false);

    const mine = await v1(`${path}?include=participated`, alice);
    expect(mine.body.chunk.map((e: { event_id: string }) => e.event_id)).toEqual([first]);

    const page = await v1(`${path}?limit=1`, alice);
    expect(page.body.chunk.map((e: { event_id: string }) => e.event_id)).toEqual([second]);
    const rest = await v1(`${path}?limit=1&from=${page.body.next_batch}`, alice);
    expect(rest.body.chunk.map((e: { event_id: string }) => e.event_id)).toEqual([first]);
  });
});

describe('bundled aggregations', () => {
  const relationsOf = (event: { unsigned?: Record<string, unknown> }) => event.unsigned?.['m.relations'] as Record<string, any> | undefined;

  it('sum up edits, threads and references wherever events are served', async () => {
    const root = await bot.send(room, { msgtype: 'm.text', body: 'Deploying…' });
    const firstEdit = await bot.send(room, { msgtype: 'm.text', body: '* Deploying 50%', 'm.new_content': { msgtype: 'm.text', body: 'Deploying 50%' }, ...rel('m.replace', root) });
    // The newest edit is the one with the later timestamp (the event id only breaks ties).
    hs.clock.advance(1000);
    const lastEdit = await bot.send(room, { msgtype: 'm.text', body: '* Deployed', 'm.new_content': { msgtype: 'm.text', body: 'Deployed' }, ...rel('m.replace', root) });
    // Someone else's "edit" is no edit: it must not replace the bot's message.
    await alice.send(room, { msgtype: 'm.text', body: '* hacked', 'm.new_content': { msgtype: 'm.text', body: 'hacked' }, ...rel('m.replace', root) });
    await alice.send(room, { msgtype: 'm.text', body: 'in thread 1', ...rel('m.thread', root) });
    const reply = await bot.send(room, { msgtype: 'm.text', body: 'in thread 2', ...rel('m.thread', root) });
    const reference = await alice.send(room, { body: 'see above', ...rel('m.reference', root) }, 'org.example.note');
    const plain = await alice.send(room, { msgtype: 'm.text', body: 'nothing relates to me' });

    const expectBundle = (event: { event_id: string; unsigned?: Record<string, unknown> }, viewerSentReply: boolean) => {
      const bundle = relationsOf(event)!;
      expect(bundle['m.replace']).toMatchObject({ event_id: lastEdit, sender: bot.userId, content: { 'm.new_content': { body: 'Deployed' } } });
      expect(bundle['m.thread']).toMatchObject({ count: 2, current_user_participated: viewerSentReply, latest_event: { event_id: reply } });
      expect(bundle['m.reference']).toEqual({ chunk: [{ event_id: reference }] });
    };
    const enc = encodeURIComponent;

    const single = await alice.ok('GET', `/rooms/${enc(room)}/event/${enc(root)}`);
    expectBundle(single as never, true);
    const viaBot = await bot.ok('GET', `/rooms/${enc(room)}/event/${enc(root)}`);
    expectBundle(viaBot as never, true);

    const messages = await hs.http.get(`/_matrix/client/v3/rooms/${enc(room)}/messages?dir=b&limit=20`).auth(alice.user.accessToken, bearer);
    expectMatchesSpec('GET', `/_matrix/client/v3/rooms/${enc(room)}/messages`, messages);
    const fromMessages = messages.body.chunk.find((e: { event_id: string }) => e.event_id === root);
    expectBundle(fromMessages, true);
    expect(relationsOf(messages.body.chunk.find((e: { event_id: string }) => e.event_id === plain))).toBeUndefined();
    // An edit is not edited in turn, and state events carry no bundles.
    expect(relationsOf(messages.body.chunk.find((e: { event_id: string }) => e.event_id === firstEdit))).toBeUndefined();

    const context = await alice.ok('GET', `/rooms/${enc(room)}/context/${enc(reply)}`, undefined, { limit: 10 });
    expectBundle(context.events_before.find((e: { event_id: string }) => e.event_id === root), true);

    // A limited sync timeline carries them; so does /search.
    const limited = await alice.sync({ filter: JSON.stringify({ room: { timeline: { limit: 8 } } }) });
    const timeline = limited.rooms.join[room].timeline;
    expect(timeline.limited).toBe(true);
    expectBundle(timeline.events.find((e: { event_id: string }) => e.event_id === root), true);
    const found = await alice.ok('POST', '/search', { search_categories: { room_events: { search_term: 'Deploying' } } });
    const hit = found.search_categories.room_events.results.find((r: { result: { event_id: string } }) => r.result.event_id === root);
    expectBundle(hit.result, true);
  });

  it('give a redacted event no edit back, and leave out what the reader may not see', async () => {
    const enc = encodeURIComponent;
    const root = await bot.send(room, { msgtype: 'm.text', body: 'secret v1' });
    await bot.send(room, { msgtype: 'm.text', body: '* secret v2', 'm.new_content': { msgtype: 'm.text', body: 'secret v2' }, ...rel('m.replace', root) });
    await bot.ok('PUT', `/rooms/${enc(room)}/redact/${enc(root)}/r1`, {});
    const redacted = await alice.ok('GET', `/rooms/${enc(room)}/event/${enc(root)}`);
    expect(redacted.unsigned.redacted_because).toBeDefined();
    expect(relationsOf(redacted as never)?.['m.replace']).toBeUndefined();

    // History visibility "joined": carol saw the topic while she was in the room, but not the
    // reply sent after she left; her bundle must not show it.
    await alice.ok('PUT', `/rooms/${enc(room)}/state/m.room.history_visibility`, { history_visibility: 'joined' });
    const carol = client(hs, await createUser(hs, 'carol'));
    await carol.join(room);
    const topic = await alice.send(room, { msgtype: 'm.text', body: 'topic' });
    const early = await alice.send(room, { msgtype: 'm.text', body: 'early reply', ...rel('m.thread', topic) });
    await carol.ok('POST', `/rooms/${enc(room)}/leave`, {});
    const late = await bot.send(room, { msgtype: 'm.text', body: 'late reply', ...rel('m.thread', topic) });
    expect(relationsOf((await alice.ok('GET', `/rooms/${enc(room)}/event/${enc(topic)}`)) as never)?.['m.thread']).toMatchObject({ count: 2, latest_event: { event_id: late } });
    const carolsView = await carol.ok('GET', `/rooms/${enc(room)}/event/${enc(topic)}`);
    expect(relationsOf(carolsView as never)?.['m.thread']).toBeUndefined();
    expect((await carol.ok('GET', `/rooms/${enc(room)}/event/${enc(early)}`)).event_id).toBe(early);
  });
});

describe('the relations index', () => {
  it('is filled from the events already stored when the migration runs', async () => {
    const { mkdtempSync, rmSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const { SqliteDriver } = await import('../../src/storage/database.js');
    const dir = mkdtempSync(join(tmpdir(), 'bhs-relations-'));
    try {
      const overrides = { ...persistentDatabase(join(dir, 'hs.db')) };
      const disk = await startTestHomeserver(overrides);
      const writer = client(disk, await createUser(disk, 'writer'));
      const diskRoom = await writer.createRoom({});
      const root = await writer.send(diskRoom, { msgtype: 'm.text', body: 'root' });
      const edit = await writer.send(diskRoom, { msgtype: 'm.text', body: '* edited', 'm.new_content': { msgtype: 'm.text', body: 'edited' }, ...rel('m.replace', root) });
      await writer.send(diskRoom, { msgtype: 'm.text', body: 'a reply, not a relation', 'm.relates_to': { 'm.in_reply_to': { event_id: root } } });
      await disk.close();
      // Back to the database as it was before migration 0015 (every later one undone too).
      const { Kysely, Migrator, SqliteDialect } = await import('kysely');
      const { migrations } = await import('../../migrations/index.js');
      const db = new Kysely<unknown>({ dialect: new SqliteDialect({ database: new SqliteDriver(join(dir, 'hs.db')) }) });
      const { error } = await new Migrator({ db, provider: { getMigrations: async () => migrations } }).migrateTo('0014-device-inbox');
      await db.destroy();
      expect(error).toBeUndefined();
      const again = await startTestHomeserver(overrides);
      try {
        const token = (await again.http.post('/_matrix/client/v3/login').send({ type: 'm.login.password', user: 'writer', password: writer.user.password })).body.access_token as string;
        const listed = await again.http.get(`/_matrix/client/v1/rooms/${encodeURIComponent(diskRoom)}/relations/${encodeURIComponent(root)}`).auth(token, bearer);
        expect(listed.body.chunk.map((e: { event_id: string }) => e.event_id)).toEqual([edit]);
      } finally {
        await again.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
