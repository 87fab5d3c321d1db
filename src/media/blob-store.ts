/**
 * Where the bytes of uploaded media live: files on disk (the media store beside the database), or
 * memory for an in-memory test server. Metadata is in the `media` table (`MediaStore`); a blob is
 * always complete and durable before its row is written, so a row never points at nothing.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, open, readdir, rename, stat, unlink } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { Readable } from 'node:stream';
import { MatrixError } from '../core/errors.js';

export interface StoredBlob {
  size: number;
  sha256: string;
}

export interface BlobStore {
  /**
   * Stores everything `source` yields under `id`, durably (fsync) before resolving. Past `limit`
   * bytes it stops reading and throws 413 `M_TOO_LARGE`, keeping nothing.
   */
  write(id: string, source: AsyncIterable<Buffer | string>, limit: number): Promise<StoredBlob>;
  /** The blob's bytes as a stream, or null when there is none. */
  read(id: string): Promise<Readable | null>;
  delete(id: string): Promise<void>;
  /** Removes what uploads cut short by a crash left behind; run at start, before serving. */
  sweepTemporaryFiles(): Promise<void>;
}

/**
 * A temporary upload file untouched this long belongs to no upload still running (a request must
 * arrive within `listen.request_timeout`): it was left by a crash.
 */
const ABANDONED_UPLOAD_AFTER_MS = 3_600_000;

export function tooLarge(limit: number): MatrixError {
  return new MatrixError('M_TOO_LARGE', `Upload request body is too large (the limit is ${limit} bytes)`, {
    // The client may still be sending; the connection cannot be reused.
    headers: { Connection: 'close' },
  });
}

export class MemoryBlobStore implements BlobStore {
  private readonly blobs = new Map<string, Buffer>();

  async write(id: string, source: AsyncIterable<Buffer | string>, limit: number): Promise<StoredBlob> {
    const chunks: Buffer[] = [];
    const hash = createHash('sha256');
    let size = 0;
    for await (const piece of source) {
      const chunk = typeof piece === 'string' ? Buffer.from(piece) : piece;
      size += chunk.length;
      if (size > limit) throw tooLarge(limit);
      hash.update(chunk);
      chunks.push(chunk);
    }
    this.blobs.set(id, Buffer.concat(chunks));
    return { size, sha256: hash.digest('hex') };
  }

  async sweepTemporaryFiles(): Promise<void> {
    // Nothing outlives the process in memory.
  }

  async read(id: string): Promise<Readable | null> {
    const blob = this.blobs.get(id);
    return blob === undefined ? null : Readable.from([blob]);
  }

  async delete(id: string): Promise<void> {
    this.blobs.delete(id);
  }
}

/**
 * Files under `root`, spread over two levels of folders by the id's first characters (as Synapse
 * does) so no folder grows huge. A file is written under `root/tmp`, fsynced, renamed into place
 * and its folder fsynced: after `write` resolves it survives a crash or power loss.
 */
export class FileBlobStore implements BlobStore {
  constructor(private readonly root: string) {}

  private pathOf(id: string): { dir: string; file: string } {
    const dir = join(this.root, id.slice(0, 2), id.slice(2, 4));
    return { dir, file: join(dir, id.slice(4)) };
  }

  async write(id: string, source: AsyncIterable<Buffer | string>, limit: number): Promise<StoredBlob> {
    const tmpDir = join(this.root, 'tmp');
    await mkdir(tmpDir, { recursive: true });
    const tmp = join(tmpDir, `${id}.${randomBytes(6).toString('hex')}.part`);
    const hash = createHash('sha256');
    let size = 0;
    const handle = await open(tmp, 'wx', 0o600);
    let done = false;
    try {
      for await (const piece of source) {
        const chunk = typeof piece === 'string' ? Buffer.from(piece) : piece;
        size += chunk.length;
        if (size > limit) throw tooLarge(limit);
        hash.update(chunk);
        await handle.write(chunk);
      }
      await handle.sync();
      done = true;
    } finally {
      await handle.close();
      if (!done) await unlink(tmp).catch(() => undefined);
    }
    const { dir, file } = this.pathOf(id);
    await this.makeDurableDirectory(dir);
    try {
      await rename(tmp, file);
    } catch (err) {
      await unlink(tmp).catch(() => undefined);
      throw err;
    }
    await syncDirectory(dir);
    return { size, sha256: hash.digest('hex') };
  }

  /**
   * mkdir -p whose new folders survive a crash: each folder it creates is recorded in its parent
   * only once the parent is synced, or the file renamed into it could vanish with it.
   */
  private async makeDurableDirectory(dir: string): Promise<void> {
    const created = await mkdir(dir, { recursive: true });
    if (created === undefined) return;
    // `created` is the first folder made; it and every folder below it need their parent synced.
    for (let folder = dir; folder.length >= created.length; folder = dirname(folder)) {
      await syncDirectory(dirname(folder));
    }
  }

  /** Deletes what uploads cut short by a crash left in tmp/ (called at start). */
  async sweepTemporaryFiles(): Promise<void> {
    const tmpDir = join(this.root, 'tmp');
    const names = await readdir(tmpDir).catch(() => [] as string[]);
    // Only those no upload can still be writing: another server process on the same media store
    // may be in the middle of one.
    const before = Date.now() - ABANDONED_UPLOAD_AFTER_MS;
    for (const name of names) {
      if (!name.endsWith('.part')) continue;
      const path = join(tmpDir, name);
      const modified = await stat(path).then((info) => info.mtimeMs, () => undefined);
      if (modified !== undefined && modified < before) await unlink(path).catch(() => undefined);
    }
  }

  async read(id: string): Promise<Readable | null> {
    try {
      const handle = await open(this.pathOf(id).file, 'r');
      return handle.createReadStream();
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw err;
    }
  }

  async delete(id: string): Promise<void> {
    await unlink(this.pathOf(id).file).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'ENOENT') throw err;
    });
  }
}

/** A rename is durable only once the folder holding the new name is synced. */
async function syncDirectory(dir: string): Promise<void> {
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}
