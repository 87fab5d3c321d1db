/**
 * Reading JSON that other people wrote: request bodies, inline filters, webhook payloads.
 *
 * Two hazards are handled here, below every domain, so every reader gets the same answer:
 * - `__proto__` keys (and `constructor.prototype`), which would reach object prototypes when the
 *   server copies, merges or projects the parsed value;
 * - nesting. `JSON.parse` copes with any depth, but almost everything after it recurses
 *   (`JSON.stringify`, Fastify's reply serializer, redaction, `event_fields`): an event nested
 *   a few thousand levels deep, once stored, made every read of its room overflow the stack.
 *   So depth is refused at the door, before anything is stored.
 */
import secureJson from 'secure-json-parse';

/**
 * The deepest nesting a request body may have (the top-level object counts as 1): what Synapse
 * accepts, so every event a Synapse user can send reaches our bots too. Synapse 1.67 (Python
 * 3.11) parsed a message whose content nests 945 levels and refused 946 (`M_NOT_JSON`: its
 * parser ran out of recursion), measured against a running Synapse. Real events nest a few
 * levels; JavaScript's recursive readers (JSON.stringify, the reply serializer) cope with many
 * times this depth, so what is accepted can always be read back.
 */
export const MAX_JSON_DEPTH = 945;

/** A body nested deeper than the limit: refused, and never parsed. */
export class JsonTooDeepError extends Error {
  override name = 'JsonTooDeepError';
  constructor(readonly limit: number) {
    super(`JSON nested more than ${limit} levels deep`);
  }
}

/**
 * True when `text` nests objects or arrays more than `limit` levels deep. One pass over the text
 * that skips strings; a text no longer than the limit cannot be that deep (every level needs its
 * own bracket), so ordinary bodies cost one comparison.
 */
export function jsonTextExceedsDepth(text: string, limit: number): boolean {
  if (text.length <= limit || openingBracketsAtMost(text, limit)) return false;
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (inString) {
      if (code === 0x5c) i++; // backslash: the next character is escaped
      else if (code === 0x22) inString = false;
      continue;
    }
    if (code === 0x22) inString = true;
    else if (code === 0x7b || code === 0x5b) {
      if (++depth > limit) return true;
    } else if (code === 0x7d || code === 0x5d) depth--;
  }
  return false;
}

/**
 * True when the text has at most `limit` opening brackets, so it cannot nest deeper. Counted with
 * `indexOf`, which runs natively: a long message with a handful of brackets costs a few calls,
 * not a JavaScript loop over every character (stored events are checked on every read).
 */
function openingBracketsAtMost(text: string, limit: number): boolean {
  let count = 0;
  for (const bracket of ['{', '[']) {
    for (let at = text.indexOf(bracket); at !== -1; at = text.indexOf(bracket, at + 1)) {
      if (++count > limit) return false;
    }
  }
  return true;
}

/**
 * True when a parsed value nests objects or arrays more than `limit` levels deep. Iterative, so
 * it is safe on values no recursive function could walk.
 */
export function jsonValueExceedsDepth(value: unknown, limit: number): boolean {
  const stack: Array<[unknown, number]> = [[value, 1]];
  for (let entry = stack.pop(); entry !== undefined; entry = stack.pop()) {
    const [current, depth] = entry;
    if (typeof current !== 'object' || current === null) continue;
    if (depth > limit) return true;
    const children = Array.isArray(current) ? current : Object.values(current);
    for (const child of children) if (typeof child === 'object' && child !== null) stack.push([child, depth + 1]);
  }
  return false;
}

/**
 * JSON.parse that drops `__proto__` keys (and `constructor.prototype`) and refuses text nested
 * deeper than `maxDepth` with a JsonTooDeepError. Throws a SyntaxError on text that is not JSON.
 */
export function parseJsonSafely(text: string, maxDepth: number = MAX_JSON_DEPTH): unknown {
  if (jsonTextExceedsDepth(text, maxDepth)) throw new JsonTooDeepError(maxDepth);
  return secureJson.parse(text, undefined, { protoAction: 'remove', constructorAction: 'remove' });
}

/**
 * JSON.parse for text this server stored itself, with a belt for rows written before the depth
 * limit existed: a value nested too deep is replaced by `fallback`, so one bad row cannot make
 * every read that meets it fail.
 */
export function parseStoredJson<T>(text: string, fallback: T): T {
  if (jsonTextExceedsDepth(text, MAX_JSON_DEPTH)) return fallback;
  return JSON.parse(text) as T;
}
