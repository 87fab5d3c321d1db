/**
 * The appservice bridge's cache of its rooms' state: a post into a room asks the main homeserver
 * nothing before its send (not the room's encryption, nor its members), and the cache follows
 * what the homeserver's transactions bring (a room becoming encrypted, members coming and going).
 * The bridge reaches the main homeserver (a second instance) through a recording proxy, which
 * counts what the bridge asks; the transactions reach the bridge through another, so a test knows
 * when the bridge has taken an event.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { TestAccount, TestHomeserver } from '../../src/testing/index.js';
import { startBridgeApp, type RunningBridge } from '../../src/bridge-app.js';
import { AppserviceHomeserver } from '../../src/bridge/appservice-homeserver.js';
import type { JsonObject } from '../../src/rooms/events.js';
import type { BridgeStorage } from '../../src/storage/bridge-store.js';
import { mainAndProxies, mainWithBridgeRegistration, taken } from '../support/bridge-appservice.js';
import { startCountingProxy, type CountingProxy, type ProxiedRequest } from '../support/counting-proxy.js';

const BRIDGE = '@bridge:localhost';
const AS_TOKEN = 'Bearer bridge-as-token-0123456789';
const MEGOLM = { algorithm: 'm.megolm.v1.aes-sha2' };

/** A request as the bridge user (its as_token; not its crypto device's), room ids cut out. */
function asked(requests: readonly ProxiedRequest[]): string[] {
  return requests
    .filter((request) => request.authorization === AS_TOKEN)
    .map((request) => `${request.method} ${request.path.replace(/\/rooms\/[^/]+/, '/rooms/R').replace(/\/send\/([^/]+)\/[^/]+$/, '/send/$1')}`);
}

describe('the appservice bridge posting', () => {
  let dir: string;
  let main: TestHomeserver | undefined;
  let bridge: RunningBridge | undefined;
  const proxies: CountingProxy[] = [];
  afterEach(async () => {
    await bridge?.close();
    await main?.close();
    for (const proxy of proxies.splice(0)) await proxy.close();
    bridge = undefined;
    main = undefined;
    rmSync(dir, { recursive: true, force: true });
  });

  it('costs one send per post, and follows the room becoming encrypted from its transactions', async () => {
    dir = mkdtempSync(join(tmpdir(), 'bhs-bridge-cache-'));
    const started = await mainAndProxies(dir);
    main = started.main;
    const { requests, transactions } = started;
    proxies.push(requests, transactions);
    bridge = await startBridgeApp(started.config);
    expect(bridge.bridge.deviceId).toMatch(/^BRIDGE/);

    const person = await main.createUser('person');
    const roomId = await main.createRoom(person, { preset: 'public_chat', invite: [BRIDGE] });
    await main.setState(person, roomId, 'm.room.power_levels', '', { users: { [person.userId]: 100, [BRIDGE]: 50 } });
    await main.waitFor(roomId, (e) => e.sender === BRIDGE && String(e.content.body).includes('!bridge help'));
    await main.send(person, roomId, '!bridge webhook alerts');
    await main.waitFor(roomId, (e) => e.sender === BRIDGE && String(e.content.body).startsWith('Created the webhook "alerts"'));
    const direct = await main.services.accountData.get(BRIDGE, undefined, 'm.direct');
    const dm = (direct[person.userId] as string[])[0]!;
    const credentials = await main.waitFor(dm, (e) => e.sender === BRIDGE && String(e.content.body).includes('/webhook/'));
    const url = /(http:\/\/\S+\/webhook\/\S+)/.exec(String(credentials.content.body))![1]!;
    const post = async (text: string) => {
      const answer = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ text }) });
      expect(answer.status).toBe(200);
    };

    // Ten posts into a room the bridge already knows is not encrypted: ten sends, nothing else.
    let mark = requests.requests.length;
    for (let i = 0; i < 10; i++) await post(`alert ${i}`);
    expect(asked(requests.requests.slice(mark))).toEqual(Array(10).fill('PUT /_matrix/client/v3/rooms/R/send/m.room.message'));

    // The room becomes encrypted: once the transaction that says so has reached the bridge, its
    // next post is encrypted, without asking the room's encryption; the members are asked once.
    const encryption = await main.setState(person, roomId, 'm.room.encryption', '', MEGOLM);
    await taken(transactions, encryption);
    mark = requests.requests.length;
    for (let i = 0; i < 3; i++) await post(`secret ${i}`);
    expect(asked(requests.requests.slice(mark))).toEqual(['GET /_matrix/client/v3/rooms/R/members', ...Array(3).fill('PUT /_matrix/client/v3/rooms/R/send/m.room.encrypted')]);
    const timeline = await main.timeline(roomId);
    const fromBridge = timeline.filter((e) => e.sender === BRIDGE && (e.type === 'm.room.message' || e.type === 'm.room.encrypted'));
    expect(fromBridge.slice(-3).map((e) => e.type)).toEqual(Array(3).fill('m.room.encrypted'));
    expect(fromBridge.some((e) => String(e.content.body ?? '').startsWith('secret'))).toBe(false);

    // Someone joins: the transaction brings it, and the members are not asked again.
    const other = await main.createUser('other');
    const joined = await main.join(other, roomId).then(() => main!.timeline(roomId)).then((events) => events.findLast((e) => e.type === 'm.room.member' && e.state_key === other.userId)!);
    await taken(transactions, joined.event_id);
    mark = requests.requests.length;
    await post('after the join');
    expect(asked(requests.requests.slice(mark))).toEqual(['PUT /_matrix/client/v3/rooms/R/send/m.room.encrypted']);
  }, 60_000);
});

describe('the appservice homeserver’s cache of room state', () => {
  let dir: string;
  let main: TestHomeserver | undefined;
  const proxies: CountingProxy[] = [];
  let stop: (() => void) | undefined;
  afterEach(async () => {
    stop?.();
    await main?.close();
    for (const proxy of proxies.splice(0)) await proxy.close();
    main = undefined;
    rmSync(dir, { recursive: true, force: true });
  });

  async function adapter(cachedRooms: number): Promise<{ homeserver: AppserviceHomeserver; requests: CountingProxy; person: TestAccount; clock: { now: number } }> {
    dir = mkdtempSync(join(tmpdir(), 'bhs-bridge-cache-'));
    const started = await mainWithBridgeRegistration(dir);
    main = started.main;
    const requests = await startCountingProxy(() => main!.baseUrl);
    proxies.push(requests);
    const values = new Map<string, string>();
    const store = { getValue: async (key: string) => values.get(key), setValue: async (key: string, value: string) => void values.set(key, value) };
    const storage = { bridge: store, transaction: async (work: (stores: { bridge: typeof store }) => Promise<unknown>) => work({ bridge: store }) } as unknown as BridgeStorage;
    const log = { warn: () => undefined, info: () => undefined, debug: () => undefined, error: () => undefined } as never;
    const clock = { now: 1_000_000 };
    const homeserver = new AppserviceHomeserver({
      homeserverUrl: requests.url,
      serverName: 'localhost',
      localpart: 'bridge',
      asToken: 'bridge-as-token-0123456789',
      displayName: undefined,
      storage,
      log,
      timeoutMs: 10_000,
      clock: { now: () => clock.now },
      cachedRooms,
    });
    await homeserver.prepare();
    const abort = new AbortController();
    void homeserver.follow((_activity, checkpoint) => checkpoint({ bridge: store } as never), abort.signal);
    stop = () => abort.abort();
    return { homeserver, requests, person: await main.createUser('person'), clock };
  }

  async function asking<T>(requests: CountingProxy, work: () => Promise<T>): Promise<{ answer: T; asked: string[] }> {
    const mark = requests.requests.length;
    const answer = await work();
    return { answer, asked: asked(requests.requests.slice(mark)).map((request) => request.replace('/_matrix/client/v3', '')) };
  }

  it('keeps encryption and members, follows transactions, asks again when old, holds at most N rooms, keeps no error', async () => {
    const { homeserver, requests, person, clock } = await adapter(2);
    const room = async (encrypted = false) => {
      const roomId = await main!.createRoom(person, { invite: [BRIDGE], extra: encrypted ? { initial_state: [{ type: 'm.room.encryption', state_key: '', content: MEGOLM }] } : {} });
      await homeserver.join(roomId);
      return roomId;
    };
    const members = async (roomId: string) => (await homeserver.members(roomId)).sort();
    const first = await room();

    // Asked once, then known.
    expect(await asking(requests, () => homeserver.encryption(first))).toEqual({ answer: undefined, asked: ['GET /rooms/R/state/m.room.encryption/'] });
    expect(await asking(requests, () => homeserver.encryption(first))).toEqual({ answer: undefined, asked: [] });
    expect(await asking(requests, () => members(first))).toEqual({ answer: [person.userId, BRIDGE].sort(), asked: ['GET /rooms/R/members'] });
    expect(await asking(requests, async () => [await members(first), await homeserver.membership(first, person.userId)])).toEqual({ answer: [[person.userId, BRIDGE].sort(), 'join'], asked: [] });

    // A transaction's member and encryption events are applied, with no request.
    const event = (type: string, stateKey: string, content: JsonObject) => ({ type, state_key: stateKey, content, room_id: first, sender: person.userId, event_id: `$${type}-${stateKey}` });
    await homeserver.receiveTransaction('1', [event('m.room.member', '@carol:localhost', { membership: 'invite' })]);
    expect(await asking(requests, () => members(first))).toEqual({ answer: [person.userId, BRIDGE, '@carol:localhost'].sort(), asked: [] });
    // (The room is made encrypted on the homeserver too, for what is asked after the cache.)
    await main!.setState(person, first, 'm.room.encryption', '', MEGOLM);
    await homeserver.receiveTransaction('2', [event('m.room.member', person.userId, { membership: 'leave' }), event('m.room.encryption', '', MEGOLM)]);
    expect(await asking(requests, async () => [await members(first), await homeserver.encryption(first)])).toEqual({ answer: [[BRIDGE, '@carol:localhost'].sort(), MEGOLM], asked: [] });

    // Minutes later, the members are asked again (the homeserver's answer replaces the cache);
    // that the room is encrypted is kept for good.
    clock.now += 5 * 60_000;
    expect(await asking(requests, () => homeserver.encryption(first))).toEqual({ answer: MEGOLM, asked: [] });
    expect(await asking(requests, () => members(first))).toEqual({ answer: [person.userId, BRIDGE].sort(), asked: ['GET /rooms/R/members'] });
    // ... and that a room is not encrypted is asked again.
    const second = await room();
    expect((await asking(requests, () => homeserver.encryption(second))).asked).toEqual(['GET /rooms/R/state/m.room.encryption/']);
    clock.now += 5 * 60_000;
    expect((await asking(requests, () => homeserver.encryption(second))).asked).toEqual(['GET /rooms/R/state/m.room.encryption/']);

    // At most two rooms: a third pushes the first out, which is asked again.
    const third = await room(true);
    expect(await asking(requests, () => homeserver.encryption(third))).toEqual({ answer: MEGOLM, asked: ['GET /rooms/R/state/m.room.encryption/'] });
    expect(await asking(requests, () => homeserver.encryption(second))).toEqual({ answer: undefined, asked: [] });
    expect(await asking(requests, () => homeserver.encryption(first))).toEqual({ answer: MEGOLM, asked: ['GET /rooms/R/state/m.room.encryption/'] });

    // An error is not kept: a failed request, or a room the bridge cannot see (403).
    const fourth = await room();
    requests.failWith = (request) => (request.path.endsWith('/members') ? 502 : undefined);
    await expect(members(fourth)).rejects.toThrow(/502/);
    requests.failWith = undefined;
    expect(await asking(requests, () => members(fourth))).toEqual({ answer: [person.userId, BRIDGE].sort(), asked: ['GET /rooms/R/members'] });
    const notIn = await main!.createRoom(person);
    for (let i = 0; i < 2; i++) expect(await asking(requests, () => homeserver.encryption(notIn))).toEqual({ answer: undefined, asked: ['GET /rooms/R/state/m.room.encryption/'] });
  }, 30_000);
});
