import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { startTestHomeserver, type TestHomeserver, createUser } from '../support/homeserver.js';
import { client, clientsFor, type Json, type TestClient } from '../support/client.js';
import { expectMatrixError } from '../support/spec-validator.js';
import { bridgeIdOf, command, createWebhook, promoteBridge, roomWithBridge, withBridge } from '../support/bridge.js';
import { TRUNCATION_MARKER } from '../../src/bridge/webhooks/message.js';
import { MAX_WEBHOOKS_PER_ROOM } from '../../src/bridge/webhooks/service.js';
import { capturingLogger } from '../support/logs.js';
import { persistentDatabase } from '../support/test-schemas.js';

let hs: TestHomeserver | undefined;
const dirs: string[] = [];
afterEach(async () => {
  await hs?.close();
  hs = undefined;
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

describe('the bridge user and webhooks', () => {
  it('joins on invite, asks for power, then makes a webhook whose URL arrives by DM and posts into the room', async () => {
    hs = await startTestHomeserver(withBridge());
    const [alice] = await clientsFor(hs, 'alice');
    const bridgeId = bridgeIdOf(hs);
    expect(bridgeId).toBe('@bridge:test.local');
    const roomId = await roomWithBridge(hs, alice, { promote: false });

    const greeting = await alice.waitForEvent(roomId, (event) => event.sender === bridgeId && event.type === 'm.room.message');
    expect(greeting.content.msgtype).toBe('m.notice');
    expect(greeting.content.body).toContain('power level 50');

    const refused = await command(hs, alice, roomId, '!bridge webhook ci');
    expect(refused.content.body).toContain('I need power level 50');
    expect(refused.content.body).toContain('I have 0');

    await promoteBridge(hs, alice, roomId);
    const { path } = await createWebhook(hs, alice, roomId, 'ci');
    // The bridge recorded the DM room in its m.direct.
    const direct = await hs.services.accountData.get(bridgeId, undefined, 'm.direct');
    expect(direct[alice.userId]).toHaveLength(1);

    const bridgeSerial = hs.services.notifier.serialOf(bridgeId);
    const posted = await hs.http.post(path).send({ text: 'Build 42 passed', username: 'CI' });
    expect(posted.status).toBe(200);
    expect(posted.body).toEqual({ ok: true, event_id: expect.stringMatching(/^\$/) });
    const event = await alice.waitForEvent(roomId, (e) => e.event_id === posted.body.event_id);
    // Its own post did not wake the bridge's sync (the members' syncs were woken by it).
    expect(hs.services.notifier.serialOf(bridgeId)).toBe(bridgeSerial);
    expect(event.sender).toBe(bridgeId);
    expect(event.content).toMatchObject({ msgtype: 'm.notice', body: 'CI: Build 42 passed', formatted_body: '<strong>CI</strong>: Build 42 passed' });

    // PUT works too, with html (sanitized) and m.text; curl's default form content type is read as JSON.
    const put = await hs.http.put(path).set('Content-Type', 'application/x-www-form-urlencoded').send(JSON.stringify({ text: 'hi', html: '<b>hi</b><script>x</script>', msgtype: 'm.text' }));
    expect(put.status).toBe(200);
    const second = await alice.waitForEvent(roomId, (e) => e.event_id === put.body.event_id);
    expect(second.content).toEqual({ msgtype: 'm.text', body: 'hi', 'm.mentions': {}, format: 'org.matrix.custom.html', formatted_body: '<b>hi</b>' });
    // A reply fallback goes whole, quote included: a webhook cannot pass as a reply to someone.
    const fakeReply = await hs.http.post(path).send({
      text: 'Approved',
      html: '<mx-reply><blockquote><a href="https://matrix.to/#/!r:x/$e">In reply to</a> <a href="https://matrix.to/#/@ceo:x">@ceo:x</a><br>Wire the money</blockquote></mx-reply>Approved',
    });
    const reply = await alice.waitForEvent(roomId, (e) => e.event_id === fakeReply.body.event_id);
    expect(reply.content.formatted_body).toBe('Approved');

    // The bridge's own messages are never commands, even when a webhook post looks like one.
    const sneaky = await hs.http.post(path).send({ text: '!bridge webhook evil', msgtype: 'm.text' });
    expect(sneaky.status).toBe(200);
    // Notices are never commands either (bots talk in notices).
    const notice = await alice.send(roomId, { msgtype: 'm.notice', body: '!bridge help' });

    // A second webhook reuses the DM room.
    await createWebhook(hs, alice, roomId, 'deploys');
    expect((await hs.services.accountData.get(bridgeId, undefined, 'm.direct'))[alice.userId]).toHaveLength(1);
    const list = await command(hs, alice, roomId, '!bridge webhook list');
    expect(list.content.body).toBe('Webhooks in this room: ci, deploys');
    expect(alice.seenIn(roomId).filter((event) => event.content?.['m.relates_to']?.['m.in_reply_to']?.event_id === notice)).toEqual([]);
    expect(list.content.body).not.toContain('/webhook/');
  });

  it('answers every ingress mistake with a clear JSON error', async () => {
    hs = await startTestHomeserver({
      ratelimiting_enabled: true,
      rc_login: { address: { per_second: 1000, burst_count: 1000 }, account: { per_second: 1000, burst_count: 1000 }, failed_attempts: { per_second: 1000, burst_count: 1000 } },
      ...withBridge({ webhooks: { max_body_bytes: 300_000, rate_limit: { per_second: 0.001, burst_count: 4 } } }),
    });
    const [alice] = await clientsFor(hs, 'alice');
    const roomId = await roomWithBridge(hs, alice);
    const { path } = await createWebhook(hs, alice, roomId, 'alerts');

    expectMatrixError(await hs.http.post(path).set('Content-Type', 'application/json').send('{"text": '), 400, 'M_NOT_JSON');
    expectMatrixError(await hs.http.post(path), 400, 'M_NOT_JSON');
    // Nothing to show, or our own {text} format written wrong: refused (unknown JSON is rendered generically).
    const noText = await hs.http.post(path).send({});
    expectMatrixError(noText, 400, 'M_BAD_JSON');
    expect(noText.body.error).toContain('"text"');
    expectMatrixError(await hs.http.post(path).send({ text: 5 }), 400, 'M_BAD_JSON');
    expectMatrixError(await hs.http.post(path).set('Content-Type', 'application/json').send('"hello"'), 400, 'M_BAD_JSON');
    // Nested deeper than any request body may be: refused before a renderer sees it.
    const deep = await hs.http.post(path).set('Content-Type', 'application/json').send(`{"text":"x","a":${'['.repeat(100_000)}${']'.repeat(100_000)}}`);
    expectMatrixError(deep, 400, 'M_BAD_JSON');
    expect(deep.body.error).toContain('nested too deeply');
    const badForm = await hs.http.post(path).set('Content-Type', 'application/x-www-form-urlencoded').send('payload=%7Bnot-json');
    expectMatrixError(badForm, 400, 'M_NOT_JSON');
    expect(badForm.body.error).toContain('"payload"');
    const getting = await hs.http.get(path);
    expectMatrixError(getting, 405, 'M_UNRECOGNIZED');
    expect(getting.headers.allow).toContain('POST');
    expectMatrixError(await hs.http.post('/webhook/not-a-real-webhook-id').send({ text: 'x' }), 404, 'M_NOT_FOUND');
    // Not in the room (the moment after a kick, before the bridge's own sync has noticed): 404.
    const bridge = hs.app.homeserver.bridge!;
    const isActiveIn = bridge.isActiveIn.bind(bridge);
    bridge.isActiveIn = async () => false;
    expectMatrixError(await hs.http.post(path).send({ text: 'x' }), 404, 'M_NOT_FOUND');
    bridge.isActiveIn = isActiveIn;
    expectMatrixError(await hs.http.post(path).send({ text: 'x'.repeat(400_000) }), 413, 'M_TOO_LARGE');

    // Text that would make the event too large is cut, not refused (the 4th allowed post).
    const long = await hs.http.post(path).send({ text: 'y'.repeat(200_000) });
    expect(long.status).toBe(200);
    const event = await alice.waitForEvent(roomId, (e) => e.event_id === long.body.event_id);
    expect(String(event.content.body).endsWith(TRUNCATION_MARKER)).toBe(true);

    // The burst is 4 posts (the bad ones above never reached the limiter... except those with a valid id).
    let limited: { status: number; headers: Record<string, string>; body: Json } | undefined;
    for (let i = 0; i < 6 && !limited; i += 1) {
      const res = await hs.http.post(path).send({ text: `burst ${i}` });
      if (res.status === 429) limited = res;
    }
    expect(limited).toBeDefined();
    expectMatrixError(limited!, 429, 'M_LIMIT_EXCEEDED');
    expect(Number(limited!.headers['retry-after'])).toBeGreaterThan(0);
  });

  it('lets only members with power manage webhooks, removes them at once, and ends them when the bridge is kicked', async () => {
    hs = await startTestHomeserver(withBridge());
    const [alice, bob] = await clientsFor(hs, 'alice', 'bob');
    const roomId = await roomWithBridge(hs, alice, { invite: [bob.userId] });
    await bob.join(roomId);

    const refused = await command(hs, bob, roomId, '!bridge webhook mine');
    expect(refused.content.body).toContain('takes power level 50, and you have 0');
    const usage = await command(hs, bob, roomId, '!bridge webhook');
    expect(usage.content.body).toContain('Usage: !bridge webhook <name>');
    const help = await command(hs, bob, roomId, '!bridge help');
    expect(help.content.body).toContain('!bridge feed <url> [label]');
    expect((await command(hs, bob, roomId, '!bridge webhook list')).content.body).toBe('This room has no webhooks.');

    // Exactly the room's state_default is enough.
    await alice.ok('PUT', `/rooms/${encodeURIComponent(roomId)}/state/m.room.power_levels/`, {
      ...(await alice.ok('GET', `/rooms/${encodeURIComponent(roomId)}/state/m.room.power_levels/`)),
      users: { [alice.userId]: 100, [bridgeIdOf(hs)]: 50, [bob.userId]: 50 },
    });
    await createWebhook(hs, bob, roomId, 'bobs');
    expect((await command(hs, bob, roomId, '!bridge webhook remove bobs')).content.body).toContain('no longer works');

    const first = await createWebhook(hs, alice, roomId, 'ci');
    const duplicate = await command(hs, alice, roomId, '!bridge webhook ci');
    expect(duplicate.content.body).toContain('already has a webhook named "ci"');
    await alice.ok('PUT', `/rooms/${encodeURIComponent(roomId)}/state/m.room.power_levels/`, {
      ...(await alice.ok('GET', `/rooms/${encodeURIComponent(roomId)}/state/m.room.power_levels/`)),
      users: { [alice.userId]: 100, [bridgeIdOf(hs)]: 50, [bob.userId]: 49 },
    });
    expect((await command(hs, bob, roomId, '!bridge webhook remove ci')).content.body).toContain('you have 49');
    expect((await hs.http.post(first.path).send({ text: 'still here' })).status).toBe(200);

    const removed = await command(hs, alice, roomId, '!bridge webhook remove ci');
    expect(removed.content.body).toContain('no longer works');
    expectMatrixError(await hs.http.post(first.path).send({ text: 'gone' }), 404, 'M_NOT_FOUND');
    expect((await command(hs, alice, roomId, '!bridge webhook remove ci')).content.body).toContain('no webhook named "ci"');

    // Kicking the bridge ends the room's webhooks at once, and a new invite does not bring them back.
    const second = await createWebhook(hs, alice, roomId, 'deploys');
    // Used once first, so that the server knows the webhook when the kick comes.
    expect((await hs.http.post(second.path).send({ text: 'before kick' })).status).toBe(200);
    await alice.ok('POST', `/rooms/${encodeURIComponent(roomId)}/kick`, { user_id: bridgeIdOf(hs) });
    expectMatrixError(await hs.http.post(second.path).send({ text: 'after kick' }), 404, 'M_NOT_FOUND');
    const bridgeId = bridgeIdOf(hs);
    const isBridgeJoin = (event: Json) => event.type === 'm.room.member' && event.state_key === bridgeId && event.content.membership === 'join';
    const firstJoin = alice.seenIn(roomId).find(isBridgeJoin)!.event_id;
    await alice.invite(roomId, bridgeId);
    await alice.waitForEvent(roomId, (event) => isBridgeJoin(event) && event.event_id !== firstJoin);
    expectMatrixError(await hs.http.post(second.path).send({ text: 'after re-invite' }), 404, 'M_NOT_FOUND');
    expect((await command(hs, alice, roomId, '!bridge webhook list')).content.body).toBe('This room has no webhooks.');
  });

  it('keeps webhooks across a restart, never re-runs old commands, and never logs webhook ids', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'bhs-bridge-'));
    dirs.push(dir);
    const { logger, lines } = capturingLogger();
    const config = withBridge({}, { ...persistentDatabase(join(dir, 'hs.db')) });
    hs = await startTestHomeserver(config, { logger });
    const aliceUser = await createUser(hs, 'alice');
    let alice = client(hs, aliceUser);
    const roomId = await roomWithBridge(hs, alice);
    const { path } = await createWebhook(hs, alice, roomId, 'ci');
    const id = path.split('/').pop()!;
    expect((await hs.http.post(path).send({ text: 'before restart' })).status).toBe(200);
    const bridgeId = bridgeIdOf(hs);
    const saidBefore = (await alice.ok('GET', `/rooms/${encodeURIComponent(roomId)}/messages`, undefined, { dir: 'b', limit: 100 })).chunk.filter((event: Json) => event.sender === bridgeId).length;
    await hs.close();

    hs = await startTestHomeserver(config, { logger });
    alice = client(hs, aliceUser);
    const posted = await hs.http.post(path).send({ text: 'after restart' });
    expect(posted.status).toBe(200);
    // A command after the restart is answered; had old ones been run again, their answers would come first.
    await command(hs, alice, roomId, '!bridge webhook list');
    const history = await alice.ok('GET', `/rooms/${encodeURIComponent(roomId)}/messages`, undefined, { dir: 'b', limit: 100 });
    const said = (history.chunk as Json[]).filter((event) => event.sender === bridgeId).map((event) => String(event.content.body));
    expect(said.filter((body) => body.startsWith('Created the webhook'))).toHaveLength(1);
    expect(said.filter((body) => body.startsWith('Hello!'))).toHaveLength(1);
    expect(said.filter((body) => body.startsWith('Webhooks in this room'))).toHaveLength(1);
    expect(said).toContain('after restart');
    // Since the restart the bridge said exactly two things: the post and the answer to the new command.
    expect(said.length).toBe(saidBefore + 2);
    // Other spellings of the path reach the log redacted too.
    await hs.http.post(`/%77ebhook/${id}`).send({ text: 'encoded path' });
    await hs.http.post(`//webhook/${id}`).send({ text: 'double slash' });
    const log = lines.join('');
    expect(log).toContain('/webhook/<redacted>');
    expect(log).not.toContain(id);
    // The audit trail: who made which webhook in which room (by name, never by id).
    const created = lines.map((line) => JSON.parse(line) as Json).find((line) => line.msg === 'webhook created');
    expect(created).toMatchObject({ level: 30, room: roomId, user: aliceUser.userId, webhook: 'ci' });
    await command(hs, alice, roomId, '!bridge webhook remove ci');
    expect(lines.map((line) => JSON.parse(line) as Json).find((line) => line.msg === 'webhook removed')).toMatchObject({ room: roomId, user: aliceUser.userId, webhook: 'ci' });
  });

  it('runs a command it had seen but not finished when it stopped, once, and no answered one again', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'bhs-bridge-'));
    dirs.push(dir);
    const config = withBridge({}, { ...persistentDatabase(join(dir, 'hs.db')) });
    hs = await startTestHomeserver(config);
    const aliceUser = await createUser(hs, 'alice');
    let alice = client(hs, aliceUser);
    const roomId = await roomWithBridge(hs, alice);
    const answered = await command(hs, alice, roomId, '!bridge help');
    const answeredCommand = answered.content['m.relates_to']['m.in_reply_to'].event_id as string;
    await hs.close();

    // What a crash leaves: commands sent, the bridge's position past them and the commands
    // recorded, nothing done (one of them was answered before the crash, its record not deleted).
    hs = await startTestHomeserver(withBridge({ enabled: false }, { ...persistentDatabase(join(dir, 'hs.db')) }));
    alice = client(hs, aliceUser);
    const pending = await alice.send(roomId, { msgtype: 'm.text', body: '!bridge webhook list' });
    const gone = await alice.send(roomId, { msgtype: 'm.text', body: '!bridge feed list' });
    await alice.ok('PUT', `/rooms/${encodeURIComponent(roomId)}/redact/${encodeURIComponent(gone)}/r1`, {});
    const { storage, stream } = hs.services;
    await storage.bridge.setValue('sync_token', `s${stream.current}_0`);
    await storage.bridge.insertCommands([answeredCommand, pending, gone].map((event_id, i) => ({ event_id, room_id: roomId, received_ts: i })));
    await hs.close();

    hs = await startTestHomeserver(config);
    alice = client(hs, aliceUser);
    const replyTo = (eventId: string) => alice.waitForEvent(roomId, (event) => event.content?.['m.relates_to']?.['m.in_reply_to']?.event_id === eventId);
    expect((await replyTo(pending)).content.body).toBe('This room has no webhooks.');
    expect((await replyTo(gone)).content.body).toBe('I was restarted before I could finish that command; please say it again.');
    // A command after them is answered after them; the one answered before is not answered again.
    await command(hs, alice, roomId, '!bridge webhook list');
    const replies = alice.seenIn(roomId).filter((event) => event.sender === bridgeIdOf(hs!));
    expect(replies.filter((event) => event.content?.['m.relates_to']?.['m.in_reply_to']?.event_id === answeredCommand)).toHaveLength(1);
    expect(replies.filter((event) => event.content?.['m.relates_to']?.['m.in_reply_to']?.event_id === pending)).toHaveLength(1);
    // The record of a command goes once its answer is posted: just after the reply commits.
    await expect.poll(() => hs!.services.storage.bridge.pendingCommands(), { timeout: 5_000 }).toEqual([]);
  });

  it('answers a command that came just before a change of its own profile (a join after a join is no join)', async () => {
    hs = await startTestHomeserver(withBridge());
    const [alice] = await clientsFor(hs, 'alice');
    const roomId = await roomWithBridge(hs, alice);
    const bridge = hs.app.homeserver.bridge!;
    // Stopped, so that the command and the new display name's member event come in one batch.
    await bridge.stop();
    const eventId = await alice.send(roomId, { msgtype: 'm.text', body: '!bridge webhook list' });
    await hs.services.profiles.setDisplayname(bridgeIdOf(hs), 'Renamed bridge');
    await bridge.start();
    const reply = await alice.waitForEvent(roomId, (event) => event.sender === bridgeIdOf(hs!) && event.content?.['m.relates_to']?.['m.in_reply_to']?.event_id === eventId);
    expect(reply.content.body).toBe('This room has no webhooks.');
  });

  it('caps the webhooks of one room', async () => {
    hs = await startTestHomeserver(withBridge());
    const [alice] = await clientsFor(hs, 'alice');
    const roomId = await roomWithBridge(hs, alice);
    const webhooks = hs.app.homeserver.bridge!.webhooks;
    for (let i = 0; i < MAX_WEBHOOKS_PER_ROOM; i++) expect(await webhooks.create(roomId, `hook${i}`, alice.userId)).toHaveProperty('id');
    const refused = await command(hs, alice, roomId, '!bridge webhook one-more');
    expect(refused.content.body).toContain(`has ${MAX_WEBHOOKS_PER_ROOM} webhooks, the most it may`);
  });

  it('records DM rooms made at the same time for different users in m.direct', async () => {
    hs = await startTestHomeserver(withBridge());
    const [alice, bob] = await clientsFor(hs, 'alice', 'bob');
    const first = await roomWithBridge(hs, alice);
    const second = await roomWithBridge(hs, bob);
    // Two commands in two rooms run at the same time.
    const [a, b] = await Promise.all([command(hs, alice, first, '!bridge webhook a'), command(hs, bob, second, '!bridge webhook b')]);
    expect(a.content.body).toContain('Created the webhook "a"');
    expect(b.content.body).toContain('Created the webhook "b"');
    const direct = await hs.services.accountData.get(bridgeIdOf(hs), undefined, 'm.direct');
    expect(Object.keys(direct).sort()).toEqual([alice.userId, bob.userId]);
  });
});
