/** make_join templates as the joining server reads them (federation/membership.ts templateOf). */
import { describe, expect, it } from 'vitest';
import { templateOf } from '../../src/federation/membership.js';
import { roomVersion } from '../../src/rooms/room-versions.js';

const roomId = '!r:remote.example';
const userId = '@bot:here.example';
const base = { type: 'm.room.member', room_id: roomId, sender: userId, state_key: userId, content: { membership: 'join' }, depth: 3, origin_server_ts: 1 };

describe('a make_join template', () => {
  it('of a version-1 answer with bare ids of the later form (SyTest\u2019s made-up versions) is taken, so send_join can follow', () => {
    const template = templateOf({ ...base, prev_events: ['$abcDEF123_-'], auth_events: ['$create', '$rules'] }, roomId, userId, roomVersion('1')!);
    expect(template.prev_events).toEqual(['$abcDEF123_-']);
    expect(template.auth_events).toEqual(['$create', '$rules']);
  });

  it('of version 1 with pairs is held to v1 ids; anything else is malformed', () => {
    expect(templateOf({ ...base, prev_events: [['$a:remote.example', { sha256: 'x' }]], auth_events: [] }, roomId, userId, roomVersion('1')!).prev_events).toEqual(['$a:remote.example']);
    expect(() => templateOf({ ...base, prev_events: [['$noserver', {}]], auth_events: [] }, roomId, userId, roomVersion('1')!)).toThrow(/malformed/);
    expect(() => templateOf({ ...base, prev_events: ['nodollar'], auth_events: [] }, roomId, userId, roomVersion('1')!)).toThrow(/malformed/);
    expect(() => templateOf({ ...base, prev_events: [7], auth_events: [] }, roomId, userId, roomVersion('1')!)).toThrow(/malformed/);
    expect(() => templateOf({ ...base, prev_events: Array.from({ length: 21 }, (_, i) => `$e${i}`), auth_events: [] }, roomId, userId, roomVersion('1')!)).toThrow(/malformed/);
  });
});
