/**
 * Server keys ("Retrieving server keys"): this server's own key listing, signed, and the keys of
 * other servers, fetched from the server itself (`GET /_matrix/key/v2/server`) or, failing that,
 * from the configured notaries (`trusted_key_servers`, `POST /_matrix/key/v2/query`), checked,
 * kept in the database and in memory, and trusted no longer than `valid_until_ts` (nor more than
 * 7 days past fetching, as room versions 5+ require).
 */
import type { KeyObject } from 'node:crypto';
import type { Clock } from '../core/clock.js';
import { ed25519PublicKey, hasValidSignature, signJson, type Signer } from '../core/signed-json.js';
import type { ServerKeyRow, Storage } from '../storage/index.js';
import { FetchRefused } from '../rooms/event-source.js';
import { withDeadline, type FetchBudget, type FetchSlot } from './fetch-budget.js';
import type { FederationClient } from './http-client.js';
import type { OldVerifyKey } from './signing-key.js';

export interface KeyRingOptions {
  oldSigningKeys: Record<string, OldVerifyKey>;
  trustedKeyServers: ReadonlyArray<{ server_name: string; verify_keys?: Record<string, string> | undefined }>;
  /** How long others may cache our listing. */
  keyRefreshIntervalMs: number;
}

interface KnownKey {
  key: KeyObject;
  /** Usable to check what was signed up to this time. */
  validUntil: number;
}

/** Keys are never trusted for longer than this past fetching (room versions 5+). */
const MAX_KEY_TRUST_MS = 7 * 24 * 3_600_000;
/** A server whose keys could not be fetched is not asked again before this. */
const FAILURE_BACKOFF_MS = 60_000;
const MAX_SERVERS_IN_MEMORY = 10_000;

export class KeyRing {
  private readonly known = new Map<string, Map<string, KnownKey>>();
  private readonly fetching = new Map<string, Promise<void>>();
  private readonly failedUntil = new Map<string, number>();
  /** Servers fetched once within their failure wait for a key we hold nothing of (no more until they answer). */
  private readonly retriedForMissingKey = new Set<string>();

  constructor(
    private readonly signer: Signer,
    private readonly storage: Storage,
    private readonly client: FederationClient,
    private readonly clock: Clock,
    private readonly options: KeyRingOptions,
  ) {}

  /** `GET /_matrix/key/v2/server`: this server's current and old keys, signed by itself. */
  ownKeyListing(): Record<string, unknown> {
    const oldVerifyKeys = Object.fromEntries(Object.entries(this.options.oldSigningKeys).map(([keyId, old]) => [keyId, { key: old.key, expired_ts: old.expiredTs }]));
    return signJson(
      {
        server_name: this.signer.serverName,
        verify_keys: { [this.signer.keyId]: { key: this.signer.publicKey } },
        old_verify_keys: oldVerifyKeys,
        valid_until_ts: this.clock.now() + this.options.keyRefreshIntervalMs,
      },
      this.signer,
    );
  }

  /**
   * Whether `object` carries a valid signature of `server`, by a key valid at `validAt` (an
   * event's origin_server_ts; now for requests). Fetches the server's keys when needed.
   */
  async isSignedBy(object: Record<string, unknown>, server: string, validAt: number, lenient = false, budget?: FetchBudget): Promise<boolean> {
    const signatures = object.signatures as Record<string, Record<string, unknown>> | undefined;
    const keyIds = Object.keys(signatures?.[server] ?? {}).filter((keyId) => keyId.startsWith('ed25519:'));
    if (keyIds.length === 0) return false;
    const keys = await this.verifyKeys(server, keyIds, validAt, budget);
    if (keys.size === 0) return false;
    try {
      return hasValidSignature(object, server, keys, { lenient });
    } catch {
      return false;
    }
  }

  /**
   * The keys among `keyIds` of `server` that were valid at `validAt`; fetched when missing, within
   * `budget` when given (what the inbound request that needs them may make us fetch): a fetch
   * counts as one of its requests, and is waited for no longer than its deadline.
   */
  async verifyKeys(server: string, keyIds: readonly string[], validAt: number, budget?: FetchBudget): Promise<Map<string, KeyObject>> {
    if (server === this.signer.serverName) return this.ownVerifyKeys(keyIds, validAt);
    let found = this.usable(server, keyIds, validAt);
    if (found.size < keyIds.length) {
      await this.loadFromDatabase(server);
      found = this.usable(server, keyIds, validAt);
    }
    if (found.size === 0) {
      await (budget ? this.fetchWithin(server, budget) : this.fetch(server));
      found = this.usable(server, keyIds, validAt);
    }
    return found;
  }

  /** `fetch`, as one request of `budget`; past the budget, nothing is fetched (the keys stay unknown). */
  private async fetchWithin(server: string, budget: FetchBudget): Promise<void> {
    // Within a failure's wait nothing goes out, and nothing is counted.
    if (!this.fetching.has(server) && (this.failedUntil.get(server) ?? 0) > this.clock.now()) return this.fetch(server);
    let slot: FetchSlot;
    try {
      slot = await budget.take('keys');
    } catch (err) {
      if (err instanceof FetchRefused) return;
      throw err;
    }
    try {
      await withDeadline(this.fetch(server), slot.timeoutMs);
    } catch {
      // Not in time: the fetch goes on (its own timeout bounds it), this request goes without.
    } finally {
      // Counted as a request; its bytes are the key ring's to bound (64 KiB a listing).
      budget.settle(slot, 0, 0);
    }
  }

  /**
   * The signed listings of `server` as last fetched, signed by us too (we vouch for having seen
   * them): the newest one, or (`keyIds`) the last one that named each key asked for, so that a key
   * its server no longer lists is still served. Asked again when what we hold is older than the
   * asker wants or lacks a key it names; what we hold is served even past its valid_until_ts (the
   * asker decides what it accepts).
   */
  async notaryListings(server: string, minimumValidUntil: number, keyIds: readonly string[] = []): Promise<Array<Record<string, unknown>>> {
    if (server === this.signer.serverName) return [this.ownKeyListing()];
    const read = async () => {
      const newest = await this.storage.federation.keyResponse(server);
      if (keyIds.length === 0) return [newest];
      // The newest listing stands in for a key whose own row is not there (listings stored before
      // migration 0031 have none).
      const listings = await this.storage.federation.keyListings(server, keyIds);
      return keyIds.map((keyId) => listings.get(keyId) ?? (newest && listsKey(newest.response, keyId) ? newest : undefined));
    };
    let held = await read();
    if (held.some((listing) => !listing || listing.validUntilTs < minimumValidUntil)) {
      // A key we hold nothing of is asked for once within a minute of a failure (the asker wants
      // that key, and an earlier failure says nothing of it); not again until the server answers,
      // however many ask.
      await this.fetch(server, held.some((listing) => !listing)).catch(() => undefined);
      held = await read();
    }
    const distinct = new Set(held.flatMap((listing) => (listing ? [listing.response] : [])));
    return [...distinct].map((response) => signJson(JSON.parse(response) as Record<string, unknown>, this.signer));
  }

  private ownVerifyKeys(keyIds: readonly string[], validAt: number): Map<string, KeyObject> {
    const found = new Map<string, KeyObject>();
    for (const keyId of keyIds) {
      if (keyId === this.signer.keyId) found.set(keyId, ed25519PublicKey(this.signer.publicKey)!);
      const old = this.options.oldSigningKeys[keyId];
      if (old && validAt <= old.expiredTs) {
        const key = ed25519PublicKey(old.key);
        if (key) found.set(keyId, key);
      }
    }
    return found;
  }

  private usable(server: string, keyIds: readonly string[], validAt: number): Map<string, KeyObject> {
    const known = this.known.get(server);
    const found = new Map<string, KeyObject>();
    if (!known) return found;
    for (const keyId of keyIds) {
      const entry = known.get(keyId);
      if (entry && entry.validUntil >= validAt) found.set(keyId, entry.key);
    }
    return found;
  }

  private async loadFromDatabase(server: string): Promise<void> {
    this.remember(server, await this.storage.federation.serverKeys(server));
  }

  private remember(server: string, rows: ServerKeyRow[]): void {
    let known = this.known.get(server);
    if (!known) {
      if (this.known.size >= MAX_SERVERS_IN_MEMORY) this.known.delete(this.known.keys().next().value!);
      known = new Map();
      this.known.set(server, known);
    }
    for (const row of rows) {
      const key = ed25519PublicKey(row.verify_key);
      if (!key) continue;
      const validUntil = row.expired_ts !== null ? Number(row.expired_ts) : Math.min(Number(row.valid_until_ts), Number(row.fetched_ts) + MAX_KEY_TRUST_MS);
      const existing = known.get(row.key_id);
      if (!existing || existing.validUntil < validUntil) known.set(row.key_id, { key, validUntil });
    }
  }

  /**
   * Fetches a server's keys (one fetch at a time per server, not again for a minute after failing;
   * `despiteFailure`, for a key we hold nothing of: once within that minute, until it answers again).
   */
  private fetch(server: string, despiteFailure = false): Promise<void> {
    const pending = this.fetching.get(server);
    if (pending) return pending;
    if ((this.failedUntil.get(server) ?? 0) > this.clock.now()) {
      // Within the wait, one fetch for a key we hold nothing of, until the server answers again.
      if (!despiteFailure || this.retriedForMissingKey.has(server)) return Promise.resolve();
      if (this.retriedForMissingKey.size >= MAX_SERVERS_IN_MEMORY) this.retriedForMissingKey.delete(this.retriedForMissingKey.values().next().value!);
      this.retriedForMissingKey.add(server);
    }
    const attempt = this.fetchNow(server)
      .then(() => {
        // It answers again: an earlier failure no longer holds anything back.
        this.failedUntil.delete(server);
        this.retriedForMissingKey.delete(server);
      })
      .catch(() => {
        this.failedUntil.set(server, this.clock.now() + FAILURE_BACKOFF_MS);
        if (this.failedUntil.size > MAX_SERVERS_IN_MEMORY) this.failedUntil.delete(this.failedUntil.keys().next().value!);
      })
      .finally(() => this.fetching.delete(server));
    this.fetching.set(server, attempt);
    return attempt;
  }

  private async fetchNow(server: string): Promise<void> {
    try {
      const listing = await this.client.request<Record<string, unknown>>(server, { method: 'GET', path: '/_matrix/key/v2/server', timeoutMs: 10_000, maxResponseBytes: 65_536 });
      await this.accept(server, listing, undefined);
      return;
    } catch (direct) {
      for (const notary of this.options.trustedKeyServers) {
        try {
          const answer = await this.client.request<{ server_keys?: unknown }>(notary.server_name, {
            method: 'POST',
            path: '/_matrix/key/v2/query',
            body: { server_keys: { [server]: {} } },
            timeoutMs: 10_000,
            maxResponseBytes: 262_144,
          });
          const listings = Array.isArray(answer.server_keys) ? answer.server_keys : [];
          for (const listing of listings) {
            if (typeof listing === 'object' && listing !== null && (listing as { server_name?: unknown }).server_name === server) {
              await this.accept(server, listing as Record<string, unknown>, notary);
              return;
            }
          }
        } catch {
          // the next notary
        }
      }
      throw direct;
    }
  }

  /**
   * Checks a key listing (its server's own signature by the keys it lists, and a notary's when it
   * came through one) and stores its keys.
   */
  private async accept(server: string, listing: Record<string, unknown>, notary: KeyRingOptions['trustedKeyServers'][number] | undefined): Promise<void> {
    if (listing.server_name !== server) throw new Error(`the key listing is for ${String(listing.server_name)}, not ${server}`);
    const validUntil = listing.valid_until_ts;
    if (typeof validUntil !== 'number') throw new Error('the key listing has no valid_until_ts');
    const now = this.clock.now();
    const rows: ServerKeyRow[] = [];
    const selfKeys = new Map<string, KeyObject>();
    for (const [keyId, entry] of Object.entries(asObject(listing.verify_keys))) {
      const text = asObject(entry).key;
      const key = typeof text === 'string' && keyId.startsWith('ed25519:') ? ed25519PublicKey(text) : undefined;
      if (!key || typeof text !== 'string') continue;
      selfKeys.set(keyId, key);
      rows.push({ server_name: server, key_id: keyId, verify_key: text, valid_until_ts: validUntil, expired_ts: null, fetched_ts: now });
    }
    if (!hasValidSignature(listing, server, selfKeys)) throw new Error(`the key listing of ${server} is not signed by its own keys`);
    if (notary) {
      const notaryKeys = notary.verify_keys
        ? new Map(Object.entries(notary.verify_keys).flatMap(([keyId, text]) => {
            const key = ed25519PublicKey(text);
            return key ? [[keyId, key] as const] : [];
          }))
        : await this.verifyKeys(notary.server_name, Object.keys(asObject(asObject(listing.signatures)[notary.server_name])), now);
      if (!hasValidSignature(listing, notary.server_name, notaryKeys)) throw new Error(`the key listing of ${server} is not signed by the notary ${notary.server_name}`);
    }
    for (const [keyId, entry] of Object.entries(asObject(listing.old_verify_keys))) {
      const { key: text, expired_ts: expired } = asObject(entry);
      if (typeof text !== 'string' || typeof expired !== 'number' || !ed25519PublicKey(text)) continue;
      rows.push({ server_name: server, key_id: keyId, verify_key: text, valid_until_ts: expired, expired_ts: expired, fetched_ts: now });
    }
    const { signatures: _ignored, ...unsignedListing } = listing;
    const own = { ...unsignedListing, signatures: { [server]: asObject(listing.signatures)[server] } };
    await this.storage.federation.storeServerKeys(rows, { serverName: server, json: JSON.stringify(own), validUntilTs: validUntil, keyIds: [...selfKeys.keys()] });
    this.remember(server, rows);
  }
}

function asObject(value: unknown): Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : {};
}

/** Whether a stored key listing names `keyId` among its current keys. */
function listsKey(response: string, keyId: string): boolean {
  try {
    return Object.hasOwn(asObject(asObject(JSON.parse(response)).verify_keys), keyId);
  } catch {
    return false;
  }
}
