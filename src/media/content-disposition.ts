/**
 * What a media download tells the browser: show it (`inline`) only for types that cannot run
 * script in our origin, otherwise `attachment`. The list is the one the spec's download
 * endpoints point at (and Synapse serves inline): plain text, images, audio and video.
 */
const INLINE_TYPES = new Set([
  'text/css', 'text/plain', 'text/csv',
  'application/json', 'application/ld+json',
  'image/jpeg', 'image/gif', 'image/png', 'image/apng', 'image/webp', 'image/avif',
  'video/mp4', 'video/webm', 'video/ogg', 'video/quicktime',
  'audio/mp4', 'audio/webm', 'audio/aac', 'audio/mpeg', 'audio/ogg',
  'audio/wave', 'audio/wav', 'audio/x-wav', 'audio/x-pn-wav', 'audio/flac', 'audio/x-flac',
]);

/** Types a thumbnail may have (the spec's list); other media has no thumbnail here. */
export const THUMBNAIL_TYPES = new Set(['image/jpeg', 'image/png', 'image/apng', 'image/gif', 'image/webp']);

/** `image/png; charset=x` → `image/png`. */
export function baseType(contentType: string): string {
  return (contentType.split(';')[0] ?? '').trim().toLowerCase();
}

export function isInlineType(contentType: string): boolean {
  return INLINE_TYPES.has(baseType(contentType));
}

/**
 * `inline; filename="cat.png"` or `attachment; filename*=utf-8''%E7%8C%AB.png`. Plain printable
 * ASCII goes in a quoted `filename`; anything else (non-ASCII, quotes, backslashes, controls) is
 * percent-encoded in RFC 6266's `filename*`, so no filename can break the header.
 */
export function contentDisposition(contentType: string, filename: string | null | undefined): string {
  const disposition = isInlineType(contentType) ? 'inline' : 'attachment';
  if (!filename) return disposition;
  if (/^[\x20-\x7e]*$/.test(filename) && !/["\\]/.test(filename)) return `${disposition}; filename="${filename}"`;
  return `${disposition}; filename*=utf-8''${encodeRfc5987(filename)}`;
}

/** Percent-encoding for RFC 5987 values: encodeURIComponent leaves `'()*` bare, which attr-char forbids. */
function encodeRfc5987(value: string): string {
  return encodeURIComponent(value).replace(/['()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}
