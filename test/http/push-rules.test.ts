/** Push rules (/pushrules/global/...) and pushers (/pushers): what clients change and list. */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { client, type Json, type TestClient } from '../support/client.js';
import { createUser, startTestHomeserver, type TestHomeserver } from '../support/homeserver.js';

let hs: TestHomeserver;
let alice: TestClient;
beforeEach(async () => {
  hs = await startTestHomeserver();
  alice = client(hs, await createUser(hs, 'alice'));
});
afterEach(() => hs.close());

const ids = (rules: Json[]) => rules.map((rule) => rule.rule_id);

describe('push rules', () => {
  it('adds the user’s own rules in place, after .m.rule.master and before the other defaults', async () => {
    await alice.ok('PUT', '/pushrules/global/override/mute-ci', { actions: ['dont_notify'], conditions: [{ kind: 'event_match', key: 'sender', pattern: '@ci:*' }] });
    await alice.ok('PUT', '/pushrules/global/override/first', { actions: ['notify'], conditions: [] }, { before: 'mute-ci' });
    await alice.ok('PUT', '/pushrules/global/override/last', { actions: ['notify'], conditions: [] }, { after: 'mute-ci' });
    const override = (await alice.ok('GET', '/pushrules/')).global.override as Json[];
    expect(ids(override).slice(0, 4)).toEqual(['.m.rule.master', 'first', 'mute-ci', 'last']);
    expect(override[2]).toEqual({ rule_id: 'mute-ci', default: false, enabled: true, actions: ['dont_notify'], conditions: [{ kind: 'event_match', key: 'sender', pattern: '@ci:*' }] });
    expect(await alice.ok('GET', '/pushrules/global/override/mute-ci/actions')).toEqual({ actions: ['dont_notify'] });

    await alice.ok('PUT', '/pushrules/global/content/deploys', { actions: ['notify', { set_tweak: 'highlight' }], pattern: 'deploy' });
    await alice.ok('PUT', `/pushrules/global/room/${encodeURIComponent('!quiet:test.local')}`, { actions: ['dont_notify'] });
    const all = (await alice.ok('GET', '/pushrules/')).global;
    expect(all.content[0]).toMatchObject({ rule_id: 'deploys', pattern: 'deploy' });
    expect(all.room[0]).toMatchObject({ rule_id: '!quiet:test.local', conditions: [{ kind: 'event_match', key: 'room_id', pattern: '!quiet:test.local' }] });

    await alice.ok('DELETE', '/pushrules/global/override/first');
    expect(ids((await alice.ok('GET', '/pushrules/global/')).override).slice(0, 3)).toEqual(['.m.rule.master', 'mute-ci', 'last']);
  });

  it('turns default rules off and changes their actions, and says what it refuses', async () => {
    await alice.ok('PUT', '/pushrules/global/override/.m.rule.master/enabled', { enabled: true });
    expect(await alice.ok('GET', '/pushrules/global/override/.m.rule.master/enabled')).toEqual({ enabled: true });
    await alice.ok('PUT', '/pushrules/global/underride/.m.rule.message/actions', { actions: ['dont_notify'] });
    expect((await alice.ok('GET', '/pushrules/global/underride/.m.rule.message')).actions).toEqual(['dont_notify']);

    const refused = async (method: 'PUT' | 'DELETE' | 'GET', path: string, body: Json | undefined, status: number, errcode: string) => {
      const answer = await alice.request(method, path, body);
      expect([answer.status, answer.body.errcode]).toEqual([status, errcode]);
    };
    await refused('PUT', '/pushrules/global/override/.mine', { actions: ['notify'] }, 400, 'M_INVALID_PARAM');
    await refused('PUT', '/pushrules/global/sideways/x', { actions: ['notify'] }, 400, 'M_INVALID_PARAM');
    await refused('PUT', '/pushrules/global/content/x', { actions: ['notify'] }, 400, 'M_MISSING_PARAM');
    await refused('PUT', '/pushrules/global/override/x', { actions: ['explode'] }, 400, 'M_INVALID_PARAM');
    await refused('GET', '/pushrules/global/override/nope', undefined, 404, 'M_NOT_FOUND');
    await refused('DELETE', '/pushrules/global/override/.m.rule.master', undefined, 400, 'M_INVALID_PARAM');
    const badPlace = await alice.request('PUT', '/pushrules/global/override/x?before=nope', { actions: ['notify'] });
    expect(badPlace.status).toBe(404);
  });

  it('comes in an initial sync, changed or not', async () => {
    const first = await alice.sync();
    expect((first.account_data.events as Json[]).find((e) => e.type === 'm.push_rules')?.content.global.underride.map((r: Json) => r.rule_id)).toContain('.m.rule.message');
    await alice.ok('PUT', '/pushrules/global/override/mine', { actions: ['notify'], conditions: [] });
    const again = await alice.sync();
    const rules = (again.account_data.events as Json[]).filter((e) => e.type === 'm.push_rules');
    expect(rules).toHaveLength(1);
    expect(rules[0]!.content.global.override.map((r: Json) => r.rule_id)).toContain('mine');
    // A filter that leaves it out is obeyed.
    const filtered = await alice.sync({ filter: JSON.stringify({ account_data: { not_types: ['m.push_rules'] } }) });
    expect(filtered.account_data.events).toEqual([]);
  });

  it('tells the client in /sync as m.push_rules account data', async () => {
    const since = (await alice.sync()).next_batch as string;
    await alice.ok('PUT', '/pushrules/global/sender/@noisy:test.local', { actions: ['dont_notify'] });
    const sync = await alice.sync({ since });
    const rules = (sync.account_data.events as Json[]).find((event) => event.type === 'm.push_rules');
    expect(rules?.content.global.sender[0]).toMatchObject({ rule_id: '@noisy:test.local', actions: ['dont_notify'] });
  });
});

describe('unread counts follow the user’s push rules', () => {
  it('count what the rules say notifies and highlights, carried forward and counted afresh alike', async () => {
    const bob = client(hs, await createUser(hs, 'bob'));
    const roomId = await alice.createRoom({ preset: 'public_chat' });
    await bob.join(roomId);
    const counts = (answer: Json) => answer.rooms.join[roomId]?.unread_notifications;
    let since = (await bob.sync()).next_batch as string;
    // An incremental sync carries counts forward; an initial one (no since) is needed to see a
    // room in which nothing happened, and shows them counted anew after a change of rules.
    const step = async (incremental = true) => {
      const answer = await bob.sync(incremental ? { since } : {});
      since = answer.next_batch;
      return counts(answer);
    };

    const first = await alice.send(roomId, { msgtype: 'm.text', body: 'one' });
    await alice.send(roomId, { msgtype: 'm.notice', body: 'a bot notice: .m.rule.suppress_notices' });
    await alice.send(roomId, { msgtype: 'm.text', body: '* one', 'm.new_content': { msgtype: 'm.text', body: 'one' }, 'm.relates_to': { rel_type: 'm.replace', event_id: first } });
    await alice.send(roomId, { 'm.relates_to': { rel_type: 'm.annotation', event_id: first, key: '👍' } }, 'm.reaction');
    await alice.send(roomId, { msgtype: 'm.text', body: 'bob!', 'm.mentions': { user_ids: [bob.userId] } });
    // The creator has power 100, above notifications.room (50): @room highlights.
    await alice.send(roomId, { msgtype: 'm.text', body: '@room', 'm.mentions': { room: true } });
    expect(await step()).toEqual({ notification_count: 3, highlight_count: 2 });
    // A change to the rules makes the next count afresh from the database: it agrees.
    await bob.ok('PUT', '/pushrules/global/content/outage', { actions: ['notify', { set_tweak: 'highlight' }], pattern: 'outage' });
    expect(await step(false)).toEqual({ notification_count: 3, highlight_count: 2 });

    // Bob mutes the room: only the mentions (override rules) still count, counted afresh.
    await bob.ok('PUT', `/pushrules/global/room/${encodeURIComponent(roomId)}`, { actions: ['dont_notify'] });
    expect(await step(false)).toEqual({ notification_count: 2, highlight_count: 2 });
    // His content rule comes before room rules: outages still reach him (carried forward).
    await alice.send(roomId, { msgtype: 'm.text', body: 'lunch?' });
    await alice.send(roomId, { msgtype: 'm.text', body: 'Outage in eu-1' });
    expect(await step()).toEqual({ notification_count: 3, highlight_count: 3 });

    // With .m.rule.master on, nothing notifies.
    await bob.ok('PUT', '/pushrules/global/override/.m.rule.master/enabled', { enabled: true });
    expect(await step(false)).toEqual({ notification_count: 0, highlight_count: 0 });
  });
});

describe('pushers', () => {
  it('are stored, listed, replaced and removed', async () => {
    const pusher = { pushkey: 'key-1', kind: 'http', app_id: 'org.example.app', app_display_name: 'App', device_display_name: 'Phone', lang: 'en', data: { url: 'https://push.example/_matrix/push/v1/notify', format: 'event_id_only' } };
    await alice.ok('POST', '/pushers/set', pusher);
    expect((await alice.ok('GET', '/pushers')).pushers).toEqual([pusher]);
    await alice.ok('POST', '/pushers/set', { ...pusher, device_display_name: 'New phone' });
    expect((await alice.ok('GET', '/pushers')).pushers.map((p: Json) => p.device_display_name)).toEqual(['New phone']);
    const noUrl = await alice.request('POST', '/pushers/set', { ...pusher, data: {} });
    expect([noUrl.status, noUrl.body.errcode]).toEqual([400, 'M_MISSING_PARAM']);
    await alice.ok('POST', '/pushers/set', { ...pusher, kind: null });
    expect((await alice.ok('GET', '/pushers')).pushers).toEqual([]);
  });
});
