/**
 * The bridge's crypto store outside the SDK: what is written to the fake IndexedDB (put, add,
 * delete, a range delete, clear, cursor updates and deletes) comes out of `flush` as changes, and
 * a store rebuilt from them holds the same records; the store key opens only with its key file.
 */
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { installIndexedDb, PersistedIndexedDb, type Changes, type DatabaseSchema, type PersistedRecord } from '../../src/bridge/crypto/indexeddb.js';
import { loadOrCreateKeyFile, newStoreKey, openStoreKey, sealStoreKey } from '../../src/bridge/crypto/store-key.js';

/* eslint-disable @typescript-eslint/no-explicit-any */
function request<T>(req: any): Promise<T> {
  return new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result as T);
    req.onerror = () => reject(req.error);
  });
}

function transactionDone(tx: any): Promise<void> {
  return new Promise((resolve, reject) => {
    tx.oncomplete = () => resolve();
    tx.onerror = () => reject(tx.error);
  });
}

/** Applies changes to a map of persisted rows, as the bridge store does in its table. */
function apply(rows: Map<string, PersistedRecord>, changes: Changes): void {
  const id = (r: { database: string; objectStore: string; key: string }) => `${r.database}|${r.objectStore}|${r.key}`;
  for (const cleared of changes.clearedStores) for (const [key, row] of rows) if (row.database === cleared.database && row.objectStore === cleared.objectStore) rows.delete(key);
  for (const deleted of changes.deletes) rows.delete(id(deleted));
  for (const upsert of changes.upserts) rows.set(id(upsert), upsert);
}

async function dump(factory: any, name: string): Promise<Record<string, Array<[unknown, unknown]>>> {
  const db = await request<any>(factory.open(name));
  const out: Record<string, Array<[unknown, unknown]>> = {};
  for (const storeName of [...db.objectStoreNames]) {
    const store = db.transaction([storeName], 'readonly').objectStore(storeName);
    const keys = await request<unknown[]>(store.getAllKeys());
    const values = await request<unknown[]>(store.getAll());
    out[storeName] = keys.map((key, i) => [key, values[i]]);
  }
  db.close();
  return out;
}

describe('the crypto store kept in the database', () => {
  it('hands over every change and is rebuilt from them as it was', async () => {
    const factory = installIndexedDb() as any;
    const first = new PersistedIndexedDb('test-store-a');
    const name = 'test-store-a::main';
    const open = factory.open(name, 3);
    open.onupgradeneeded = () => {
      const db = open.result;
      const sessions = db.createObjectStore('sessions');
      sessions.createIndex('by_room', 'room', { unique: false, multiEntry: false });
      db.createObjectStore('inline', { keyPath: 'id' });
      db.createObjectStore('counter', { autoIncrement: true });
      db.createObjectStore('emptied');
    };
    const db = await request<any>(open);
    let tx = db.transaction(['sessions', 'inline', 'counter', 'emptied'], 'readwrite');
    tx.objectStore('sessions').put({ room: '!a', pickle: new Uint8Array([1, 2, 3]) }, ['!a', 's1']);
    tx.objectStore('sessions').put({ room: '!a', pickle: new Uint8Array([4]) }, ['!a', 's2']);
    tx.objectStore('sessions').put({ room: '!b', pickle: new Uint8Array([5]) }, ['!b', 's3']);
    tx.objectStore('inline').add({ id: 'x', value: 1 });
    tx.objectStore('inline').add({ id: 'y', value: 2 });
    tx.objectStore('counter').add({ n: 1 });
    tx.objectStore('emptied').put('gone soon', 'k');
    await transactionDone(tx);
    const rows = new Map<string, PersistedRecord>();
    let changes = await first.flush();
    expect(changes.schemas?.map((schema) => schema.suffix)).toEqual(['::main']);
    apply(rows, changes);
    first.schemasPersisted(changes.schemas!);
    expect(rows.size).toBe(7);

    // Deletes, a range delete, clear, cursor update and delete.
    tx = db.transaction(['sessions', 'inline', 'counter', 'emptied'], 'readwrite');
    tx.objectStore('sessions').delete(['!a', 's2']);
    tx.objectStore('emptied').clear();
    tx.objectStore('counter').add({ n: 2 });
    const cursorRequest = tx.objectStore('inline').openCursor();
    cursorRequest.onsuccess = () => {
      const cursor = cursorRequest.result;
      if (!cursor) return;
      if (cursor.key === 'x') cursor.update({ id: 'x', value: 10 });
      else cursor.delete();
      cursor.continue();
    };
    await transactionDone(tx);
    tx = db.transaction(['sessions'], 'readwrite');
    tx.objectStore('sessions').delete((globalThis as any).IDBKeyRange.bound(['!b'], ['!b', '\uffff']));
    await transactionDone(tx);
    db.close();
    changes = await first.flush();
    expect(changes.schemas).toBeUndefined();
    apply(rows, changes);
    // Nothing more changed: nothing to hand over.
    expect(await first.flush()).toEqual({ schemas: undefined, clearedStores: [], upserts: [], deletes: [] });

    const before = await dump(factory, name);
    expect(before.sessions!.map(([key]) => key)).toEqual([['!a', 's1']]);
    expect(before.inline).toEqual([['x', { id: 'x', value: 10 }]]);
    expect(before.emptied).toEqual([]);

    // A second store, rebuilt from the rows alone, holds the same.
    const schemas = (await new PersistedIndexedDb('test-store-a').flush()).schemas as DatabaseSchema[];
    const second = new PersistedIndexedDb('test-store-b');
    await second.restore(schemas, [...rows.values()]);
    const after = await dump(factory, 'test-store-b::main');
    expect(after).toEqual(before);
    const rebuilt = await request<any>(factory.open('test-store-b::main'));
    expect(rebuilt.version).toBe(3);
    expect([...rebuilt.transaction(['sessions'], 'readonly').objectStore('sessions').indexNames]).toEqual(['by_room']);
    rebuilt.close();
    await first.close();
    await second.close();
  });

  it('seals the store key with the key file: either alone opens nothing', () => {
    const dir = mkdtempSync(join(tmpdir(), 'bhs-crypto-key-'));
    try {
      const path = join(dir, 'keys', 'test.bridge-crypto.key');
      const fileKey = loadOrCreateKeyFile(path);
      expect(statSync(path).mode & 0o777).toBe(0o600);
      expect(loadOrCreateKeyFile(path).equals(fileKey)).toBe(true);
      const storeKey = newStoreKey();
      const sealed = sealStoreKey(fileKey, storeKey);
      expect(sealed).not.toContain(storeKey.toString('base64url'));
      expect(sealed).not.toContain(readFileSync(path, 'utf8').trim());
      expect(openStoreKey(fileKey, sealed)?.equals(storeKey)).toBe(true);
      expect(openStoreKey(loadOrCreateKeyFile(null), sealed)).toBeUndefined();
      const [version, iv, data, tag] = sealed.split('.');
      const tampered = [version, iv, data!.replace(/^./, (c) => (c === 'A' ? 'B' : 'A')), tag].join('.');
      expect(openStoreKey(fileKey, tampered)).toBeUndefined();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
