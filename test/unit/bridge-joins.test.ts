/**
 * The bridge drops the messages before its own join in a batch (history, not meant for it), but
 * not those before a change of its profile: a join after a join, which the homeserver writes into
 * every joined room when the bridge sets its display name at start. Issue 31: on restart, a
 * command sent while the bridge was down came in one appservice transaction with those profile
 * changes and was dropped.
 */
import { describe, expect, it } from 'vitest';
import { AppserviceHomeserver } from '../../src/bridge/appservice-homeserver.js';
import { isJoinOf, type RoomActivity } from '../../src/bridge/homeserver.js';
import type { BridgeStorage } from '../../src/storage/bridge-store.js';
import type { JsonObject } from '../../src/rooms/events.js';

const BRIDGE = '@bridge:example.org';
const ROOM = '!room:example.org';

function member(membership: string, prev?: string, userId = BRIDGE): JsonObject {
  return {
    type: 'm.room.member',
    state_key: userId,
    sender: userId,
    room_id: ROOM,
    event_id: `$${membership}-${prev ?? 'none'}-${Math.random()}`,
    content: { membership, displayname: 'Bridge' },
    ...(prev === undefined ? {} : { unsigned: { prev_content: { membership: prev } } }),
  };
}

function message(body: string): JsonObject {
  return { type: 'm.room.message', sender: '@alice:example.org', room_id: ROOM, event_id: `$${body.replace(/\W/g, '')}`, content: { msgtype: 'm.text', body } };
}

describe('isJoinOf', () => {
  it.each([
    ['a first join', member('join'), true],
    ['a join after an invite', member('join', 'invite'), true],
    ['a join after a leave', member('join', 'leave'), true],
    ['a profile change (join after join)', member('join', 'join'), false],
    ['a leave', member('leave', 'join'), false],
    ['an invite', member('invite'), false],
    ['someone else joining', member('join', undefined, '@alice:example.org'), false],
    ['a message', message('hello'), false],
  ])('%s', (_name, event, expected) => {
    expect(isJoinOf(event, BRIDGE)).toBe(expected);
  });
});

describe('AppserviceHomeserver transactions', () => {
  async function following(): Promise<{ homeserver: AppserviceHomeserver; batches: RoomActivity[]; stop: () => void }> {
    const values = new Map<string, string>();
    const store = { getValue: async (key: string) => values.get(key), setValue: async (key: string, value: string) => void values.set(key, value) };
    const storage = { bridge: store, transaction: async (work: (stores: { bridge: typeof store }) => Promise<unknown>) => work({ bridge: store }) } as unknown as BridgeStorage;
    const log = { warn: () => undefined, info: () => undefined, debug: () => undefined, error: () => undefined } as never;
    const homeserver = new AppserviceHomeserver({ homeserverUrl: 'http://127.0.0.1:1', serverName: 'example.org', localpart: 'bridge', asToken: 'as', displayName: undefined, storage, log, timeoutMs: 1_000 });
    const batches: RoomActivity[] = [];
    const abort = new AbortController();
    void homeserver.follow(async (activity, checkpoint) => {
      batches.push(activity);
      await checkpoint({ bridge: store } as never);
    }, abort.signal);
    return { homeserver, batches, stop: () => abort.abort() };
  }

  it('keeps a command that came in one transaction with a change of the bridge’s profile', async () => {
    const { homeserver, batches, stop } = await following();
    await homeserver.receiveTransaction('1', [member('join', 'invite')]);
    await homeserver.receiveTransaction('2', [message('!bridge webhook list'), member('join', 'join')]);
    expect(batches[1]!.messages.map((m) => m.content.body)).toEqual(['!bridge webhook list']);
    expect(batches[1]!.invites).toEqual([]);
    stop();
  });

  it('still drops what came before the bridge joined again, in the same transaction', async () => {
    const { homeserver, batches, stop } = await following();
    await homeserver.receiveTransaction('1', [member('join', 'invite')]);
    await homeserver.receiveTransaction('2', [message('!bridge help'), member('leave', 'join'), member('invite', 'leave'), member('join', 'invite'), message('!bridge feed list')]);
    expect(batches[1]!.messages.map((m) => m.content.body)).toEqual(['!bridge feed list']);
    stop();
  });
});
