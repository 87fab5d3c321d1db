/**
 * The bridge user's crypto device: the Matrix Rust SDK's crypto (`@matrix-org/matrix-sdk-crypto-wasm`,
 * its `OlmMachine`) with its store kept in the bridge's database. No Olm or Megolm is written
 * here: this module hands the machine what the homeserver delivers (to-device messages, device
 * list changes, one-time key counts), sends what the machine asks to send, decrypts the room
 * events it is given and encrypts the bridge's messages for a room's members' devices.
 *
 * Every call into the machine runs alone (one queue), and what it changed in the store is
 * written to the database before a request it produced leaves the process and before the sync
 * position that brought its input is committed (`changes`/`persist`), so a restart resumes with
 * the same device, the same sessions and every room key it had.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import type { FastifyBaseLogger } from 'fastify';
import type { JsonObject } from '../../rooms/events.js';
import type { BridgeStorage, BridgeStore } from '../../storage/bridge-store.js';
import { PersistedIndexedDb, type Changes, type DatabaseSchema } from './indexeddb.js';
import { loadOrCreateKeyFile, newStoreKey, openStoreKey, sealStoreKey } from './store-key.js';

type Wasm = typeof import('@matrix-org/matrix-sdk-crypto-wasm');
type OlmMachine = import('@matrix-org/matrix-sdk-crypto-wasm').OlmMachine;

const DEVICE_ID_KEY = 'crypto_device_id';
const STORE_KEY_KEY = 'crypto_store_key_sealed';
const SCHEMA_KEY = 'crypto_store_schema';
/** `pending` from the moment the cross-signing keys are made until the homeserver took them, then `uploaded`. */
const CROSS_SIGNING_KEY = 'crypto_cross_signing';
/** How the bridge's device is named in people's device lists. */
export const BRIDGE_DEVICE_NAME = 'Bridge (webhooks and feeds)';

/** What the crypto device asks of the homeserver: its key and to-device endpoints, as the bridge's device. */
export type CryptoRequest =
  | { kind: 'keys_upload'; body: JsonObject }
  | { kind: 'keys_query'; body: JsonObject }
  | { kind: 'keys_claim'; body: JsonObject }
  | { kind: 'signatures_upload'; body: JsonObject }
  | { kind: 'signing_keys_upload'; body: JsonObject }
  | { kind: 'to_device'; eventType: string; txnId: string; body: JsonObject };

export interface CryptoTransport {
  /** Sends a request as the bridge's crypto device; resolves with the homeserver's JSON answer. */
  cryptoRequest(request: CryptoRequest): Promise<JsonObject>;
}

/** What a sync (or an appservice transaction) brought for the device. */
export interface DeviceDelivery {
  toDevice: JsonObject[];
  changed: string[];
  left: string[];
  oneTimeKeyCounts: Record<string, number>;
  /** Undefined when the homeserver did not say (then the SDK does not upload a fallback key on that basis). */
  unusedFallbackKeyTypes: string[] | undefined;
}

/** A room event decrypted: its clear type and content. */
export interface Decrypted {
  type: string;
  content: JsonObject;
}

/** Why an event could not be decrypted: `missing-key` may still come; `withheld` says the sender refused. */
export interface DecryptionFailure {
  reason: 'missing-key' | 'withheld' | 'other';
  message: string;
}

export interface CryptoDeviceOptions {
  userId: string;
  storage: BridgeStorage;
  transport: CryptoTransport;
  /** The key file that seals the store key; null: a key in memory (an in-memory database). */
  keyPath: string | null;
  log: FastifyBaseLogger;
}

let wasmLoaded: Promise<Wasm> | undefined;

/** The WebAssembly module, loaded once per process on first use (a start without the bridge never pays for it). */
function loadWasm(): Promise<Wasm> {
  wasmLoaded ??= import('@matrix-org/matrix-sdk-crypto-wasm').then(async (wasm) => {
    await wasm.initAsync();
    // The SDK's own log goes to the console, beside the server's JSON lines: errors only. What
    // matters of its warnings (a message it cannot decrypt) the bridge logs itself.
    if (wasm.Tracing.isAvailable()) new wasm.Tracing(wasm.LoggerLevel.Error).turnOn();
    return wasm;
  });
  return wasmLoaded;
}

export class CryptoDevice {
  readonly userId: string;
  private wasm!: Wasm;
  private machine!: OlmMachine;
  private db!: PersistedIndexedDb;
  private id = '';
  private queue: Promise<unknown> = Promise.resolve();
  private closed = false;

  constructor(private readonly options: CryptoDeviceOptions) {
    this.userId = options.userId;
  }

  get deviceId(): string {
    return this.id;
  }

  get identityKeys(): { ed25519: string; curve25519: string } {
    const keys = this.machine.identityKeys;
    return { ed25519: keys.ed25519.toBase64(), curve25519: keys.curve25519.toBase64() };
  }

  /**
   * Opens the device: the one kept in the database when its sealed key opens, else a new one
   * (first start, or the key file was lost: logged, as people will see a new device).
   */
  async open(): Promise<void> {
    const { storage, log } = this.options;
    this.wasm = await loadWasm();
    const fileKey = loadOrCreateKeyFile(this.options.keyPath);
    let deviceId = await storage.bridge.getValue(DEVICE_ID_KEY);
    const sealed = await storage.bridge.getValue(STORE_KEY_KEY);
    let storeKey = deviceId !== undefined && sealed !== undefined ? openStoreKey(fileKey, sealed) : undefined;
    let schemas: DatabaseSchema[] = [];
    if (deviceId !== undefined && storeKey === undefined) {
      log.error({ device: deviceId }, 'the bridge’s crypto key file does not open its crypto store (another key file?): a new crypto device is made, and old encrypted messages cannot be read by the bridge');
    }
    if (deviceId === undefined || storeKey === undefined) {
      deviceId = `BRIDGE${randomBytes(5).toString('hex').toUpperCase()}`;
      storeKey = newStoreKey();
      const sealedKey = sealStoreKey(fileKey, storeKey);
      const id = deviceId;
      await storage.transaction(async ({ bridge }) => {
        await bridge.deleteAllCryptoRecords();
        await bridge.setValue(SCHEMA_KEY, '[]');
        await bridge.setValue(STORE_KEY_KEY, sealedKey);
        await bridge.setValue(DEVICE_ID_KEY, id);
      });
    } else {
      schemas = JSON.parse((await storage.bridge.getValue(SCHEMA_KEY)) ?? '[]') as DatabaseSchema[];
    }
    this.id = deviceId;
    // A name no other device in this process uses: the fake IndexedDB is one per process.
    this.db = new PersistedIndexedDb(`bridge-crypto-${randomUUID()}`);
    const records = schemas.length === 0 ? [] : await storage.bridge.cryptoRecords();
    await this.db.restore(
      schemas,
      records.map((row) => ({ database: row.database, objectStore: row.object_store, key: row.record_key, value: row.value })),
    );
    const handle = await this.wasm.StoreHandle.openWithKey(this.db.prefix, storeKey);
    storeKey.fill(0);
    this.machine = (await this.wasm.OlmMachine.initFromStore(new this.wasm.UserId(this.userId), new this.wasm.DeviceId(deviceId), handle)) as OlmMachine;
    handle.free();
    await this.exclusive(() => this.persist());
  }

  /** Uploads the device's keys (and whatever else the machine has to say); cross-signs the device once. */
  async start(): Promise<void> {
    await this.exclusive(() => this.sendOutgoing());
    await this.exclusive(() => this.crossSign());
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.queue.catch(() => undefined);
    this.machine?.close();
    await this.db?.close();
  }

  /**
   * Takes what a sync brought for the device, and writes what that changed in the store before
   * resolving: the caller commits the sync position after, so a crash in between brings the
   * batch again rather than losing a room key.
   */
  async receive(delivery: DeviceDelivery): Promise<void> {
    await this.exclusive(async () => {
      const { wasm } = this;
      const lists = new wasm.DeviceLists(
        delivery.changed.map((userId) => new wasm.UserId(userId)),
        delivery.left.map((userId) => new wasm.UserId(userId)),
      );
      const counts = new Map(Object.entries(delivery.oneTimeKeyCounts));
      const fallback = delivery.unusedFallbackKeyTypes === undefined ? undefined : new Set(delivery.unusedFallbackKeyTypes);
      await this.machine.receiveSyncChanges(JSON.stringify(delivery.toDevice), lists, counts, fallback);
      await this.persist();
    });
  }

  /** Sends what the machine has queued (key uploads, key queries, to-device messages). */
  async flushOutgoing(): Promise<void> {
    await this.exclusive(() => this.sendOutgoing());
  }

  /** Decrypts a room event; a failure says whether its key may still come. */
  async decrypt(roomId: string, event: JsonObject): Promise<Decrypted | DecryptionFailure> {
    return this.exclusive(async () => {
      const { wasm } = this;
      try {
        const result = (await this.machine.decryptRoomEvent(JSON.stringify(event), new wasm.RoomId(roomId), new wasm.DecryptionSettings(wasm.TrustRequirement.Untrusted))) as { event: string };
        const clear = JSON.parse(result.event) as JsonObject;
        return { type: String(clear.type), content: (clear.content ?? {}) as JsonObject };
      } catch (err) {
        if (err instanceof wasm.MegolmDecryptionError) {
          if (err.maybe_withheld !== undefined) return { reason: 'withheld', message: err.maybe_withheld };
          if (err.code === wasm.DecryptionErrorCode.MissingRoomKey || err.code === wasm.DecryptionErrorCode.UnknownMessageIndex) return { reason: 'missing-key', message: err.description };
          return { reason: 'other', message: err.description };
        }
        return { reason: 'other', message: err instanceof Error ? err.message : String(err) };
      }
    });
  }

  /**
   * Encrypts a message for the room's members' devices: their devices are queried, Olm sessions
   * made where missing, the room key shared with them, then the content encrypted.
   */
  async encrypt(roomId: string, type: string, content: JsonObject, members: readonly string[], encryption: JsonObject): Promise<JsonObject> {
    return this.exclusive(async () => {
      const { wasm } = this;
      const users = () => members.map((userId) => new wasm.UserId(userId));
      await this.machine.updateTrackedUsers(users());
      // Key queries for members not known yet (and anything else queued) go first.
      await this.sendOutgoing();
      const claim = (await this.machine.getMissingSessions(users())) as InstanceType<Wasm['KeysClaimRequest']> | undefined;
      if (claim) await this.send(claim);
      const settings = new wasm.EncryptionSettings();
      if (typeof encryption.rotation_period_ms === 'number') settings.rotationPeriod = BigInt(Math.max(3_600_000, Math.trunc(encryption.rotation_period_ms))) * 1000n;
      if (typeof encryption.rotation_period_msgs === 'number') settings.rotationPeriodMessages = BigInt(Math.max(1, Math.trunc(encryption.rotation_period_msgs)));
      const shares = (await this.machine.shareRoomKey(new wasm.RoomId(roomId), users(), settings)) as Array<InstanceType<Wasm['ToDeviceRequest']>>;
      for (const share of shares) await this.send(share);
      const encrypted = JSON.parse((await this.machine.encryptRoomEvent(new wasm.RoomId(roomId), type, JSON.stringify(content))) as string) as JsonObject;
      await this.persist();
      return encrypted;
    });
  }

  // ---- inside the queue ----

  private exclusive<T>(work: () => Promise<T>): Promise<T> {
    const next = this.queue.catch(() => undefined).then(() => {
      if (this.closed) throw new Error('the bridge’s crypto device is closed');
      return work();
    });
    this.queue = next;
    return next;
  }

  private async persist(): Promise<void> {
    const changes = await this.db.flush();
    if (changes.schemas === undefined && changes.clearedStores.length === 0 && changes.upserts.length === 0 && changes.deletes.length === 0) return;
    await this.options.storage.transaction(async ({ bridge }) => writeChanges(bridge, changes));
    if (changes.schemas) this.db.schemasPersisted(changes.schemas);
  }

  private async sendOutgoing(): Promise<void> {
    // The machine may queue more as answers come (a query answer can queue nothing; an upload can).
    for (let round = 0; round < 10; round++) {
      const requests = (await this.machine.outgoingRequests()) as OutgoingRequest[];
      if (requests.length === 0) return;
      for (const request of requests) await this.send(request);
    }
  }

  /** Persists, sends one request, hands the answer to the machine, persists again. */
  private async send(request: OutgoingRequest): Promise<void> {
    const { wasm } = this;
    await this.persist();
    const body = JSON.parse(request.body) as JsonObject;
    let answer: JsonObject;
    if (request instanceof wasm.KeysUploadRequest) answer = await this.options.transport.cryptoRequest({ kind: 'keys_upload', body });
    else if (request instanceof wasm.KeysQueryRequest) answer = await this.options.transport.cryptoRequest({ kind: 'keys_query', body });
    else if (request instanceof wasm.KeysClaimRequest) answer = await this.options.transport.cryptoRequest({ kind: 'keys_claim', body });
    else if (request instanceof wasm.SignatureUploadRequest) answer = await this.options.transport.cryptoRequest({ kind: 'signatures_upload', body });
    else if (request instanceof wasm.ToDeviceRequest) answer = await this.options.transport.cryptoRequest({ kind: 'to_device', eventType: request.event_type, txnId: request.txn_id, body });
    else {
      // Room messages (verification) and key backups: the bridge does neither.
      this.options.log.debug({ type: request.type }, 'bridge crypto: a request of a kind the bridge does not send, marked as done');
      answer = {};
    }
    if (request.id !== undefined) await this.machine.markRequestAsSent(request.id, request.type, JSON.stringify(answer));
    await this.persist();
  }

  /**
   * Cross-signing: the bridge user gets its own identity (master, self-signing and user-signing
   * keys, kept in the store) and signs its device with it, so people's clients show the device as
   * its owner's own. Done once the homeserver took the keys; until then (it refused them) tried
   * again at each start, with new keys, as nobody has seen the old ones.
   */
  private async crossSign(): Promise<void> {
    const { storage, log, transport } = this.options;
    const status = (await this.machine.crossSigningStatus()) as { hasMaster: boolean; hasSelfSigning: boolean };
    const state = await storage.bridge.getValue(CROSS_SIGNING_KEY);
    if (status.hasMaster && status.hasSelfSigning && state !== 'pending') {
      if (state === 'uploaded') return;
      // Keys made by a version that did not record the upload: uploaded if the homeserver has the master key.
      let published: boolean;
      try {
        const answer = await transport.cryptoRequest({ kind: 'keys_query', body: { device_keys: { [this.userId]: [] } } });
        published = ((answer.master_keys ?? {}) as JsonObject)[this.userId] !== undefined;
      } catch (err) {
        log.warn(errorFields(err), 'the bridge could not check its cross-signing keys on the homeserver; tried again at the next start');
        return;
      }
      if (published) {
        await storage.bridge.setValue(CROSS_SIGNING_KEY, 'uploaded');
        return;
      }
    }
    const requests = (await this.machine.bootstrapCrossSigning(true)) as {
      uploadKeysRequest: OutgoingRequest | undefined;
      uploadSigningKeysRequest: { body: string };
      uploadSignaturesRequest: OutgoingRequest;
    };
    await storage.bridge.setValue(CROSS_SIGNING_KEY, 'pending');
    await this.persist();
    if (requests.uploadKeysRequest) await this.send(requests.uploadKeysRequest);
    try {
      await transport.cryptoRequest({ kind: 'signing_keys_upload', body: JSON.parse(requests.uploadSigningKeysRequest.body) as JsonObject });
    } catch (err) {
      // Appservice users of some homeservers cannot (Synapse asks for user-interactive auth): the device still works, unsigned.
      log.warn(errorFields(err), 'the homeserver refused the bridge’s cross-signing keys; its device stays unsigned, and the upload is tried again at the next start');
      return;
    }
    await storage.bridge.setValue(CROSS_SIGNING_KEY, 'uploaded');
    await this.send(requests.uploadSignaturesRequest);
  }
}

/** What to log of a homeserver's refusal: its status, errcode and error, no stack. */
function errorFields(err: unknown): { status?: number; errcode?: string; error: string } {
  const fields = err as { status?: unknown; errcode?: unknown };
  return {
    ...(typeof fields?.status === 'number' ? { status: fields.status } : {}),
    ...(typeof fields?.errcode === 'string' ? { errcode: fields.errcode } : {}),
    error: err instanceof Error ? err.message : String(err),
  };
}

interface OutgoingRequest {
  readonly id?: string;
  readonly type: number;
  readonly body: string;
}

async function writeChanges(bridge: BridgeStore, changes: Changes): Promise<void> {
  if (changes.clearedStores.length > 0) await bridge.clearCryptoStores(changes.clearedStores);
  if (changes.deletes.length > 0) await bridge.deleteCryptoRecords(changes.deletes);
  if (changes.upserts.length > 0) {
    await bridge.upsertCryptoRecords(changes.upserts.map((record) => ({ database: record.database, object_store: record.objectStore, record_key: record.key, value: record.value })));
  }
  if (changes.schemas) await bridge.setValue(SCHEMA_KEY, JSON.stringify(changes.schemas));
}

/** What a `/sync` answer brought for the crypto device. */
export function deviceDeliveryOf(body: JsonObject): DeviceDelivery {
  const toDevice = ((body.to_device as JsonObject | undefined)?.events ?? []) as JsonObject[];
  const lists = (body.device_lists ?? {}) as { changed?: unknown; left?: unknown };
  const strings = (value: unknown) => (Array.isArray(value) ? value.filter((item): item is string => typeof item === 'string') : []);
  const counts = (body.device_one_time_keys_count ?? {}) as Record<string, number>;
  const fallback = body.device_unused_fallback_key_types;
  const delivery: DeviceDelivery = {
    toDevice: Array.isArray(toDevice) ? toDevice : [],
    changed: strings(lists.changed),
    left: strings(lists.left),
    oneTimeKeyCounts: typeof counts === 'object' && counts !== null ? counts : {},
    unusedFallbackKeyTypes: Array.isArray(fallback) ? strings(fallback) : undefined,
  };
  return delivery;
}

/**
 * Whether a `/sync` answer brought the device nothing since `previous` (the last answer handed on):
 * no to-device message, no device-list change, the same one-time key counts and fallback keys.
 * Such an answer need not reach the SDK, nor cost a write (an idle long poll returns every 30 s).
 */
export function isQuietDelivery(delivery: DeviceDelivery, previous: DeviceDelivery | undefined): boolean {
  if (!previous || delivery.toDevice.length > 0 || delivery.changed.length > 0 || delivery.left.length > 0) return false;
  return JSON.stringify([delivery.oneTimeKeyCounts, delivery.unusedFallbackKeyTypes]) === JSON.stringify([previous.oneTimeKeyCounts, previous.unusedFallbackKeyTypes]);
}
