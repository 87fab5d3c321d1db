import { describe, expect, it } from 'vitest';
import { assertEventSize, MAX_EVENT_BYTES, rowFromEvent, toClientEvent, type StoredEvent } from '../../src/rooms/events.js';

const NOW = Date.parse('2026-11-23T00:00:00Z');

function message(body: string, overrides: Partial<StoredEvent> = {}): StoredEvent {
  return {
    stream: 1, eventId: '$' + 'x'.repeat(43), roomId: '!room:test.local', type: 'm.room.message', stateKey: undefined,
    sender: '@alice:test.local', originServerTs: NOW, content: { msgtype: 'm.text', body }, replacesState: undefined,
    prevContent: undefined, prevSender: undefined, redacts: undefined, redactedBy: undefined, historyVisibility: 'shared',
    txnDeviceId: undefined, txnScope: undefined, txnId: undefined, depth: 1, prevEvents: [], authEvents: [], pduExtra: undefined,
    stateGroup: undefined, outlier: false, rejected: undefined, softFailed: false, ...overrides,
  };
}

/** The size the spec's limit is about: the client form without `unsigned`. */
function serializedBytes(event: StoredEvent): number {
  return Buffer.byteLength(JSON.stringify({ ...toClientEvent(event, { now: NOW }), unsigned: undefined }), 'utf8');
}

describe('assertEventSize', () => {
  it('accepts an event of exactly 64 KiB and refuses one byte more', () => {
    const base = serializedBytes(message(''));
    const fits = message('x'.repeat(MAX_EVENT_BYTES - base));
    expect(serializedBytes(fits)).toBe(MAX_EVENT_BYTES);
    expect(() => assertEventSize(fits, NOW)).not.toThrow();
    const over = message('x'.repeat(MAX_EVENT_BYTES - base + 1));
    expect(() => assertEventSize(over, NOW)).toThrow(/too large/);
  });

  it('counts escapes and fields outside the content, where a small content cannot decide', () => {
    // A state key of control characters: each is 6 bytes once escaped.
    const event = message('hi', { type: 'm.room.topic', stateKey: '\u0001'.repeat(11_000) });
    expect(serializedBytes(event)).toBeGreaterThan(MAX_EVENT_BYTES);
    expect(() => assertEventSize(event, NOW)).toThrow(/too large/);
  });

  it('writes the row with the content it measured', () => {
    const event = message('a "quoted" body');
    assertEventSize(event, NOW);
    expect(JSON.parse(rowFromEvent(event).content)).toEqual(event.content);
    // The measured JSON is used once; a later row is serialized afresh.
    expect(JSON.parse(rowFromEvent(event).content)).toEqual(event.content);
  });

  it('never lets through an event over the limit, whatever its strings hold (random nasty strings)', () => {
    const nasty = ['"', '\\', '\n', '\u0000', '\u001f', '\u2028', '\ud800', '\udfff', '😀', 'é', 'x', '<', '\u007f'];
    let seed = 7;
    // mulberry32: a small seeded generator, so a failure can be replayed.
    const random = (n: number): number => {
      seed = (seed + 0x6d2b79f5) | 0;
      let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return (((t ^ (t >>> 14)) >>> 0) % n);
    };
    const text = (length: number): string => Array.from({ length }, () => nasty[random(nasty.length)]).join('');
    const outcomes = { over: 0, within: 0 };
    for (let i = 0; i < 300; i++) {
      const event = message(text(random(30_000)), {
        type: `m.${text(random(40))}`,
        stateKey: random(2) ? text(random(3_000)) : undefined,
        redacts: random(4) === 0 ? `$${text(random(200))}` : undefined,
      });
      const exact = serializedBytes(event);
      if (exact > MAX_EVENT_BYTES) expect(() => assertEventSize(event, NOW), `case ${i}`).toThrow(/too large/);
      else expect(() => assertEventSize(event, NOW), `case ${i}`).not.toThrow();
      outcomes[exact > MAX_EVENT_BYTES ? 'over' : 'within']++;
    }
    // Both sides of the limit were tried.
    expect(outcomes.over).toBeGreaterThan(20);
    expect(outcomes.within).toBeGreaterThan(20);
  });
});
