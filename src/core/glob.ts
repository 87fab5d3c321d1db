/**
 * Glob matching: filters' event types (`*` any run of characters, case-sensitive) and push rules
 * (the appendix's "glob-style matching": `*`, and `?` for exactly one, case-insensitive). Not
 * through regular expressions: a pattern is whatever a user put in a filter or rule, a body is up
 * to 64 KiB, and a backtracking regex on `*a*a*a*b` would hold the event loop. Placing the pieces
 * between stars leftmost is enough for globs, so a match costs at most the text's length times
 * the pattern's.
 */

export type GlobTest = (text: string) => boolean;

export interface GlobOptions {
  /** Push rules: `?` matches any one character, and case is ignored. Filters: neither. */
  pushRuleSyntax?: boolean;
  /** Match some stretch of the text that starts and ends at a word boundary (how push rules
   * match `content.body`) rather than the whole of it. */
  atWordBoundaries?: boolean;
}

export function compileGlob(glob: string, options: GlobOptions = {}): GlobTest {
  const pushSyntax = options.pushRuleSyntax === true;
  const wildcard = pushSyntax ? QUESTION_MARK : NO_WILDCARD;
  const prepare = pushSyntax ? (text: string) => text.toLowerCase() : (text: string) => text;
  // Pieces between the stars; runs of stars are one star.
  const pieces = prepare(glob).split('*');
  if (options.atWordBoundaries === true) return (text) => matchWithinWords(pieces, prepare(text), wildcard);
  if (pieces.length === 1 && (!pushSyntax || !pieces[0]!.includes('?'))) {
    // A literal: the length decides most comparisons without preparing anything.
    const literal = pieces[0]!;
    return (text) => text.length === literal.length && prepare(text) === literal;
  }
  return (text) => matchWhole(pieces, prepare(text), wildcard);
}

const QUESTION_MARK = 63;
/** No character code is this: filters have no one-character wildcard. */
const NO_WILDCARD = -1;

/** A literal (no wildcards) matched case-insensitively at word boundaries, for display names. */
export function compileWords(literal: string): GlobTest {
  const piece = literal.toLowerCase();
  return (text) => {
    const lowered = text.toLowerCase();
    for (let at = lowered.indexOf(piece); at >= 0; at = lowered.indexOf(piece, at + 1)) {
      if (boundaryBefore(lowered, at) && boundaryAfter(lowered, at + piece.length)) return true;
    }
    return false;
  };
}

function matchWhole(pieces: readonly string[], text: string, wildcard: number): boolean {
  const first = pieces[0]!;
  if (pieces.length === 1) return text.length === first.length && pieceAt(first, text, 0, wildcard);
  if (!pieceAt(first, text, 0, wildcard)) return false;
  const at = placeMiddle(pieces, text, first.length, wildcard);
  if (at < 0) return false;
  const last = pieces[pieces.length - 1]!;
  const lastStart = text.length - last.length;
  return lastStart >= at && pieceAt(last, text, lastStart, wildcard);
}

function matchWithinWords(pieces: readonly string[], text: string, wildcard: number): boolean {
  const first = pieces[0]!;
  if (pieces.length === 1) {
    for (let start = 0; start + first.length <= text.length; start++) {
      if (boundaryBefore(text, start) && pieceAt(first, text, start, wildcard) && boundaryAfter(text, start + first.length)) return true;
    }
    return false;
  }
  // With a star, the earliest start is the best one: every later start leaves less room for the rest.
  let start = 0;
  while (start + first.length <= text.length && !(boundaryBefore(text, start) && pieceAt(first, text, start, wildcard))) start++;
  if (start + first.length > text.length) return false;
  const at = placeMiddle(pieces, text, start + first.length, wildcard);
  if (at < 0) return false;
  const last = pieces[pieces.length - 1]!;
  for (let end = at + last.length; end <= text.length; end++) {
    if (boundaryAfter(text, end) && pieceAt(last, text, end - last.length, wildcard)) return true;
  }
  return false;
}

/** Places the pieces between the first and the last, each leftmost from `from`; where the last may start, or -1. */
function placeMiddle(pieces: readonly string[], text: string, from: number, wildcard: number): number {
  let at = from;
  for (let i = 1; i < pieces.length - 1; i++) {
    const piece = pieces[i]!;
    let found = -1;
    for (let start = at; start + piece.length <= text.length; start++) {
      if (pieceAt(piece, text, start, wildcard)) {
        found = start;
        break;
      }
    }
    if (found < 0) return -1;
    at = found + piece.length;
  }
  return at;
}

function pieceAt(piece: string, text: string, at: number, wildcard: number): boolean {
  if (at + piece.length > text.length) return false;
  for (let i = 0; i < piece.length; i++) {
    const char = piece.charCodeAt(i);
    if (char !== wildcard && char !== text.charCodeAt(at + i)) return false;
  }
  return true;
}

const WORD_CHAR = /[\p{L}\p{N}_]/u;

function boundaryBefore(text: string, at: number): boolean {
  return at === 0 || !WORD_CHAR.test(text[at - 1]!);
}

function boundaryAfter(text: string, at: number): boolean {
  return at === text.length || !WORD_CHAR.test(text[at]!);
}
