/**
 * Media over federation (spec v1.11, "Content Repository"): another server's media is fetched with
 * the authenticated `GET /_matrix/federation/v1/media/download/{mediaId}` (a multipart/mixed answer:
 * a JSON metadata part, then the bytes); servers older than that (Synapse before 1.112, such as
 * 1.67) answer it with 404/400 `M_UNRECOGNIZED`, and are asked the legacy
 * `/_matrix/media/v3/download/{serverName}/{mediaId}` instead, as Synapse does. Either answer is
 * read as it arrives (multipart.ts) and handed on to be stored, never held whole. Serving ours is
 * the multipart answer built here.
 */
import { Readable } from 'node:stream';
import { MatrixError } from '../core/errors.js';
import { RemoteMediaNotFound, RemoteMediaTooLarge, type RemoteMedia, type RemoteMediaSource } from '../media/media-service.js';
import { FederationError, ResponseTooLarge, type FederationClient } from './http-client.js';
import { MalformedMultipart, multipartMixedBoundary, readMediaPart } from './multipart.js';

/** Room for the multipart framing and headers around the media's bytes. */
const FRAMING_BYTES = 65_536;

/** The media part names another place to get the bytes from (not followed: the legacy path is asked). */
const ELSEWHERE = Symbol('elsewhere');

export class FederatedMediaSource implements RemoteMediaSource {
  constructor(private readonly client: FederationClient) {}

  async fetch<T>(serverName: string, mediaId: string, maxBytes: number, store: (media: RemoteMedia) => Promise<T>): Promise<T> {
    try {
      const answer = await this.client.requestStream(
        serverName,
        { path: `/_matrix/federation/v1/media/download/${encodeURIComponent(mediaId)}`, maxResponseBytes: maxBytes + FRAMING_BYTES },
        async ({ headers, body }): Promise<{ stored: T } | typeof ELSEWHERE> => {
          const boundary = multipartMixedBoundary(header(headers['content-type']));
          if (!boundary) throw new MalformedMultipart('the answer is not multipart/mixed');
          const part = await readMediaPart(body, boundary);
          if (part.headers.has('location')) return ELSEWHERE;
          return { stored: await store({ contentType: part.headers.get('content-type'), filename: filenameOf(part.headers.get('content-disposition')), body: part.body }) };
        },
      );
      if (answer !== ELSEWHERE) return answer.stored;
    } catch (err) {
      if (!(err instanceof FederationError) || !isUnsupportedEndpoint(err)) throw translated(err);
    }
    // A server without authenticated federation media.
    try {
      return await this.client.requestStream(
        serverName,
        { path: `/_matrix/media/v3/download/${encodeURIComponent(serverName)}/${encodeURIComponent(mediaId)}?allow_remote=false`, maxResponseBytes: maxBytes },
        ({ headers, body }) => store({ contentType: header(headers['content-type']), filename: filenameOf(header(headers['content-disposition'])), body }),
      );
    } catch (err) {
      throw translated(err);
    }
  }
}

/** A multipart/mixed answer to a federation media request: `{}` metadata, then the media. */
export function multipartMedia(contentType: string, contentDisposition: string, size: number, stream: Readable): { contentType: string; length: number; body: Readable } {
  const boundary = `bhs${Math.random().toString(36).slice(2)}${Date.now().toString(36)}`;
  const head = Buffer.from(
    `--${boundary}\r\nContent-Type: application/json\r\n\r\n{}\r\n--${boundary}\r\nContent-Type: ${contentType}\r\nContent-Disposition: ${contentDisposition}\r\n\r\n`,
  );
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  async function* parts() {
    yield head;
    for await (const chunk of stream) yield chunk as Buffer;
    yield tail;
  }
  return { contentType: `multipart/mixed; boundary=${boundary}`, length: head.length + size + tail.length, body: Readable.from(parts()) };
}

function isUnsupportedEndpoint(err: FederationError): boolean {
  return (err.status === 404 || err.status === 400 || err.status === 405) && (err.errcode === 'M_UNRECOGNIZED' || err.errcode === undefined);
}

/** What the media service needs to tell apart: not there, too large, anything else. */
function translated(err: unknown): Error {
  if (err instanceof FederationError && err.status === 404) return new RemoteMediaNotFound(err.message, { cause: err });
  if (err instanceof ResponseTooLarge || (err instanceof MatrixError && err.errcode === 'M_TOO_LARGE')) return new RemoteMediaTooLarge(err.message, { cause: err });
  return err instanceof Error ? err : new Error(String(err));
}

function header(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

/** The filename of a Content-Disposition (RFC 6266 `filename*=utf-8''...` first). */
function filenameOf(disposition: string | undefined): string | undefined {
  if (!disposition) return undefined;
  const extended = /filename\*\s*=\s*utf-8''([^;]+)/i.exec(disposition);
  if (extended) {
    try {
      return decodeURIComponent(extended[1]!.trim());
    } catch {
      return undefined;
    }
  }
  const plain = /filename\s*=\s*"?([^";]+)"?/i.exec(disposition);
  return plain?.[1]?.trim();
}
