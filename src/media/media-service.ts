/**
 * Media: uploads become `mxc://<server_name>/<media id>`; downloads find the row, then the bytes.
 * There is no federation, so an mxc URI of another server is simply not found.
 */
import { randomInt } from 'node:crypto';
import { dirname, join, resolve } from 'node:path';
import type { Readable } from 'node:stream';
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
const DEFAULT_CONTENT_TYPE = 'application/octet-stream';
/** `type/subtype` with optional parameters, as RFC 9110 tokens; anything else is stored as octets. */
const CONTENT_TYPE_PATTERN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+\/[!#$%&'*+.^_`|~0-9A-Za-z-]+(\s*;[\x20-\x7e]*)?$/;

/** The blob store the config asks for: `media_store_path`, else beside the database, else memory. */
export function blobStoreFor(config: Config): BlobStore {
  if (config.media_store_path !== null) return new FileBlobStore(resolve(config.media_store_path));
  if (config.database.path === ':memory:') return new MemoryBlobStore();
  return new FileBlobStore(join(dirname(resolve(config.database.path)), 'media_store'));
}

export interface UploadRequest {
  uploader: string;
  contentType: string | undefined;
  filename: string | undefined;
  /** The Content-Length the client declared, checked before reading a byte. */
  declaredLength: number | undefined;
  body: AsyncIterable<Buffer | string>;
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
  ) {}

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
    if (serverName !== this.config.server_name || !MEDIA_ID_PATTERN.test(mediaId)) throw notFound();
    const row = await this.storage.media.get(mediaId);
    if (!row) throw notFound();
    const stream = await this.blobs.read(mediaId);
    if (!stream) throw notFound();
    return { row, stream };
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
