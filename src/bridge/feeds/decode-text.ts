// Turns a feed's bytes into text. Feeds in the wild carry every legacy encoding, often declared
// only in the XML declaration and sometimes not at all, so we look in this order: byte order
// mark, the XML declaration's `encoding`, the HTTP `charset`, then sniff (valid UTF-8, else
// windows-1252, which is what undeclared Latin-1 feeds almost always are).
import iconv from 'iconv-lite';

const UTF8_BOM = [0xef, 0xbb, 0xbf];
const UTF16LE_BOM = [0xff, 0xfe];
const UTF16BE_BOM = [0xfe, 0xff];

// Browsers (WHATWG Encoding) read these labels as their supersets; feeds labelled ISO-8859-1 often
// contain windows-1252 curly quotes, and gb2312 feeds often contain GBK characters.
const SUPERSET_OF: Record<string, string> = {
  'iso-8859-1': 'windows-1252',
  'iso8859-1': 'windows-1252',
  latin1: 'windows-1252',
  'us-ascii': 'windows-1252',
  ascii: 'windows-1252',
  gb2312: 'gbk',
};

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

export function decodeFeedText(body: Buffer, contentType?: string): string {
  const encoding = encodingFromBom(body);
  if (encoding) return iconv.decode(body, encoding, { stripBOM: true });

  const declared = usableEncoding(xmlDeclaredEncoding(body)) ?? usableEncoding(httpCharset(contentType));
  if (declared) return stripBom(iconv.decode(body, declared));

  try {
    return stripBom(strictUtf8.decode(body));
  } catch {
    return iconv.decode(body, 'windows-1252');
  }
}

function encodingFromBom(body: Buffer): string | undefined {
  if (startsWith(body, UTF8_BOM)) return 'utf-8';
  if (startsWith(body, UTF16LE_BOM)) return 'utf-16le';
  if (startsWith(body, UTF16BE_BOM)) return 'utf-16be';
  return undefined;
}

function startsWith(body: Buffer, prefix: number[]): boolean {
  return prefix.every((byte, i) => body[i] === byte);
}

/** The `encoding` pseudo-attribute of the `<?xml ...?>` declaration near the start (not of `<?xml-stylesheet`). */
function xmlDeclaredEncoding(body: Buffer): string | undefined {
  const head = body.subarray(0, 1024).toString('latin1');
  // Text before the declaration (a stray newline, a PHP warning) is skipped, as the parser will.
  return /<\?xml\s[^>]*?\bencoding\s*=\s*["']([A-Za-z0-9._:-]+)["']/.exec(head)?.[1];
}

function httpCharset(contentType: string | undefined): string | undefined {
  if (!contentType) return undefined;
  return /;\s*charset\s*=\s*"?([^";\s]+)/i.exec(contentType)?.[1];
}

/** The label as iconv-lite knows it, or undefined for a label it cannot decode (we then look further). */
function usableEncoding(label: string | undefined): string | undefined {
  if (!label) return undefined;
  const normalized = label.trim().toLowerCase();
  const chosen = SUPERSET_OF[normalized] ?? normalized;
  return iconv.encodingExists(chosen) ? chosen : undefined;
}

function stripBom(text: string): string {
  return text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
}
