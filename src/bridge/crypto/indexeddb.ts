/**
 * The IndexedDB that the Matrix Rust SDK's crypto store (WebAssembly) needs, made durable in Node.
 *
 * The SDK keeps its store (the device's keys, Olm and Megolm sessions, tracked users and devices)
 * only in IndexedDB, which Node lacks. fake-indexeddb provides a complete one in memory; this
 * module makes it the global `indexedDB` and notes every record written to it (put, add, delete,
 * clear, and cursor updates and deletes), so the bridge can copy exactly what changed into its own
 * database (`flush`) and put it back at the next start (`restore`), before the SDK opens the store.
 * The values are what the SDK wrote: encrypted by it with the store key.
 *
 * One fake IndexedDB serves the whole process; each crypto device uses databases under a name of
 * its own, and only those are tracked for it.
 */
import { serialize, deserialize } from 'node:v8';
import { IDBCursor as FakeCursor, IDBFactory as FakeFactory, IDBKeyRange as FakeKeyRange, IDBObjectStore as FakeObjectStore } from 'fake-indexeddb';

/** The few IndexedDB shapes used here (the project compiles without the DOM library). */
interface Req<T> {
  result: T;
  error: unknown;
  onsuccess: (() => void) | null;
  onerror: (() => void) | null;
  addEventListener(type: 'success', listener: () => void): void;
}
interface ObjectStore {
  name: string;
  keyPath: string | string[] | null;
  autoIncrement: boolean;
  indexNames: Iterable<string>;
  transaction: { db: { name: string } };
  index(name: string): { keyPath: string | string[]; unique: boolean; multiEntry: boolean };
  get(key: unknown): Req<unknown>;
  getAll(): Req<unknown[]>;
  getAllKeys(): Req<unknown[]>;
  put(value: unknown, key?: unknown): Req<unknown>;
  createIndex(name: string, keyPath: string | string[], options: { unique: boolean; multiEntry: boolean }): unknown;
}
interface Transaction {
  objectStore(name: string): ObjectStore;
  oncomplete: (() => void) | null;
  onerror: (() => void) | null;
  onabort: (() => void) | null;
  error: unknown;
}
interface Database {
  name: string;
  version: number;
  objectStoreNames: Iterable<string>;
  transaction(stores: string[], mode: 'readonly' | 'readwrite'): Transaction;
  createObjectStore(name: string, options: { keyPath: string | string[] | null; autoIncrement: boolean }): ObjectStore;
  close(): void;
  onversionchange: (() => void) | null;
}
interface OpenRequest extends Req<Database> {
  onupgradeneeded: (() => void) | null;
  onblocked: (() => void) | null;
  transaction: Transaction | null;
}
interface Factory {
  open(name: string, version?: number): OpenRequest;
  deleteDatabase(name: string): Req<unknown>;
  databases(): Promise<Array<{ name?: string; version?: number }>>;
}

/** How an object store is made: enough to make it again before its records are put back. */
export interface StoreSchema {
  name: string;
  keyPath: string | string[] | null;
  autoIncrement: boolean;
  indexes: Array<{ name: string; keyPath: string | string[]; unique: boolean; multiEntry: boolean }>;
}

export interface DatabaseSchema {
  /** The database's name after the device's prefix (the SDK uses two: `::matrix-sdk-crypto` and `::matrix-sdk-crypto-meta`). */
  suffix: string;
  version: number;
  stores: StoreSchema[];
}

/** A record as kept in the bridge's database: key and value serialised (v8), base64. */
export interface PersistedRecord {
  database: string;
  objectStore: string;
  key: string;
  value: string;
}

/** What changed since the last flush: records to write or delete, and stores to empty first. */
export interface Changes {
  schemas: DatabaseSchema[] | undefined;
  clearedStores: Array<{ database: string; objectStore: string }>;
  upserts: PersistedRecord[];
  deletes: Array<{ database: string; objectStore: string; key: string }>;
}

/** Per database name, per object store: the keys written since the last flush, or `all`. */
type Dirty = Map<string, Map<string, { all: boolean; keys: Map<string, unknown> }>>;

const trackers = new Map<string, Dirty>();
let installed: Factory | undefined;

/** The prefix of the databases `name` owns, when a tracker follows it. */
function trackerFor(databaseName: string): { prefix: string; dirty: Dirty } | undefined {
  for (const [prefix, dirty] of trackers) if (databaseName.startsWith(prefix)) return { prefix, dirty };
  return undefined;
}

function mark(store: ObjectStore, key: unknown, all = false): void {
  const tracker = trackerFor(store.transaction.db.name);
  if (!tracker) return;
  let stores = tracker.dirty.get(store.transaction.db.name);
  if (!stores) tracker.dirty.set(store.transaction.db.name, (stores = new Map()));
  let entry = stores.get(store.name);
  if (!entry) stores.set(store.name, (entry = { all: false, keys: new Map() }));
  if (all) entry.all = true;
  else entry.keys.set(encode(key), key);
}

const isKeyRange = (value: unknown): boolean => value instanceof (FakeKeyRange as unknown as new () => object);

/**
 * Makes fake-indexeddb the process's `indexedDB` (once) and notes writes. Wrapping the object
 * store's and the cursor's writing methods is the one way to learn what changed: IndexedDB has
 * no change feed.
 */
export function installIndexedDb(): Factory {
  if (installed) return installed;
  const factory = new (FakeFactory as unknown as new () => Factory)();
  const global = globalThis as Record<string, unknown>;
  global.indexedDB = factory;
  global.IDBKeyRange = FakeKeyRange;

  const storeProto = (FakeObjectStore as unknown as { prototype: Record<string, (...args: unknown[]) => unknown> }).prototype;
  for (const method of ['put', 'add'] as const) {
    const original = storeProto[method]!;
    storeProto[method] = function (this: ObjectStore, ...args: unknown[]) {
      const request = original.apply(this, args) as Req<unknown>;
      if (trackerFor(this.transaction.db.name)) request.addEventListener('success', () => mark(this, request.result));
      return request;
    };
  }
  const originalDelete = storeProto.delete!;
  storeProto.delete = function (this: ObjectStore, query: unknown) {
    const request = originalDelete.call(this, query);
    // A range could be anything: the whole store is read again.
    mark(this, query, isKeyRange(query));
    return request;
  };
  const originalClear = storeProto.clear!;
  storeProto.clear = function (this: ObjectStore) {
    const request = originalClear.call(this);
    mark(this, undefined, true);
    return request;
  };

  const cursorProto = (FakeCursor as unknown as { prototype: Record<string, (...args: unknown[]) => unknown> }).prototype;
  for (const method of ['update', 'delete'] as const) {
    const original = cursorProto[method]!;
    cursorProto[method] = function (this: { source: ObjectStore | { objectStore: ObjectStore }; primaryKey: unknown }, ...args: unknown[]) {
      const request = original.apply(this, args);
      const store = 'objectStore' in this.source ? this.source.objectStore : this.source;
      mark(store, this.primaryKey);
      return request;
    };
  }
  installed = factory;
  return factory;
}

function encode(value: unknown): string {
  return serialize(value).toString('base64');
}

function decode(text: string): unknown {
  return deserialize(Buffer.from(text, 'base64'));
}

function done<T>(request: Req<T>): Promise<T> {
  return new Promise((resolve, reject) => {
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => reject(request.error instanceof Error ? request.error : new Error('IndexedDB request failed'));
  });
}

function completed(transaction: Transaction): Promise<void> {
  return new Promise((resolve, reject) => {
    transaction.oncomplete = () => resolve();
    transaction.onerror = () => reject(transaction.error instanceof Error ? transaction.error : new Error('IndexedDB transaction failed'));
    transaction.onabort = () => reject(transaction.error instanceof Error ? transaction.error : new Error('IndexedDB transaction aborted'));
  });
}

/**
 * The databases of one crypto device, under `prefix` (unique in the process): put back from
 * persisted records, then followed so that `flush` hands over what changed.
 */
export class PersistedIndexedDb {
  private readonly factory: Factory;
  private readonly dirty: Dirty = new Map();
  private lastSchemas = '';
  private currentSchemas: DatabaseSchema[] | undefined;
  /** Connections of our own, kept between flushes; closed when the SDK upgrades a database. */
  private readonly connections = new Map<string, Database>();

  constructor(readonly prefix: string) {
    this.factory = installIndexedDb();
    trackers.set(prefix, this.dirty);
  }

  /** Makes the databases again as they were, with their records, before the SDK opens them. */
  async restore(schemas: readonly DatabaseSchema[], records: readonly PersistedRecord[]): Promise<void> {
    for (const schema of schemas) {
      const name = this.prefix + schema.suffix;
      const request = this.factory.open(name, schema.version);
      request.onupgradeneeded = () => {
        const db = request.result;
        for (const store of schema.stores) {
          const created = db.createObjectStore(store.name, { keyPath: store.keyPath, autoIncrement: store.autoIncrement });
          for (const index of store.indexes) created.createIndex(index.name, index.keyPath, { unique: index.unique, multiEntry: index.multiEntry });
        }
      };
      const db = await done(request);
      const ours = records.filter((record) => record.database === schema.suffix);
      const storeNames = schema.stores.map((store) => store.name);
      if (ours.length > 0 && storeNames.length > 0) {
        const transaction = db.transaction(storeNames, 'readwrite');
        const finished = completed(transaction);
        for (const record of ours) {
          if (!storeNames.includes(record.objectStore)) continue;
          const store = transaction.objectStore(record.objectStore);
          if (store.keyPath === null) store.put(decode(record.value), decode(record.key));
          else store.put(decode(record.value));
        }
        await finished;
      }
      db.close();
    }
    // What was just put back is not a change.
    this.dirty.clear();
    this.lastSchemas = JSON.stringify(schemas);
  }

  /**
   * What changed since the last flush, read as it now stands. Call it when the SDK is idle (after
   * its call resolved): a later write is noted and handed over by the next flush.
   */
  async flush(): Promise<Changes> {
    // Object stores change only when the SDK opens its store (an upgrade): looked at once, at the
    // first flush after that.
    this.currentSchemas ??= await this.schemas();
    // Handed over until the caller says they are persisted.
    const schemas = JSON.stringify(this.currentSchemas) === this.lastSchemas ? undefined : this.currentSchemas;
    const changes: Changes = { schemas, clearedStores: [], upserts: [], deletes: [] };
    if (this.dirty.size === 0) return changes;
    const taken = new Map(this.dirty);
    this.dirty.clear();
    for (const [databaseName, stores] of taken) {
      const suffix = databaseName.slice(this.prefix.length);
      const db = await this.connection(databaseName);
      const existing = new Set(db.objectStoreNames);
      const names = [...stores.keys()].filter((name) => existing.has(name));
      for (const name of stores.keys()) if (!existing.has(name)) changes.clearedStores.push({ database: suffix, objectStore: name });
      if (names.length === 0) continue;
      const transaction = db.transaction(names, 'readonly');
      const finished = completed(transaction);
      const reads: Array<Promise<void>> = [];
      for (const name of names) {
        const entry = stores.get(name)!;
        const store = transaction.objectStore(name);
        if (entry.all) {
          changes.clearedStores.push({ database: suffix, objectStore: name });
          reads.push(
            Promise.all([done(store.getAllKeys()), done(store.getAll())]).then(([keys, values]) => {
              keys.forEach((key, i) => changes.upserts.push({ database: suffix, objectStore: name, key: encode(key), value: encode(values[i]) }));
            }),
          );
          continue;
        }
        for (const [encoded, key] of entry.keys) {
          reads.push(
            done(store.get(key)).then((value) => {
              if (value === undefined) changes.deletes.push({ database: suffix, objectStore: name, key: encoded });
              else changes.upserts.push({ database: suffix, objectStore: name, key: encoded, value: encode(value) });
            }),
          );
        }
      }
      await Promise.all(reads);
      await finished;
    }
    return changes;
  }

  private async connection(name: string): Promise<Database> {
    const open = this.connections.get(name);
    if (open) return open;
    const db = await done(this.factory.open(name));
    db.onversionchange = () => {
      db.close();
      if (this.connections.get(name) === db) this.connections.delete(name);
    };
    this.connections.set(name, db);
    return db;
  }

  /** The schemas handed over by the last flush (or restore) are now persisted. */
  schemasPersisted(schemas: DatabaseSchema[]): void {
    this.lastSchemas = JSON.stringify(schemas);
  }

  /** Stops following and drops the databases from memory (the persisted copy stays). */
  async close(): Promise<void> {
    trackers.delete(this.prefix);
    for (const db of this.connections.values()) db.close();
    this.connections.clear();
    for (const { name } of await this.factory.databases()) {
      if (name?.startsWith(this.prefix)) await done(this.factory.deleteDatabase(name)).catch(() => undefined);
    }
  }

  private async schemas(): Promise<DatabaseSchema[]> {
    const schemas: DatabaseSchema[] = [];
    const names = (await this.factory.databases()).map((db) => db.name).filter((name): name is string => name !== undefined && name.startsWith(this.prefix));
    for (const name of names.sort()) {
      const db = await this.connection(name);
      const storeNames = [...db.objectStoreNames].sort();
      const stores: StoreSchema[] = [];
      if (storeNames.length > 0) {
        const transaction = db.transaction(storeNames, 'readonly');
        for (const storeName of storeNames) {
          const store = transaction.objectStore(storeName);
          const indexes = [...store.indexNames].sort().map((indexName) => {
            const index = store.index(indexName);
            return { name: indexName, keyPath: index.keyPath, unique: index.unique, multiEntry: index.multiEntry };
          });
          stores.push({ name: storeName, keyPath: store.keyPath, autoIncrement: store.autoIncrement, indexes });
        }
        await completed(transaction);
      }
      schemas.push({ suffix: name.slice(this.prefix.length), version: db.version, stores });
    }
    return schemas;
  }
}
