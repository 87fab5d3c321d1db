/**
 * Looks up whether a transaction id was used already (a retried send), with the lookups of
 * concurrent requests sharing one query: while one query is out, the lookups that arrive wait and
 * go together in the next. On PostgreSQL a query is a round trip and a statement the server
 * parses and plans; ten senders at once made ten of them per group commit, now one or two. A
 * lone lookup goes at once, as before.
 */
import type { EventRow, Storage } from '../storage/index.js';

export interface TxnKey {
  sender: string;
  deviceId: string;
  scope: string;
  txnId: string;
}

/** Lookups per query: each is four conditions of an OR. */
const LOOKUPS_PER_QUERY = 100;

interface Lookup {
  key: TxnKey;
  resolve(row: EventRow | undefined): void;
  reject(err: unknown): void;
}

/**
 * The events written with these transaction ids, by `txnKeyText`: one query per
 * LOOKUPS_PER_QUERY ids, through the store given (a transaction's, or the storage's own).
 */
export async function rowsByTxn(rooms: { findEventsByTxns(keys: readonly TxnKey[]): Promise<EventRow[]> }, keys: readonly TxnKey[]): Promise<Map<string, EventRow>> {
  const found = new Map<string, EventRow>();
  for (let start = 0; start < keys.length; start += LOOKUPS_PER_QUERY) {
    for (const row of await rooms.findEventsByTxns(keys.slice(start, start + LOOKUPS_PER_QUERY))) found.set(txnKeyOfRow(row), row);
  }
  return found;
}

export class TxnLookups {
  private waiting: Lookup[] = [];
  private running = false;

  constructor(private readonly storage: Storage) {}

  /** The event written with this transaction id, if any. */
  find(key: TxnKey): Promise<EventRow | undefined> {
    return new Promise((resolve, reject) => {
      this.waiting.push({ key, resolve, reject });
      if (!this.running) void this.run();
    });
  }

  private async run(): Promise<void> {
    this.running = true;
    while (this.waiting.length > 0) {
      const lookups = this.waiting.splice(0, LOOKUPS_PER_QUERY);
      try {
        if (lookups.length === 1) {
          const { key } = lookups[0]!;
          lookups[0]!.resolve(await this.storage.rooms.findEventByTxn(key.sender, key.deviceId, key.scope, key.txnId));
          continue;
        }
        const found = await rowsByTxn(this.storage.rooms, lookups.map((lookup) => lookup.key));
        for (const lookup of lookups) lookup.resolve(found.get(txnKeyText(lookup.key)));
      } catch (err) {
        for (const lookup of lookups) lookup.reject(err);
      }
    }
    this.running = false;
  }
}

/** A transaction id's key as one string (NUL cannot be in any of its parts on PostgreSQL, nor in user ids). */
export function txnKeyText(txn: TxnKey): string {
  return `${txn.sender}\u0000${txn.deviceId}\u0000${txn.scope}\u0000${txn.txnId}`;
}

/** The key of the transaction id an event row was written with. */
export function txnKeyOfRow(row: EventRow): string {
  return txnKeyText({ sender: row.sender, deviceId: row.txn_device_id ?? '', scope: row.txn_scope ?? '', txnId: row.txn_id ?? '' });
}
