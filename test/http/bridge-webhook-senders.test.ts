import { createHmac } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createUser, startTestHomeserver, type TestHomeserver } from '../support/homeserver.js';
import { client, clientsFor, type Json, type TestClient } from '../support/client.js';
import { expectMatrixError } from '../support/spec-validator.js';
import { bridgeIdOf, command, createWebhook, roomWithBridge, withBridge } from '../support/bridge.js';
import { readFixture, WEBHOOK_FIXTURES, WEBHOOK_FIXTURES_DIR } from '../support/webhook-fixtures.js';
import { capturingLogger } from '../support/logs.js';
import { persistentDatabase } from '../support/test-schemas.js';

const sign = (secret: string, body: string) => `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;

describe('webhooks from real senders, through HTTP', () => {
  let hs: TestHomeserver;
  let alice: TestClient;
  let roomId: string;
  let path: string;

  beforeAll(async () => {
    hs = await startTestHomeserver(withBridge());
    [alice] = await clientsFor(hs, 'alice');
    roomId = await roomWithBridge(hs, alice);
    ({ path } = await createWebhook(hs, alice, roomId, 'everything'));
  });
  afterAll(async () => hs.close());

  it('has an entry for every file of the shared corpus', () => {
    const files = readdirSync(WEBHOOK_FIXTURES_DIR).filter((file) => file.endsWith('.json')).sort();
    expect(WEBHOOK_FIXTURES.map((fixture) => fixture.file).sort()).toEqual(files);
  });

  it.each(WEBHOOK_FIXTURES)('$file is posted as a message that says what happened', async (fixture) => {
    const posted = await hs.http.post(path).set({ 'content-type': 'application/json', ...fixture.headers }).send(readFixture(fixture.file));
    expect(posted.status).toBe(200);
    const event = await alice.waitForEvent(roomId, (e) => e.event_id === posted.body.event_id);
    expect(event.sender).toBe(bridgeIdOf(hs));
    expect(event.content.msgtype).toBe('m.notice');
    expect(event.content.format).toBe('org.matrix.custom.html');
    const body = String(event.content.body);
    const html = String(event.content.formatted_body);
    for (const fact of fixture.says) expect(body).toContain(fact);
    for (const wrong of fixture.never ?? []) expect(body).not.toContain(wrong);
    for (const fragment of fixture.html ?? []) expect(html).toContain(fragment.replace(/&(?!amp;)/g, '&amp;'));
    // A summary first, short enough to read; never raw JSON or "undefined".
    expect(body.split('\n')[0]!.length).toBeLessThan(400);
    expect(body).not.toMatch(/undefined|\[object Object\]/);
    expect(html).not.toMatch(/<script|undefined|\[object Object\]/);
  });

  it('escapes what senders write: a Sentry title with <module> arrives as text, never as a tag', async () => {
    const fixture = WEBHOOK_FIXTURES.find((entry) => entry.file === 'sentry-issue-created.json')!;
    const posted = await hs.http.post(path).set({ 'content-type': 'application/json', ...fixture.headers }).send(readFixture(fixture.file));
    const event = await alice.waitForEvent(roomId, (e) => e.event_id === posted.body.event_id);
    expect(event.content.formatted_body).not.toContain('<module>');
    expect(event.content.formatted_body).toMatch(/&lt;module&gt;|&#60;module&#62;/);
  });

  it("accepts GitHub's form-encoded delivery (payload=) and old Slack-style form posts", async () => {
    const json = readFixture('github-issues-opened.json');
    const posted = await hs.http.post(path).set({ 'content-type': 'application/x-www-form-urlencoded', 'x-github-event': 'issues' }).send(`payload=${encodeURIComponent(json)}`);
    expect(posted.status).toBe(200);
    const event = await alice.waitForEvent(roomId, (e) => e.event_id === posted.body.event_id);
    expect(event.content.body).toContain('Codertocat opened issue #1');
    const slack = await hs.http.post(path).type('form').send({ payload: JSON.stringify({ text: 'Deployed *v2* :rocket:', username: 'deploybot', icon_emoji: ':ghost:' }) });
    expect(slack.status).toBe(200);
    const slackEvent = await alice.waitForEvent(roomId, (e) => e.event_id === slack.body.event_id);
    expect(slackEvent.content.body).toContain('🚀');
    expect(slackEvent.content.formatted_body).toContain('<strong>v2</strong>');
  });

  it('keeps a long {text} exactly as sent, links and all, and reads a form whose payload is not the first field', async () => {
    const text = `see <https://ci.example/1|the log>\n${'line\n'.repeat(70_000)}`;
    const long = await hs.http.post(path).send({ text });
    expect(long.status).toBe(200);
    const event = await alice.waitForEvent(roomId, (e) => e.event_id === long.body.event_id);
    expect(String(event.content.body).startsWith('see <https://ci.example/1|the log>\nline\n')).toBe(true);
    // The whole text budget (with HTML it would get two fifths of it).
    expect(String(event.content.body).length).toBeGreaterThan(40_000);
    expect(event.content.formatted_body).toBeUndefined();
    const form = await hs.http.post(path).type('form').send(`token=abc&payload=${encodeURIComponent(JSON.stringify({ text: 'second field' }))}`);
    expect(form.status).toBe(200);
    const formEvent = await alice.waitForEvent(roomId, (e) => e.event_id === form.body.event_id);
    expect(formEvent.content.body).toBe('second field');
  });

  it('never prints object internals for prototype names in a payload', async () => {
    const grafana = await hs.http.post(path).send({ ruleName: 'x', ruleUrl: 'https://grafana.example/r', state: 'constructor' });
    const sentry = await hs.http.post(path).set({ 'sentry-hook-resource': 'comment' }).send({ action: 'toString', data: {} });
    for (const posted of [grafana, sentry]) {
      expect(posted.status).toBe(200);
      const event = await alice.waitForEvent(roomId, (e) => e.event_id === posted.body.event_id);
      expect(event.content.body).not.toContain('native code');
    }
  });

  it('posts unknown event types of known senders and unknown JSON, never an error', async () => {
    const deployment = await hs.http.post(path).set({ 'x-github-event': 'deployment_status' }).send({ action: 'created', repository: { full_name: 'octo/app', html_url: 'https://github.com/octo/app' }, sender: { login: 'octocat' } });
    expect(deployment.status).toBe(200);
    const event = await alice.waitForEvent(roomId, (e) => e.event_id === deployment.body.event_id);
    expect(event.content.body).toContain('octo/app');
    const odd = await hs.http.post(path).set({ 'x-gitlab-event': 'Push Hook' }).send({ object_kind: 'push', commits: 'not a list', total_commits_count: null });
    expect(odd.status).toBe(200);
    const array = await hs.http.post(path).send([1, 2, 3]);
    expect(array.status).toBe(200);
    const arrayEvent = await alice.waitForEvent(roomId, (e) => e.event_id === array.body.event_id);
    expect(arrayEvent.content.body).toContain('array');
  });
});

describe('webhooks the bridge does not post', () => {
  it('answers 200 with the reason for unfinished runs and duplicate release actions, and posts nothing', async () => {
    const hs = await startTestHomeserver(withBridge());
    try {
      const [alice] = await clientsFor(hs, 'alice');
      const roomId = await roomWithBridge(hs, alice);
      const { path } = await createWebhook(hs, alice, roomId, 'ci');
      const run = JSON.parse(readFixture('github-workflow_run-completed.json'));
      const inProgress = { ...run, action: 'in_progress', workflow_run: { ...run.workflow_run, status: 'in_progress', conclusion: null } };
      const skipped = await hs.http.post(path).set({ 'x-github-event': 'workflow_run' }).send(inProgress);
      expect(skipped.status).toBe(200);
      expect(skipped.body).toEqual({ ok: true, skipped: expect.stringContaining('in progress') });
      const released = await hs.http.post(path).set({ 'x-github-event': 'release' }).send({ ...JSON.parse(readFixture('github-release-published.json')), action: 'released' });
      expect(released.body.skipped).toContain('published');
      // "@room" in a payload never notifies the room: the bridge's posts carry an empty m.mentions.
      const loud = await hs.http.post(path).send({ text: '@room the build is broken' });
      const event = await alice.waitForEvent(roomId, (e) => e.event_id === loud.body.event_id);
      expect(event.content['m.mentions']).toEqual({});
      const said = alice.seenIn(roomId).filter((e) => e.sender === bridgeIdOf(hs) && e.type === 'm.room.message').map((e) => String(e.content.body));
      expect(said.some((body) => body.includes('Workflow') || body.includes('release'))).toBe(false);
    } finally {
      await hs.close();
    }
  });
});

describe('webhook secrets', () => {
  let hs: TestHomeserver | undefined;
  const dirs: string[] = [];
  afterEach(async () => {
    await hs?.close();
    hs = undefined;
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });

  it('issues a new URL with a secret, then refuses unsigned and wrongly signed requests, across a restart', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'bhs-secrets-'));
    dirs.push(dir);
    const { logger, lines } = capturingLogger();
    const config = withBridge({}, { ...persistentDatabase(join(dir, 'hs.db')) });
    hs = await startTestHomeserver(config, { logger });
    const aliceUser = await createUser(hs, 'alice');
    let alice = client(hs, aliceUser);
    const roomId = await roomWithBridge(hs, alice);
    const plain = await createWebhook(hs, alice, roomId, 'gh');
    expect(plain.secret).toBeUndefined();
    expect((await hs.http.post(plain.path).send({ text: 'unsigned is fine for now' })).status).toBe(200);

    const signed = await createWebhook(hs, alice, roomId, 'gh', { commandText: '!bridge webhook gh secret', previousUrl: plain.url, expectReply: 'now requires signed requests' });
    expect(signed.secret).toMatch(/^[A-Za-z0-9_-]{43}$/);
    const secret = signed.secret!;
    // The old URL stopped working: the secret is sealed with the new id.
    expectMatrixError(await hs.http.post(plain.path).send({ text: 'old url' }), 404, 'M_NOT_FOUND');

    const body = readFixture('github-push.json');
    const headers = { 'content-type': 'application/json', 'x-github-event': 'push' };
    const unsigned = await hs.http.post(signed.path).set(headers).send(body);
    expectMatrixError(unsigned, 401, 'M_UNAUTHORIZED');
    expect(unsigned.body.error).toContain('X-Hub-Signature-256');
    expectMatrixError(await hs.http.post(signed.path).set({ ...headers, 'x-hub-signature-256': sign('not the secret', body) }).send(body), 403, 'M_FORBIDDEN');
    expectMatrixError(await hs.http.post(signed.path).set({ ...headers, 'x-hub-signature-256': sign(secret, body) }).send(`${body} `), 403, 'M_FORBIDDEN');
    const ok = await hs.http.post(signed.path).set({ ...headers, 'x-hub-signature-256': sign(secret, body) }).send(body);
    expect(ok.status).toBe(200);
    // GitLab's token and a plain Bearer header work too.
    expect((await hs.http.post(signed.path).set({ 'x-gitlab-token': secret }).send({ text: 'gitlab style' })).status).toBe(200);
    expect((await hs.http.post(signed.path).set({ authorization: `Bearer ${secret}` }).send({ text: 'bearer' })).status).toBe(200);
    const listed = await command(hs, alice, roomId, '!bridge webhook list');
    expect(listed.content.body).toContain('gh (signed)');
    await hs.close();

    hs = await startTestHomeserver(config, { logger });
    alice = client(hs, aliceUser);
    expectMatrixError(await hs.http.post(signed.path).set(headers).send(body), 401, 'M_UNAUTHORIZED');
    expect((await hs.http.post(signed.path).set({ ...headers, 'x-hub-signature-256': sign(secret, body) }).send(body)).status).toBe(200);

    // "secret off" keeps the URL and drops the check.
    const off = await command(hs, alice, roomId, '!bridge webhook gh secret off');
    expect(off.content.body).toContain('no longer checks signatures');
    expect((await hs.http.post(signed.path).send({ text: 'unsigned again' })).status).toBe(200);

    // Neither the secret nor the ids were ever logged; the database holds neither in the clear.
    const log = lines.join('');
    expect(log).not.toContain(secret);
    expect(log).not.toContain(signed.path.split('/').pop()!);
  });

  it('takes a secret the sender made (Sentry), removes the message that held it, and creates the webhook if needed', async () => {
    hs = await startTestHomeserver(withBridge());
    const [alice] = await clientsFor(hs, 'alice');
    const roomId = await roomWithBridge(hs, alice);
    const sentrySecret = 'a3f1c0ffee5e11e7b2d94c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f';
    const created = await createWebhook(hs, alice, roomId, 'sentry', { commandText: `!bridge webhook sentry secret ${sentrySecret}`, expectReply: 'Created the webhook "sentry"' });
    expect(created.reply.content.body).toContain('I removed your message');
    expect(created.secret).toBe(sentrySecret);
    // The command is redacted: its text is gone from the room's history.
    const history = await alice.ok('GET', `/rooms/${encodeURIComponent(roomId)}/messages`, undefined, { dir: 'b', limit: 50 });
    expect(JSON.stringify(history.chunk)).not.toContain(sentrySecret);

    const body = readFixture('sentry-issue-created.json');
    const signature = createHmac('sha256', sentrySecret).update(body).digest('hex');
    const posted = await hs.http.post(created.path).set({ 'content-type': 'application/json', 'sentry-hook-resource': 'issue', 'sentry-hook-signature': signature }).send(body);
    expect(posted.status).toBe(200);
    expectMatrixError(await hs.http.post(created.path).set({ 'sentry-hook-resource': 'issue', 'sentry-hook-signature': signature.replace(/^./, '0') }).send(body), 403, 'M_FORBIDDEN');
    const event = await alice.waitForEvent(roomId, (e: Json) => e.event_id === posted.body.event_id);
    expect(event.content.body).toContain('Custom exception');
  });

  it('refuses to manage secrets for members without power, and answers a missing webhook', async () => {
    hs = await startTestHomeserver(withBridge());
    const [alice, bob] = await clientsFor(hs, 'alice', 'bob');
    const roomId = await roomWithBridge(hs, alice, { invite: [bob.userId] });
    await bob.join(roomId);
    const refused = await command(hs, bob, roomId, '!bridge webhook ci secret');
    expect(refused.content.body).toContain('takes power level 50');
    // A refused or malformed command that gives a secret is removed all the same.
    const refusedWithSecret = await command(hs, bob, roomId, '!bridge webhook ci secret bobs-passphrase-1234');
    expect(refusedWithSecret.content.body).toContain('takes power level 50');
    expect(refusedWithSecret.content.body).toContain('I removed your message');
    const tooShort = await command(hs, alice, roomId, '!bridge webhook ci secret hunter2');
    expect(tooShort.content.body).toContain('16 to 256 characters');
    expect(tooShort.content.body).toContain('I removed your message');
    const history = await alice.ok('GET', `/rooms/${encodeURIComponent(roomId)}/messages`, undefined, { dir: 'b', limit: 50 });
    expect(JSON.stringify(history.chunk)).not.toMatch(/bobs-passphrase|hunter2/);
    const missing = await command(hs, alice, roomId, '!bridge webhook nope secret off');
    expect(missing.content.body).toContain('no webhook named "nope"');
  });
});
