/**
 * Media over federation (spec v1.11, "Content Repository"): another server's media is fetched with
 * the authenticated `GET /_matrix/federation/v1/media/download/{mediaId}` (a multipart/mixed answer:
 * a JSON metadata part, then the bytes); servers older than that (Synapse before 1.112, such as
 * 1.67) answer it with 404/400 `M_UNRECOGNIZED`, and are asked the legacy
 * `/_matrix/media/v3/download/{serverName}/{mediaId}` instead, as Synapse does. Serving ours is the
 * multipart answer built here.
 */
import type { IncomingMessage } from 'node:http';
import { Readable } from 'node:stream';
import { RemoteMediaNotFound, type RemoteMediaSource } from '../media/media-service.js';
import { FederationError, type FederationClient } from './http-client.js';

/** Room for the multipart framing and headers around the media's bytes. */
const FRAMING_BYTES = 65_536;

export class FederatedMediaSource implements RemoteMediaSource {
  constructor(private readonly client: FederationClient) {}

  async fetch(serverName: string, mediaId: string, maxBytes: number): Promise<{ contentType: string | undefined; filename: string | undefined; bytes: Buffer }> {
    try {
      const answer = await this.client.requestBytes(serverName, { path: `/_matrix/federation/v1/media/download/${encodeURIComponent(mediaId)}`, maxResponseBytes: maxBytes + FRAMING_BYTES });
      const media = mediaPartOf(answer.headers, answer.bytes);
      if (media) return media;
    } catch (err) {
      if (!(err instanceof FederationError) || !isUnsupportedEndpoint(err)) throw notFoundOr(err);
    }
    // A server without authenticated federation media.
    try {
      const answer = await this.client.requestBytes(serverName, {
        path: `/_matrix/media/v3/download/${encodeURIComponent(serverName)}/${encodeURIComponent(mediaId)}?allow_remote=false`,
        maxResponseBytes: maxBytes,
      });
      return { contentType: header(answer.headers['content-type']), filename: filenameOf(header(answer.headers['content-disposition'])), bytes: answer.bytes };
    } catch (err) {
      throw notFoundOr(err);
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

/** The media part of a multipart/mixed answer (the second part), or undefined when it is not one. */
function mediaPartOf(headers: IncomingMessage['headers'], body: Buffer): { contentType: string | undefined; filename: string | undefined; bytes: Buffer } | undefined {
  const type = header(headers['content-type']) ?? '';
  const match = /^multipart\/mixed\s*;.*boundary="?([^";]+)"?/i.exec(type);
  if (!match) return undefined;
  const delimiter = Buffer.from(`--${match[1]!}`);
  const parts: Buffer[] = [];
  let at = body.indexOf(delimiter);
  while (at !== -1) {
    const start = at + delimiter.length;
    if (body.subarray(start, start + 2).toString() === '--') break;
    const next = body.indexOf(delimiter, start);
    if (next === -1) break;
    // Each part sits between "\r\n" after the delimiter and "\r\n" before the next one.
    parts.push(body.subarray(start + 2, next - 2));
    at = next;
  }
  const media = parts[1];
  if (!media) return undefined;
  const split = media.indexOf('\r\n\r\n');
  if (split === -1) return undefined;
  const partHeaders = new Map<string, string>();
  for (const line of media.subarray(0, split).toString('latin1').split('\r\n')) {
    const colon = line.indexOf(':');
    if (colon > 0) partHeaders.set(line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim());
  }
  // A part with a Location (the bytes elsewhere) is not followed: the legacy path is tried instead.
  if (partHeaders.has('location')) return undefined;
  return { contentType: partHeaders.get('content-type'), filename: filenameOf(partHeaders.get('content-disposition')), bytes: media.subarray(split + 4) };
}

function isUnsupportedEndpoint(err: FederationError): boolean {
  return (err.status === 404 || err.status === 400 || err.status === 405) && (err.errcode === 'M_UNRECOGNIZED' || err.errcode === undefined);
}

function notFoundOr(err: unknown): Error {
  if (err instanceof FederationError && err.status === 404) return new RemoteMediaNotFound(err.message);
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
