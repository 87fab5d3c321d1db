/**
 * Canonical JSON (appendices, "Canonical JSON"): the shortest UTF-8 encoding with object keys in
 * Unicode code point order and integers only. Every hash and signature in Matrix is over these
 * bytes, so they must come out the same as on every other server.
 */

/** The integer range canonical JSON allows: [-(2**53)+1, (2**53)-1]. */
export const MAX_SAFE_JSON_INTEGER = Number.MAX_SAFE_INTEGER;

/** A value canonical JSON cannot encode (a float, an integer out of range, a non-finite number). */
export class NotCanonicalJsonError extends Error {
  override name = 'NotCanonicalJsonError';
}

export interface CanonicalJsonOptions {
  /**
   * Room versions 1-5 predate the integer rule, and their events may carry floats or large
   * integers: `lenient` encodes such numbers as JavaScript does instead of refusing them.
   */
  lenient?: boolean;
}

/** The canonical JSON text of `value` (its UTF-8 bytes are what gets hashed and signed). */
export function canonicalJson(value: unknown, options: CanonicalJsonOptions = {}): string {
  const parts: string[] = [];
  encode(value, parts, options.lenient === true);
  return parts.join('');
}

/** The canonical JSON bytes of `value`. */
export function canonicalJsonBytes(value: unknown, options: CanonicalJsonOptions = {}): Buffer {
  return Buffer.from(canonicalJson(value, options), 'utf8');
}

/**
 * Why `value` is not canonical JSON (a float, an integer outside the range, nested deeper than
 * `maxDepth`), or undefined when it is. Walks iteratively, so any depth is safe to ask about.
 */
export function canonicalJsonProblem(value: unknown, maxDepth = Number.POSITIVE_INFINITY): string | undefined {
  const stack: Array<[unknown, number, string]> = [[value, 1, '']];
  for (let entry = stack.pop(); entry !== undefined; entry = stack.pop()) {
    const [current, depth, path] = entry;
    if (typeof current === 'number') {
      const problem = numberProblem(current);
      if (problem) return `${path || 'the value'} ${problem}`;
      continue;
    }
    if (typeof current !== 'object' || current === null) continue;
    if (depth > maxDepth) return `${path || 'the value'} is nested more than ${maxDepth} levels deep`;
    if (Array.isArray(current)) {
      for (let i = current.length - 1; i >= 0; i--) stack.push([current[i], depth + 1, `${path}[${i}]`]);
    } else {
      for (const [key, child] of Object.entries(current)) stack.push([child, depth + 1, path ? `${path}.${key}` : key]);
    }
  }
  return undefined;
}

function numberProblem(value: number): string | undefined {
  if (!Number.isFinite(value)) return 'is not a finite number';
  if (!Number.isInteger(value)) return 'is not an integer (floats are not allowed)';
  if (Math.abs(value) > MAX_SAFE_JSON_INTEGER) return `is outside the integer range ±(2^53−1)`;
  return undefined;
}

function encode(value: unknown, parts: string[], lenient: boolean): void {
  switch (typeof value) {
    case 'string':
      // JSON.stringify writes exactly the escapes canonical JSON asks for: \" \\ \b \f \n \r \t,
      // \u00XX in lower case for the other control characters, and everything else as is.
      parts.push(JSON.stringify(value));
      return;
    case 'number': {
      const problem = numberProblem(value);
      if (problem !== undefined && !(lenient && Number.isFinite(value))) throw new NotCanonicalJsonError(`a number ${problem}`);
      // -0 is written 0, and 1e10 as 10000000000 (JSON.stringify does both for integers).
      parts.push(Object.is(value, -0) ? '0' : JSON.stringify(value));
      return;
    }
    case 'boolean':
      parts.push(value ? 'true' : 'false');
      return;
    case 'object':
      if (value === null) {
        parts.push('null');
        return;
      }
      if (Array.isArray(value)) {
        parts.push('[');
        for (let i = 0; i < value.length; i++) {
          if (i > 0) parts.push(',');
          // Like JSON.stringify, an undefined in an array is null.
          encode(value[i] === undefined ? null : value[i], parts, lenient);
        }
        parts.push(']');
        return;
      }
      encodeObject(value as Record<string, unknown>, parts, lenient);
      return;
    default:
      throw new NotCanonicalJsonError(`a ${typeof value} is not JSON`);
  }
}

function encodeObject(object: Record<string, unknown>, parts: string[], lenient: boolean): void {
  const keys = Object.keys(object).filter((key) => object[key] !== undefined);
  keys.sort(compareCodePoints);
  parts.push('{');
  for (let i = 0; i < keys.length; i++) {
    const key = keys[i]!;
    if (i > 0) parts.push(',');
    parts.push(JSON.stringify(key), ':');
    encode(object[key], parts, lenient);
  }
  parts.push('}');
}

/**
 * Orders strings by Unicode code point. JavaScript compares UTF-16 code units, which puts a
 * character above U+FFFF (a surrogate pair, 0xD800-0xDFFF) before U+E000-U+FFFF; code point
 * order puts it after. Only such a pair of characters at the first difference needs the fix.
 */
export function compareCodePoints(a: string, b: string): number {
  if (a === b) return 0;
  const length = Math.min(a.length, b.length);
  for (let i = 0; i < length; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x === y) continue;
    if (x >= 0xd800 && y >= 0xd800) return codePointRank(x) - codePointRank(y);
    return x - y;
  }
  return a.length - b.length;
}

/** Surrogates (0xD800-0xDFFF) move above 0xE000-0xFFFF; 0xE000-0xFFFF move down to make room. */
function codePointRank(unit: number): number {
  return unit <= 0xdfff ? unit + 0x2000 : unit - 0x800;
}
