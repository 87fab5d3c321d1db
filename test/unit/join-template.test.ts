/** make_join templates as the joining server reads them (federation/membership.ts templateOf). */
import { describe, expect, it } from 'vitest';
import { createHash } from 'node:crypto';
import { canonicalJsonBytes } from '../../src/core/canonical-json.js';
import { decodeBase64, ed25519PublicKey, ed25519Signer, hasValidSignature } from '../../src/core/signed-json.js';
import { templateOf } from '../../src/federation/membership.js';
import { finishPdu, wirePdu, type UnsignedPdu } from '../../src/rooms/pdu.js';
import { redactPdu } from '../../src/rooms/redaction.js';
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

  it('with bare ids is signed and sent back with bare ids, as it came (no [id, {}] pairs made up for events we do not have)', () => {
    const v1 = roomVersion('1')!;
    const signer = ed25519Signer('here.example', '1', decodeBase64('YJDBA9Xnr2sVqXD9Vj7XVUnmFZcZrlw8Md7kMW+3XA1')!);
    const sign = (template: ReturnType<typeof templateOf>) => {
      const { signatures: _s, hashes: _h, ...draft } = template as unknown as Record<string, unknown>;
      return wirePdu(finishPdu(draft as unknown as UnsignedPdu, v1, signer).pdu, v1);
    };
    const bare = sign(templateOf({ ...base, prev_events: ['$abcDEF123_-'], auth_events: ['$create', '$rules'] }, roomId, userId, v1));
    expect(bare.prev_events).toEqual(['$abcDEF123_-']);
    expect(bare.auth_events).toEqual(['$create', '$rules']);
    expect(Object.keys(bare).some((key) => key.startsWith('bhs.'))).toBe(false);
    // What was signed and hashed is what goes out.
    const { unsigned: _u, signatures: _sig, hashes, ...covered } = bare as Record<string, unknown>;
    expect((hashes as { sha256: string }).sha256).toBe(createHash('sha256').update(canonicalJsonBytes(covered)).digest('base64').replace(/=+$/, ''));
    expect(hasValidSignature(redactPdu(bare, '1'), 'here.example', new Map([['ed25519:1', ed25519PublicKey(signer.publicKey)!]]))).toBe(true);
    // A template in the version's own form keeps its pairs.
    const paired = sign(templateOf({ ...base, prev_events: [['$a:remote.example', { sha256: 'x' }]], auth_events: [['$c:remote.example', {}]] }, roomId, userId, v1));
    expect(paired.prev_events).toEqual([['$a:remote.example', { sha256: 'x' }]]);
    expect(paired.auth_events).toEqual([['$c:remote.example', {}]]);
  });

  it('of version 1 with pairs is held to v1 ids; anything else is malformed', () => {
    expect(templateOf({ ...base, prev_events: [['$a:remote.example', { sha256: 'x' }]], auth_events: [] }, roomId, userId, roomVersion('1')!).prev_events).toEqual(['$a:remote.example']);
    expect(() => templateOf({ ...base, prev_events: [['$noserver', {}]], auth_events: [] }, roomId, userId, roomVersion('1')!)).toThrow(/malformed/);
    expect(() => templateOf({ ...base, prev_events: ['nodollar'], auth_events: [] }, roomId, userId, roomVersion('1')!)).toThrow(/malformed/);
    expect(() => templateOf({ ...base, prev_events: [7], auth_events: [] }, roomId, userId, roomVersion('1')!)).toThrow(/malformed/);
    expect(() => templateOf({ ...base, prev_events: Array.from({ length: 21 }, (_, i) => `$e${i}`), auth_events: [] }, roomId, userId, roomVersion('1')!)).toThrow(/malformed/);
  });
});
