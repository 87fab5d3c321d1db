import { describe, expect, it } from 'vitest';
import { assertEventSize, MAX_EVENT_BYTES, newEventId, rowFromEvent, toClientEvent, type StoredEvent } from '../../src/rooms/events.js';

const NOW = Date.parse('2026-11-23T00:00:00Z');

function message(body: string, overrides: Partial<StoredEvent> = {}): StoredEvent {
  return {
    stream: 1, eventId: newEventId(NOW), roomId: '!room:test.local', type: 'm.room.message', stateKey: undefined,
    sender: '@alice:test.local', originServerTs: NOW, content: { msgtype: 'm.text', body }, replacesState: undefined,
    prevContent: undefined, prevSender: undefined, redacts: undefined, redactedBy: undefined, historyVisibility: 'shared',
    txnDeviceId: undefined, txnScope: undefined, txnId: undefined, ...overrides,
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
  });
});
