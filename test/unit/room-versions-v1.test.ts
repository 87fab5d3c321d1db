/**
 * Room versions 1 and 2 (rooms/v1, rooms/v2): the event format where events carry their own
 * `event_id` and list their parents as `[event_id, hashes]` pairs, the spec's signing vector in
 * that format, the check that the event id's server signed, and auth rule 11 for redactions.
 */
import { describe, expect, it } from 'vitest';
import { decodeBase64, ed25519PublicKey, ed25519Signer, hasValidSignature, signJson, type Signer } from '../../src/core/signed-json.js';
import type { KeyRing } from '../../src/federation/key-ring.js';
import { checkPdu, pduFormatProblem } from '../../src/federation/pdu-checks.js';
import { checkEventAuth, redactionApplies, effectivePowerLevels, type StateEvent, type StateLookup } from '../../src/rooms/auth-rules.js';
import { contentHash, eventIdOf, finishPdu, hasValidContentHash, pduFromWire, signedForm, V1_REFERENCE_HASHES, wirePdu, type JsonObject } from '../../src/rooms/pdu.js';
import { redactPdu } from '../../src/rooms/redaction.js';
import { knownRoomVersion, roomVersion } from '../../src/rooms/room-versions.js';

const SEED = decodeBase64('YJDBA9Xnr2sVqXD9Vj7XVUnmFZcZrlw8Md7kMW+3XA1')!;
const v1 = knownRoomVersion('1');
const v2 = knownRoomVersion('2');
const v3 = knownRoomVersion('3');

function signerFor(server: string): Signer {
  return ed25519Signer(server, '1', SEED);
}

/** A key ring that knows the (same) key of every server: enough to check who signed. */
const keyRing = {
  async isSignedBy(object: Record<string, unknown>, server: string): Promise<boolean> {
    return hasValidSignature(object, server, new Map([['ed25519:1', ed25519PublicKey(signerFor(server).publicKey)!]]));
  },
} as unknown as KeyRing;

describe('room versions 1 and 2 as data', () => {
  it('have the v1 event format, the v1 redaction rule, and state resolution v1 and v2', () => {
    expect(v1).toMatchObject({ eventFormat: 'v1', redactionAuthRule: true, stateResolution: 'v1', aliasesAuthRule: true, redaction: 'v3', strictCanonicalJson: false, enforceKeyValidity: false });
    expect(v2).toMatchObject({ eventFormat: 'v1', redactionAuthRule: true, stateResolution: 'v2' });
    expect(v3).toMatchObject({ eventFormat: 'v3', redactionAuthRule: false, stateResolution: 'v2' });
    expect(roomVersion('0')).toBeUndefined();
  });
});

describe('the v1 event format', () => {
  it('signs the spec\u2019s event with redactable content (it carries an event id) as the spec says', () => {
    const event: JsonObject = {
      content: { body: 'Here is the message content' }, event_id: '$0:domain', origin: 'domain', origin_server_ts: 1000000,
      type: 'm.room.message', room_id: '!r:domain', sender: '@u:domain',
    };
    const hashed = { ...event, hashes: { sha256: contentHash(event, v1) } };
    expect(hashed.hashes).toEqual({ sha256: 'onLKD1bGljeBWQhWZ1kaP9SorVmRQNdN5aM2JYU2n/g' });
    const signed = signJson(signedForm(hashed, v1), signerFor('domain'));
    expect(signed.signatures).toEqual({ domain: { 'ed25519:1': 'Wm+VzmOUOz08Ds+0NTWb1d4CZrVsJSikkeRxh6aCcUwu6pNC78FunoD7KNWzqFn241eYHYMGCA5McEiVPdhzBA' } });
    // The id is the one the event carries, not a hash.
    expect(eventIdOf(hashed, v1)).toBe('$0:domain');
  });

  it('finishes a local event with an id of this server, pairs on the wire and bare ids inside', () => {
    const draft = { room_id: '!r:domain', sender: '@u:domain', type: 'm.room.message', content: { body: 'hi' }, origin_server_ts: 1, depth: 2, prev_events: ['$p:domain'], auth_events: ['$a:other'] };
    const { pdu, eventId } = finishPdu(draft, v1, signerFor('domain'));
    expect(eventId).toMatch(/^\$[A-Za-z0-9_-]{18}:domain$/);
    expect(pdu.event_id).toBe(eventId);
    expect(pdu.prev_events).toEqual(['$p:domain']);
    const wire = wirePdu(pdu, v1);
    expect(wire.prev_events).toEqual([['$p:domain', {}]]);
    expect(wire.auth_events).toEqual([['$a:other', {}]]);
    expect(hasValidSignature(redactPdu(wire, '1'), 'domain', new Map([['ed25519:1', ed25519PublicKey(signerFor('domain').publicKey)!]]))).toBe(true);
    expect(hasValidContentHash(wire, v1)).toBe(true);
    expect(eventIdOf(wire, v1)).toBe(eventId);
    // Two events never share an id.
    expect(finishPdu(draft, v1, signerFor('domain')).eventId).not.toBe(eventId);
    // An id given is kept only on the signer's own domain (no other server would take it).
    expect(finishPdu({ ...draft, event_id: '$given:domain' }, v1, signerFor('domain')).eventId).toBe('$given:domain');
    expect(() => finishPdu({ ...draft, event_id: '$given:other' }, v1, signerFor('domain'))).toThrow(/not on domain/);
    expect(() => finishPdu({ ...draft, event_id: '$given:other:domain' }, v1, signerFor('domain'))).toThrow(/not on domain/);
  });

  it('keeps the hashes of a remote event\u2019s pairs, so it is served as it was signed', async () => {
    const raw = remoteEvent({ prev_events: [['$p:remote', { sha256: 'abc' }]], auth_events: [['$c:remote', { sha256: 'def' }], ['$m:remote', {}]] });
    const checked = await checkPdu(raw, v1, '!r:remote', keyRing);
    if (!('verified' in checked)) throw new Error(checked.dropped);
    expect(checked.verified.eventId).toBe('$e:remote');
    expect(checked.verified.pdu.prev_events).toEqual(['$p:remote']);
    expect(checked.verified.pdu.auth_events).toEqual(['$c:remote', '$m:remote']);
    expect(checked.verified.pdu[V1_REFERENCE_HASHES]).toEqual({ prev_events: [{ sha256: 'abc' }], auth_events: [{ sha256: 'def' }, {}] });
    expect(wirePdu(checked.verified.pdu, v1)).toEqual(raw);
    // Round trip without hashes: nothing kept aside.
    expect(pduFromWire(remoteEvent({}), v1)[V1_REFERENCE_HASHES]).toBeUndefined();
  });

  it('refuses the wrong list form for the version, and a v1 event without an id with a server', () => {
    const problem = (raw: JsonObject, version = v1) => pduFormatProblem(raw, version, '!r:remote');
    expect(problem(remoteEvent({}))).toBeUndefined();
    expect(problem(remoteEvent({ prev_events: ['$p:remote'] }))).toMatch(/prev_events/);
    expect(problem(remoteEvent({ auth_events: [['$a:remote']] }))).toMatch(/auth_events/);
    expect(problem(remoteEvent({ auth_events: [['$a:remote', { sha256: 1 }]] }))).toMatch(/auth_events/);
    expect(problem(remoteEvent({ prev_events: [['$nohost', {}]] }))).toMatch(/prev_events/);
    expect(problem(remoteEvent({ event_id: undefined }))).toMatch(/event_id/);
    expect(problem(remoteEvent({ event_id: '$nohost' }))).toMatch(/event_id/);
    expect(problem(remoteEvent({ [V1_REFERENCE_HASHES]: {} }))).toMatch(/not a PDU key/);
    // A v3 room takes bare ids only.
    expect(problem(remoteEvent({}), v3)).toMatch(/prev_events/);
    expect(problem(remoteEvent({ prev_events: ['$p'], auth_events: ['$a'] }), v3)).toBeUndefined();
  });

  it('drops an event whose event id names a server that did not sign it', async () => {
    // Signed by remote (the sender's server) only, but the id claims to be other's.
    const checked = await checkPdu(remoteEvent({ event_id: '$e:other' }), v1, '!r:remote', keyRing);
    expect(checked).toMatchObject({ dropped: expect.stringMatching(/other/), unsigned: true });
    // Signed by both: accepted, with both among the signers.
    const both = remoteEvent({ event_id: '$e:other' }, ['remote', 'other']);
    const accepted = await checkPdu(both, v1, '!r:remote', keyRing);
    if (!('verified' in accepted)) throw new Error(accepted.dropped);
    expect([...accepted.verified.signers].sort()).toEqual(['other', 'remote']);
  });
});

describe('auth rule 11 of v1/v2: redactions', () => {
  const ALICE = '@alice:a.example';
  const BOB = '@bob:b.example';
  const lookup = (version: string): StateLookup => {
    const events: StateEvent[] = [
      { event_id: '$create:a.example', type: 'm.room.create', state_key: '', sender: ALICE, content: { creator: ALICE, room_version: version } },
      { event_id: '$alice:a.example', type: 'm.room.member', state_key: ALICE, sender: ALICE, content: { membership: 'join' } },
      { event_id: '$bob:b.example', type: 'm.room.member', state_key: BOB, sender: BOB, content: { membership: 'join' } },
      { event_id: '$pl:a.example', type: 'm.room.power_levels', state_key: '', sender: ALICE, content: { users: { [ALICE]: 100 } } },
    ];
    const byKey = new Map(events.map((event) => [`${event.type}\u0000${event.state_key}`, event]));
    return (type, key) => byKey.get(`${type}\u0000${key}`);
  };
  const redaction = (sender: string, eventId: string | undefined, redacts: string) => ({ type: 'm.room.redaction', sender, content: {}, redacts, ...(eventId ? { event_id: eventId } : {}) });

  it.each([
    ['the redact level', ALICE, '$r:a.example', '$x:b.example', true],
    ['an event of the redaction\u2019s own server', BOB, '$r:b.example', '$x:b.example', true],
    ['an event of another server, without the level', BOB, '$r:b.example', '$x:a.example', false],
    ['a local redaction (no id yet: the sender\u2019s server)', BOB, undefined, '$x:b.example', true],
  ] as const)('%s', (_name, sender, eventId, redacts, allowed) => {
    for (const version of ['1', '2']) expect(checkEventAuth(redaction(sender, eventId, redacts), lookup(version), knownRoomVersion(version)).allowed).toBe(allowed);
    // v3+: the auth rules allow every redaction; whether it applies is decided later.
    expect(checkEventAuth(redaction(sender, eventId, redacts), lookup('3'), v3).allowed).toBe(true);
  });

  it('a redaction applies in v1 by the ids\u2019 servers, in v3+ by the senders\u2019', () => {
    const levels = effectivePowerLevels(lookup('1'), v1);
    // Bob (b.example, no redact level) redacts an event with an id of a.example sent by a user of b.example.
    expect(redactionApplies(levels, v1, { sender: BOB, eventId: '$r:b.example' }, { sender: '@other:b.example', eventId: '$x:a.example' })).toBe(false);
    expect(redactionApplies(levels, v3, { sender: BOB, eventId: '$r' }, { sender: '@other:b.example', eventId: '$x' })).toBe(true);
    expect(redactionApplies(levels, v1, { sender: ALICE, eventId: '$r:a.example' }, { sender: BOB, eventId: '$x:b.example' })).toBe(true);
  });
});

/** A v1 event of the server `remote`, signed by `signers`, with `overrides` applied (undefined removes a key). */
function remoteEvent(overrides: JsonObject, signers: string[] = ['remote']): JsonObject {
  const base: JsonObject = {
    event_id: '$e:remote', room_id: '!r:remote', sender: '@u:remote', type: 'm.room.message', content: { body: 'x' }, origin: 'remote',
    origin_server_ts: 5, depth: 3, prev_events: [['$p:remote', {}]], auth_events: [['$a:remote', {}]],
  };
  const event: JsonObject = { ...base };
  for (const [key, value] of Object.entries(overrides)) {
    if (value === undefined) delete event[key];
    else event[key] = value;
  }
  const hashed: JsonObject = { ...event, hashes: { sha256: contentHash(event, v1) } };
  const signatures: Record<string, Record<string, string>> = {};
  for (const server of signers) Object.assign(signatures, signJson(redactPdu(hashed, '1'), signerFor(server)).signatures);
  return { ...hashed, signatures };
}
