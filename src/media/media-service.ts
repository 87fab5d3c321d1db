/**
 * Media: uploads become `mxc://<server_name>/<media id>`; downloads find the row, then the bytes.
 * Media of another server is fetched over federation on first download (through a
 * `RemoteMediaSource`, implemented by federation/media.ts), kept, and served from here after.
 */
import { randomInt } from 'node:crypto';
import { dirname, join, resolve } from 'node:path';
import { Readable } from 'node:stream';
import type { Clock } from '../core/clock.js';
import type { Config } from '../config/index.js';
import { MatrixError } from '../core/errors.js';
import type { MediaRow, Storage } from '../storage/index.js';
import { FileBlobStore, MemoryBlobStore, tooLarge, type BlobStore } from './blob-store.js';

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
export function mediaStorePathFor(config: Pick<Config, 'media_store_path' | 'database'>): string | null {
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

/** How media of another server is fetched (federation); answers the bytes and what they are. */
export interface RemoteMediaSource {
  fetch(serverName: string, mediaId: string, maxBytes: number): Promise<{ contentType: string | undefined; filename: string | undefined; bytes: Buffer }>;
}

/** The remote server answered that it has no such media (as opposed to not answering). */
export class RemoteMediaNotFound extends Error {
  override name = 'RemoteMediaNotFound';
}

export interface OpenMedia {
  row: MediaRow;
  stream: Readable;
}

export class MediaService {
  constructor(
    private readonly storage: Storage,
    private readonly blobs: BlobStore,
    private readonly config: Config,
    private readonly clock: Clock,
    private readonly remote?: RemoteMediaSource | undefined,
  ) {}

  /** Fetches of remote media under way, so concurrent downloads of the same one fetch it once. */
  private readonly fetching = new Map<string, Promise<void>>();

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
  async open(serverName: string, mediaId: string): Promise<OpenMedia> {
    if (!MEDIA_ID_PATTERN.test(mediaId)) throw notFound();
    if (serverName !== this.config.server_name) return this.openRemote(serverName, mediaId);
    const row = await this.storage.media.get(mediaId);
    if (!row) throw notFound();
    const stream = await this.blobs.read(mediaId);
    if (!stream) throw notFound();
    return { row, stream };
  }

  /** The kept copy of another server's media, fetched over federation the first time. */
  private async openRemote(serverName: string, mediaId: string): Promise<OpenMedia> {
    if (!this.remote || !SERVER_NAME_PATTERN.test(serverName)) throw notFound();
    let row = await this.storage.media.remote(serverName, mediaId);
    if (!row) {
      const key = `${serverName}/${mediaId}`;
      let fetching = this.fetching.get(key);
      if (!fetching) {
        fetching = this.fetchRemote(serverName, mediaId).finally(() => this.fetching.delete(key));
        this.fetching.set(key, fetching);
      }
      await fetching;
      row = await this.storage.media.remote(serverName, mediaId);
      if (!row) throw notFound();
    }
    const stream = await this.blobs.read(row.blob_id);
    if (!stream) throw notFound();
    return {
      row: { media_id: mediaId, content_type: row.content_type, upload_name: row.upload_name, size_bytes: row.size_bytes, sha256: row.sha256, uploader: '', created_ts: row.fetched_ts },
      stream,
    };
  }

  private async fetchRemote(serverName: string, mediaId: string): Promise<void> {
    let fetched: Awaited<ReturnType<RemoteMediaSource['fetch']>>;
    try {
      fetched = await this.remote!.fetch(serverName, mediaId, this.config.max_upload_size);
    } catch (err) {
      if (err instanceof RemoteMediaNotFound) throw notFound();
      if (err instanceof MatrixError) throw err;
      throw new MatrixError('M_UNKNOWN', `Could not fetch the media from ${serverName}: ${(err as Error).message}`, { status: 502 });
    }
    const contentType = fetched.contentType !== undefined && CONTENT_TYPE_PATTERN.test(fetched.contentType.trim()) ? fetched.contentType.trim() : DEFAULT_CONTENT_TYPE;
    const blobId = generateMediaId();
    const stored = await this.blobs.write(blobId, Readable.from([fetched.bytes]), this.config.max_upload_size);
    const filename = fetched.filename !== undefined && fetched.filename.length <= MAX_FILENAME_LENGTH ? fetched.filename : null;
    const inserted = await this.storage.media
      .insertRemote({ server_name: serverName, media_id: mediaId, blob_id: blobId, content_type: contentType, upload_name: filename, size_bytes: stored.size, sha256: stored.sha256, fetched_ts: this.clock.now() })
      .catch(async (err: unknown) => {
        await this.blobs.delete(blobId);
        throw err;
      });
    // Another process (or an earlier fetch) kept it first: ours is not needed.
    if (!inserted) await this.blobs.delete(blobId);
  }
}

function notFound(): MatrixError {
  return new MatrixError('M_NOT_FOUND', 'Not found');
}

function generateMediaId(): string {
  let id = '';
  for (let i = 0; i < MEDIA_ID_LENGTH; i++) id += MEDIA_ID_ALPHABET[randomInt(MEDIA_ID_ALPHABET.length)];
  return id;
}
