/**
 * Reading the multipart/mixed answer of `GET /_matrix/federation/v1/media/download` (spec v1.11) as
 * it arrives: a JSON metadata part, then the media, whose bytes are handed on chunk by chunk and
 * never held whole. Our own small parser because the npm ones either keep each part in memory
 * (@remix-run/multipart-parser, @apeleghq/multipart-parser), read only multipart/form-data
 * (busboy, @fastify/busboy, @hapi/pez) or are no longer kept (dicer); we need only two parts.
 *
 * RFC 2046 §5.1.1: each part follows a delimiter line `--boundary` (preceded by CRLF, except at
 * the very start) and its headers up to an empty line; the message ends with `--boundary--`.
 */

/** The answer is not the multipart message the spec describes. */
export class MalformedMultipart extends Error {
  override name = 'MalformedMultipart';
}

/** Longest preamble, header block or metadata part we read; the media part itself is streamed. */
const MAX_PREAMBLE_BYTES = 16_384;
const MAX_HEADER_BYTES = 16_384;
const MAX_METADATA_BYTES = 65_536;
const MAX_DELIMITER_LINE_BYTES = 1_024;

/** RFC 2046's bchars: 1 to 70 of them, not ending in a space. */
const BOUNDARY_PATTERN = /^[0-9A-Za-z'()+_,\-./:=? ]{0,69}[0-9A-Za-z'()+_,\-./:=?]$/;

/** The boundary of a `multipart/mixed` Content-Type, or undefined when it is not one. */
export function multipartMixedBoundary(contentType: string | undefined): string | undefined {
  if (!contentType) return undefined;
  const [type, ...params] = contentType.split(';');
  if (type!.trim().toLowerCase() !== 'multipart/mixed') return undefined;
  for (const param of params) {
    const eq = param.indexOf('=');
    if (eq === -1 || param.slice(0, eq).trim().toLowerCase() !== 'boundary') continue;
    let value = param.slice(eq + 1).trim();
    if (value.length >= 2 && value.startsWith('"') && value.endsWith('"')) value = value.slice(1, -1);
    return BOUNDARY_PATTERN.test(value) ? value : undefined;
  }
  return undefined;
}

export interface MediaPart {
  /** The media part's headers, names in lower case. */
  headers: Map<string, string>;
  /** Its bytes as they arrive; throws MalformedMultipart when the message ends before its delimiter. */
  body: AsyncIterable<Buffer>;
}

/**
 * Reads the metadata part (checked to be JSON) and the media part's headers, and answers the media
 * part with its body still to be read. Nothing after the media part is read.
 */
export async function readMediaPart(source: AsyncIterable<Buffer>, boundary: string): Promise<MediaPart> {
  const reader = new StreamReader(source[Symbol.asyncIterator]());
  // A CRLF before the first delimiter makes every delimiter the same `CRLF--boundary`.
  reader.unshift(Buffer.from('\r\n'));
  const delimiter = Buffer.from(`\r\n--${boundary}`);
  await reader.readUntil(delimiter, MAX_PREAMBLE_BYTES);
  await startPart(reader);
  await readHeaders(reader);
  const metadata = await reader.readUntil(delimiter, MAX_METADATA_BYTES);
  try {
    JSON.parse(metadata.toString('utf8'));
  } catch {
    throw new MalformedMultipart('the metadata part is not JSON');
  }
  await startPart(reader);
  const headers = await readHeaders(reader);
  return { headers, body: reader.streamUntil(delimiter) };
}

/** After a delimiter: `--` ends the message (too early for us), else padding and CRLF. */
async function startPart(reader: StreamReader): Promise<void> {
  const line = await reader.readUntil(CRLF, MAX_DELIMITER_LINE_BYTES);
  if (line.subarray(0, 2).toString('latin1') === '--') throw new MalformedMultipart('the message ends before the media part');
  if (!/^[ \t]*$/.test(line.toString('latin1'))) throw new MalformedMultipart('unexpected text after a delimiter');
}

async function readHeaders(reader: StreamReader): Promise<Map<string, string>> {
  const headers = new Map<string, string>();
  // A part with no headers starts with its empty line.
  if (await reader.skipPrefix(CRLF)) return headers;
  const block = await reader.readUntil(HEADERS_END, MAX_HEADER_BYTES);
  for (const line of block.toString('latin1').split('\r\n')) {
    const colon = line.indexOf(':');
    if (colon <= 0) throw new MalformedMultipart('a part header without a name');
    headers.set(line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim());
  }
  return headers;
}

const CRLF = Buffer.from('\r\n');
const HEADERS_END = Buffer.from('\r\n\r\n');

/** A byte source read up to markers, keeping in memory only what a marker search needs. */
class StreamReader {
  private buffer: Buffer = Buffer.alloc(0);

  constructor(private readonly source: AsyncIterator<Buffer>) {}

  unshift(bytes: Buffer): void {
    this.buffer = Buffer.concat([bytes, this.buffer]);
  }

  /** Reads one more chunk into the buffer; false at the end of the source. */
  private async fill(): Promise<boolean> {
    const next = await this.source.next();
    if (next.done) return false;
    const chunk = next.value;
    this.buffer = this.buffer.length === 0 ? chunk : Buffer.concat([this.buffer, chunk]);
    return true;
  }

  /** True (and consumed) when the next bytes are `prefix`. */
  async skipPrefix(prefix: Buffer): Promise<boolean> {
    while (this.buffer.length < prefix.length) {
      if (!(await this.fill())) throw new MalformedMultipart('the message ends early');
    }
    if (!this.buffer.subarray(0, prefix.length).equals(prefix)) return false;
    this.buffer = this.buffer.subarray(prefix.length);
    return true;
  }

  /** The bytes before `marker` (consumed with it); at most `limit` of them. */
  async readUntil(marker: Buffer, limit: number): Promise<Buffer> {
    let searchFrom = 0;
    for (;;) {
      const at = this.buffer.indexOf(marker, searchFrom);
      if (at !== -1) {
        if (at > limit) break;
        const before = this.buffer.subarray(0, at);
        this.buffer = this.buffer.subarray(at + marker.length);
        return before;
      }
      if (this.buffer.length > limit + marker.length) break;
      searchFrom = Math.max(0, this.buffer.length - marker.length + 1);
      if (!(await this.fill())) throw new MalformedMultipart('the message ends early');
    }
    throw new MalformedMultipart(`more than ${limit} bytes before a boundary or the end of the headers`);
  }

  /**
   * Yields the bytes before `marker` as they arrive, holding back only what could be the start
   * of the marker; the marker is consumed.
   */
  async *streamUntil(marker: Buffer): AsyncGenerator<Buffer> {
    for (;;) {
      const at = this.buffer.indexOf(marker);
      if (at !== -1) {
        if (at > 0) yield this.buffer.subarray(0, at);
        this.buffer = this.buffer.subarray(at + marker.length);
        return;
      }
      const keep = marker.length - 1;
      if (this.buffer.length > keep) {
        const ready = this.buffer.subarray(0, this.buffer.length - keep);
        this.buffer = this.buffer.subarray(this.buffer.length - keep);
        yield ready;
      }
      if (!(await this.fill())) throw new MalformedMultipart('the message ends inside the media part');
    }
  }
}
