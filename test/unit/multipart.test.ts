/** The streaming reader of federation media answers (multipart/mixed), cut into chunks every way. */
import { describe, expect, it } from 'vitest';
import { MalformedMultipart, multipartMixedBoundary, readMediaPart } from '../../src/federation/multipart.js';

const BOUNDARY = 'bhs6f1e2d';

function message(media: Buffer, options: { preamble?: string; mediaHeaders?: string; metadata?: string; boundary?: string } = {}): Buffer {
  const boundary = options.boundary ?? BOUNDARY;
  return Buffer.concat([
    Buffer.from(`${options.preamble ?? ''}--${boundary}\r\nContent-Type: application/json\r\n\r\n${options.metadata ?? '{}'}\r\n--${boundary}\r\n${options.mediaHeaders ?? 'Content-Type: image/png\r\nContent-Disposition: inline; filename="a.png"\r\n'}\r\n`),
    media,
    Buffer.from(`\r\n--${boundary}--\r\n`),
  ]);
}

async function* chunked(bytes: Buffer, size: number): AsyncGenerator<Buffer> {
  for (let at = 0; at < bytes.length; at += size) yield bytes.subarray(at, at + size);
}

async function read(source: AsyncIterable<Buffer>, boundary = BOUNDARY): Promise<{ headers: Map<string, string>; body: Buffer; chunks: number }> {
  const part = await readMediaPart(source, boundary);
  const pieces: Buffer[] = [];
  for await (const piece of part.body) pieces.push(piece);
  return { headers: part.headers, body: Buffer.concat(pieces), chunks: pieces.length };
}

describe('multipart/mixed media answers', () => {
  it('finds the boundary of multipart/mixed only', () => {
    expect(multipartMixedBoundary(`multipart/mixed; boundary=${BOUNDARY}`)).toBe(BOUNDARY);
    expect(multipartMixedBoundary('Multipart/Mixed; charset=x; boundary="a b:c"')).toBe('a b:c');
    expect(multipartMixedBoundary('multipart/form-data; boundary=x')).toBeUndefined();
    expect(multipartMixedBoundary('multipart/mixed')).toBeUndefined();
    expect(multipartMixedBoundary(`multipart/mixed; boundary=${'x'.repeat(71)}`)).toBeUndefined();
    expect(multipartMixedBoundary(undefined)).toBeUndefined();
  });

  it('reads the media part whatever the chunk sizes, including media that looks like a boundary', async () => {
    // Bytes that start the delimiter without finishing it, CRLFs and dashes inside the media.
    const media = Buffer.concat([Buffer.from(`x\r\n--${BOUNDARY.slice(0, 5)}y\r\n\r\n--\r\n`), Buffer.alloc(300, 0xab), Buffer.from(`\r\n-${BOUNDARY}`)]);
    const whole = message(media, { preamble: 'ignored preamble\r\n' });
    for (const size of [1, 2, 3, 7, 13, 64, 100, whole.length]) {
      const got = await read(chunked(whole, size));
      expect(Buffer.compare(got.body, media)).toBe(0);
      expect(got.headers.get('content-type')).toBe('image/png');
      expect(got.headers.get('content-disposition')).toBe('inline; filename="a.png"');
    }
  });

  it('hands the media on as it arrives, holding back no more than a delimiter', async () => {
    const media = Buffer.alloc(1_000_000, 1);
    const got = await read(chunked(message(media), 16_384));
    expect(got.body.length).toBe(media.length);
    expect(got.chunks).toBeGreaterThan(50);
  });

  it('reads empty media and a part without headers', async () => {
    const got = await read(chunked(message(Buffer.alloc(0), { mediaHeaders: '' }), 5));
    expect(got.body.length).toBe(0);
    expect(got.headers.size).toBe(0);
  });

  it('refuses what is not the message the spec describes', async () => {
    const cases: Buffer[] = [
      // Cut short inside the media.
      message(Buffer.alloc(100, 2)).subarray(0, 250),
      // The metadata is not JSON.
      message(Buffer.alloc(10), { metadata: 'not json' }),
      // Only one part.
      Buffer.from(`--${BOUNDARY}\r\nContent-Type: application/json\r\n\r\n{}\r\n--${BOUNDARY}--\r\n`),
      // Another boundary.
      message(Buffer.alloc(10), { boundary: 'other' }),
      // Headers without end.
      Buffer.from(`--${BOUNDARY}\r\n${'X-A: b\r\n'.repeat(5000)}`),
      // A metadata part far too large.
      message(Buffer.alloc(10), { metadata: `"${'a'.repeat(100_000)}"` }),
    ];
    for (const bytes of cases) {
      await expect(read(chunked(bytes, 4096))).rejects.toBeInstanceOf(MalformedMultipart);
    }
  });
});
