/**
 * Media: uploads become `mxc://<server_name>/<media id>`; downloads find the row, then the bytes.
 * Media of another server is fetched over federation on first download (through a
 * `RemoteMediaSource`, implemented by federation/media.ts), kept, and served from here after.
 *
 * What another server (or whoever names its media) can make us hold is bounded: its bytes go
 * straight to the blob store as they arrive, at most `max_upload_size`; concurrent downloads of
 * the same media share one fetch; fetches at once are bounded in all and per server (`FetchLimiter`);
 * the cache is bounded in age (`media_retention.remote_media_lifetime`) and in size
 * (`media.max_remote_cache_size`). As in Synapse (`enable_authenticated_media`), only requests with
 * an access token fetch; the unauthenticated legacy downloads serve what was cached for them before.
 * Why a fetch failed goes to the log only: the client is told 404 or 502, never an address.
 */
import { randomInt } from 'node:crypto';
import { dirname, join, resolve } from 'node:path';
import type { Readable } from 'node:stream';
import type { FastifyBaseLogger } from 'fastify';
import type { Clock } from '../core/clock.js';
import type { Config } from '../config/index.js';
import { MatrixError } from '../core/errors.js';
import type { MediaRow, RemoteMediaKey, RemoteMediaRow, Storage } from '../storage/index.js';
import { FileBlobStore, MemoryBlobStore, tooLarge, type BlobStore } from './blob-store.js';
import { FetchLimiter } from './fetch-limiter.js';

const MEDIA_ID_ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
const MEDIA_ID_LENGTH = 24;
/** What a media id may look like in a request; anything else is not found without touching disk. */
const MEDIA_ID_PATTERN = /^[A-Za-z0-9_-]{1,255}$/;
const MAX_FILENAME_LENGTH = 255;
/** A server name as an mxc URI may carry it (host, optional port); anything else is not fetched. */
const SERVER_NAME_PATTERN = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]{1,255})(:\d{1,5})?$/;
const DEFAULT_CONTENT_TYPE = 'application/octet-stream';
/** `type/subtype` with optional parameters, as RFC 9110 tokens; anything else is stored as octets. */
const CONTENT_TYPE_PATTERN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+\/[!#$%&'*+.^_`|~0-9A-Za-z-]+(\s*;[\x20-\x7e]*)?$/;

/** The blob store the config asks for: `media_store_path`, else beside the database, else memory. */
export function blobStoreFor(config: Config): BlobStore {
  const path = mediaStorePathFor(config);
  return path === null ? new MemoryBlobStore() : new FileBlobStore(path);
}

/** The folder uploads are kept in, or null when they are kept in memory. */
export function mediaStorePathFor(config: { media_store_path: string | null; database: { path: string } }): string | null {
  if (config.media_store_path !== null) return resolve(config.media_store_path);
  if (config.database.path === ':memory:') return null;
  return join(dirname(resolve(config.database.path)), 'media_store');
}

export interface UploadRequest {
  uploader: string;
  contentType: string | undefined;
  filename: string | undefined;
  /** The Content-Length the client declared, checked before reading a byte. */
  declaredLength: number | undefined;
  body: AsyncIterable<Buffer | string>;
}

/** Another server's media as it arrives: what it is, and its bytes to be read once. */
export interface RemoteMedia {
  contentType: string | undefined;
  filename: string | undefined;
  body: AsyncIterable<Buffer>;
}

/**
 * How media of another server is fetched (federation): `store` gets the media while the answer is
 * still arriving, and the fetch answers what `store` answered. At most `maxBytes` of media.
 */
export interface RemoteMediaSource {
  fetch<T>(serverName: string, mediaId: string, maxBytes: number, store: (media: RemoteMedia) => Promise<T>): Promise<T>;
}

/** The remote server answered that it has no such media (as opposed to not answering). */
export class RemoteMediaNotFound extends Error {
  override name = 'RemoteMediaNotFound';
}

/** The remote server's media is larger than we keep. */
export class RemoteMediaTooLarge extends Error {
  override name = 'RemoteMediaTooLarge';
}

export interface OpenOptions {
  /**
   * The request carried an access token (`/_matrix/client/v1/media`, federation). Without one,
   * while `enable_authenticated_media` is on, another server's media is served only from what was
   * cached for unauthenticated requests, and never fetched.
   */
  authenticated: boolean;
  /** `allow_remote=false`: another server's media is not fetched (Synapse: 404 for it at once). */
  allowRemote?: boolean;
}

/** Last access is written at most this often per media: a download is a read, not a write. */
const ACCESS_RESOLUTION_MS = 3_600_000;
/** Rows looked at per step of the retention job. */
const RETENTION_BATCH = 500;

export interface OpenMedia {
  row: MediaRow;
  stream: Readable;
}

export class MediaService {
  /** Fetches of remote media under way, so concurrent downloads of the same one fetch it once. */
  private readonly fetching = new Map<string, Promise<void>>();
  private readonly limiter: FetchLimiter;
  private trimming: Promise<unknown> = Promise.resolve();
  /** Where the reasons of failed fetches go (set by the app). */
  log: FastifyBaseLogger | undefined;

  constructor(
    private readonly storage: Storage,
    private readonly blobs: BlobStore,
    private readonly config: Config,
    private readonly clock: Clock,
    private readonly remote?: RemoteMediaSource | undefined,
  ) {
    this.limiter = new FetchLimiter({
      maxConcurrent: config.media.max_concurrent_remote_fetches,
      maxConcurrentPerServer: config.media.max_concurrent_remote_fetches_per_server,
      maxQueued: config.media.max_queued_remote_fetches,
      maxWaitMs: config.media.remote_fetch_queue_timeout,
    });
  }

  /** Run once at start, before uploads are accepted. */
  async start(): Promise<void> {
    await this.blobs.sweepTemporaryFiles();
  }

  get maxUploadSize(): number {
    return this.config.max_upload_size;
  }

  /** Stores the upload and answers its `mxc://` URI, only once bytes and row are both on disk. */
  async upload(request: UploadRequest): Promise<string> {
    const limit = this.config.max_upload_size;
    if (request.declaredLength !== undefined && request.declaredLength > limit) throw tooLarge(limit);
    if (request.filename !== undefined && request.filename.length > MAX_FILENAME_LENGTH) {
      throw new MatrixError('M_INVALID_PARAM', `filename is longer than ${MAX_FILENAME_LENGTH} characters`);
    }
    const contentType = request.contentType !== undefined && CONTENT_TYPE_PATTERN.test(request.contentType.trim())
      ? request.contentType.trim()
      : DEFAULT_CONTENT_TYPE;
    const mediaId = generateMediaId();
    const stored = await this.blobs.write(mediaId, request.body, limit);
    try {
      await this.storage.media.insert({
        media_id: mediaId,
        content_type: contentType,
        upload_name: request.filename || null,
        size_bytes: stored.size,
        sha256: stored.sha256,
        uploader: request.uploader,
        created_ts: this.clock.now(),
      });
    } catch (err) {
      await this.blobs.delete(mediaId);
      throw err;
    }
    return `mxc://${this.config.server_name}/${mediaId}`;
  }

  /** The media and a stream of its bytes; 404 `M_NOT_FOUND` for anything we do not hold. */
  async open(serverName: string, mediaId: string, options: OpenOptions): Promise<OpenMedia> {
    if (!MEDIA_ID_PATTERN.test(mediaId)) throw notFound();
    if (serverName !== this.config.server_name) return this.openRemote(serverName, mediaId, options);
    const row = await this.storage.media.get(mediaId);
    if (!row) throw notFound();
    const stream = await this.blobs.read(mediaId);
    if (!stream) throw notFound();
    return { row, stream };
  }

  /** The kept copy of another server's media, fetched over federation the first time. */
  private async openRemote(serverName: string, mediaId: string, options: OpenOptions): Promise<OpenMedia> {
    if (!this.remote || !SERVER_NAME_PATTERN.test(serverName)) throw notFound();
    const whitelist = this.config.federation_domain_whitelist;
    if (whitelist !== null && !whitelist.includes(serverName)) throw new MatrixError('M_FORBIDDEN', `Federation denied with ${serverName}.`);
    // No token while authenticated media is on: only what was cached for such requests, no fetch.
    const cachedOnly = this.config.enable_authenticated_media && !options.authenticated;
    const cached = await this.storage.media.remote(serverName, mediaId);
    if (cachedOnly && cached?.authenticated !== 0) throw notFound();
    if (cached) {
      const stream = await this.blobs.read(cached.blob_id);
      if (stream) {
        if (this.clock.now() - cached.last_access_ts >= ACCESS_RESOLUTION_MS) {
          await this.storage.media.touchRemote(serverName, mediaId, this.clock.now()).catch((err: unknown) => this.log?.warn({ err }, 'recording a remote media download failed'));
        }
        return openedRemote(cached, stream);
      }
      // The bytes are gone (deleted under a reader that had just found the row): fetched again.
      await this.storage.media.deleteRemote(cached);
      if (cachedOnly) throw notFound();
    }
    if (options.allowRemote === false) throw notFound();
    await this.fetchOnce(serverName, mediaId, options.authenticated);
    const row = await this.storage.media.remote(serverName, mediaId);
    const stream = row ? await this.blobs.read(row.blob_id) : null;
    if (!row || !stream) throw notFound();
    return openedRemote(row, stream);
  }

  /** One fetch per media at a time: later downloads of it wait for the one under way. */
  private fetchOnce(serverName: string, mediaId: string, authenticated: boolean): Promise<void> {
    const key = `${serverName}/${mediaId}`;
    let fetching = this.fetching.get(key);
    if (!fetching) {
      fetching = this.limiter.run(serverName, () => this.fetchRemote(serverName, mediaId, authenticated)).finally(() => this.fetching.delete(key));
      this.fetching.set(key, fetching);
    }
    return fetching;
  }

  private async fetchRemote(serverName: string, mediaId: string, authenticated: boolean): Promise<void> {
    const limit = this.config.max_upload_size;
    const blobId = generateMediaId();
    let stored: { contentType: string; filename: string | null; size: number; sha256: string };
    try {
      stored = await this.remote!.fetch(serverName, mediaId, limit, async (media) => {
        const blob = await this.blobs.write(blobId, media.body, limit);
        const contentType = media.contentType !== undefined && CONTENT_TYPE_PATTERN.test(media.contentType.trim()) ? media.contentType.trim() : DEFAULT_CONTENT_TYPE;
        const filename = media.filename !== undefined && media.filename.length <= MAX_FILENAME_LENGTH ? media.filename : null;
        return { contentType, filename, ...blob };
      });
    } catch (err) {
      this.log?.warn({ err, server: serverName, mediaId }, 'fetching remote media failed');
      if (err instanceof RemoteMediaNotFound) throw notFound();
      // Synapse's answers: 502 for whatever went wrong over there, without saying what.
      if (err instanceof RemoteMediaTooLarge || (err instanceof MatrixError && err.errcode === 'M_TOO_LARGE')) {
        throw new MatrixError('M_TOO_LARGE', `Requested file is too large > ${limit} bytes`, { status: 502 });
      }
      throw new MatrixError('M_UNKNOWN', 'Failed to fetch remote media', { status: 502 });
    }
    const now = this.clock.now();
    const inserted = await this.storage.media
      .insertRemote({
        server_name: serverName,
        media_id: mediaId,
        blob_id: blobId,
        content_type: stored.contentType,
        upload_name: stored.filename,
        size_bytes: stored.size,
        sha256: stored.sha256,
        fetched_ts: now,
        last_access_ts: now,
        authenticated: authenticated && this.config.enable_authenticated_media ? 1 : 0,
      })
      .catch(async (err: unknown) => {
        await this.blobs.delete(blobId);
        throw err;
      });
    // Another process (or an earlier fetch) kept it first: ours is not needed.
    if (!inserted) await this.blobs.delete(blobId);
    else if (this.config.media.max_remote_cache_size !== null) {
      // Not this one: it is about to be served (a media larger than the bound stays until the job).
      // One trim at a time, or two would each delete what the excess needs.
      const maxBytes = this.config.media.max_remote_cache_size;
      this.trimming = this.trimming
        .then(() => this.keepCacheWithinSize(maxBytes, blobId))
        .catch((err: unknown) => this.log?.error({ err }, 'trimming the remote media cache failed'));
    }
  }

  /**
   * The retention job (hourly, in one process): cached remote media not downloaded within
   * `media_retention.remote_media_lifetime` is deleted, then the least recently downloaded until
   * the cache fits `media.max_remote_cache_size`. Answers how many were deleted.
   */
  async applyRetention(): Promise<number> {
    let deleted = 0;
    const lifetime = this.config.media_retention.remote_media_lifetime;
    if (lifetime !== null) {
      const before = this.clock.now() - lifetime;
      for (;;) {
        const old = await this.storage.media.remoteAccessedBefore(before, RETENTION_BATCH);
        for (const key of old) if (await this.deleteCached(key)) deleted++;
        if (old.length < RETENTION_BATCH) break;
      }
    }
    if (this.config.media.max_remote_cache_size !== null) deleted += await this.keepCacheWithinSize(this.config.media.max_remote_cache_size);
    return deleted;
  }

  private async keepCacheWithinSize(maxBytes: number, sparedBlobId?: string): Promise<number> {
    let deleted = 0;
    let excess = (await this.storage.media.remoteCacheSize()) - maxBytes;
    while (excess > 0) {
      const oldest = (await this.storage.media.remoteLeastRecentlyAccessed(RETENTION_BATCH + 1)).filter((key) => key.blob_id !== sparedBlobId);
      if (oldest.length === 0) break;
      for (const key of oldest) {
        if (excess <= 0) break;
        if (await this.deleteCached(key)) deleted++;
        excess -= Number(key.size_bytes);
      }
    }
    return deleted;
  }

  /** The row first, so no new download finds it; a download already reading the file finishes. */
  private async deleteCached(key: RemoteMediaKey | RemoteMediaRow): Promise<boolean> {
    if (!(await this.storage.media.deleteRemote(key))) return false;
    await this.blobs.delete(key.blob_id);
    return true;
  }
}

function openedRemote(row: RemoteMediaRow, stream: Readable): OpenMedia {
  return {
    row: { media_id: row.media_id, content_type: row.content_type, upload_name: row.upload_name, size_bytes: row.size_bytes, sha256: row.sha256, uploader: '', created_ts: row.fetched_ts },
    stream,
  };
}

function notFound(): MatrixError {
  return new MatrixError('M_NOT_FOUND', 'Not found');
}

function generateMediaId(): string {
  let id = '';
  for (let i = 0; i < MEDIA_ID_LENGTH; i++) id += MEDIA_ID_ALPHABET[randomInt(MEDIA_ID_ALPHABET.length)];
  return id;
}
