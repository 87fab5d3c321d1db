/**
 * Concurrent sends look their transaction ids up together: one query while another is out, each
 * lookup answered with its own row.
 */
import { describe, expect, it } from 'vitest';
import type { EventRow, Storage } from '../../src/storage/index.js';
import { TxnLookups, type TxnKey } from '../../src/rooms/txn-lookups.js';

function row(key: TxnKey, eventId: string): EventRow {
  return { event_id: eventId, sender: key.sender, txn_device_id: key.deviceId, txn_scope: key.scope, txn_id: key.txnId } as EventRow;
}

/** A store holding `stored` rows, counting the queries it answers; `fail` makes the next one fail. */
function fakeStorage(stored: EventRow[]) {
  const queries: number[] = [];
  const state = { fail: false };
  const matches = (r: EventRow, k: TxnKey) => r.sender === k.sender && r.txn_device_id === k.deviceId && r.txn_scope === k.scope && r.txn_id === k.txnId;
  const answer = async <T>(size: number, value: () => T): Promise<T> => {
    queries.push(size);
    await new Promise((resolve) => setTimeout(resolve, 5));
    if (state.fail) {
      state.fail = false;
      throw new Error('connection lost');
    }
    return value();
  };
  const storage = {
    rooms: {
      findEventByTxn: (sender: string, deviceId: string, scope: string, txnId: string) =>
        answer(1, () => stored.find((r) => matches(r, { sender, deviceId, scope, txnId }))),
      findEventsByTxns: (keys: TxnKey[]) => answer(keys.length, () => stored.filter((r) => keys.some((k) => matches(r, k)))),
    },
  } as unknown as Storage;
  return { storage, queries, state };
}

const key = (txnId: string, sender = '@bot:example.org'): TxnKey => ({ sender, deviceId: 'DEV', scope: 'send!room:example.orgm.room.message', txnId });

describe('TxnLookups', () => {
  it('sends a lone lookup at once and gathers the ones that arrive while it is out', async () => {
    const { storage, queries } = fakeStorage([row(key('b'), '$b'), row(key('d', '@other:example.org'), '$d')]);
    const lookups = new TxnLookups(storage);
    const results = await Promise.all([lookups.find(key('a')), lookups.find(key('b')), lookups.find(key('c')), lookups.find(key('d')), lookups.find(key('d', '@other:example.org'))]);
    expect(results.map((r) => r?.event_id)).toEqual([undefined, '$b', undefined, undefined, '$d']);
    expect(queries).toEqual([1, 4]);
  });

  it('fails the lookups of a failed query, and answers the next ones', async () => {
    const { storage, queries, state } = fakeStorage([row(key('x'), '$x')]);
    const lookups = new TxnLookups(storage);
    state.fail = true;
    const failed = lookups.find(key('x'));
    const after = lookups.find(key('x'));
    await expect(failed).rejects.toThrow('connection lost');
    expect((await after)?.event_id).toBe('$x');
    expect((await lookups.find(key('x')))?.event_id).toBe('$x');
    expect(queries).toEqual([1, 1, 1]);
  });
});
