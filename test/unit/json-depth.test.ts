import { describe, expect, it } from 'vitest';
import { JsonTooDeepError, jsonTextExceedsDepth, jsonValueExceedsDepth, MAX_JSON_DEPTH, parseJsonSafely, parseStoredJson } from '../../src/core/json.js';

const nested = (depth: number, open = '[', close = ']') => open.repeat(depth) + close.repeat(depth);

describe('JSON depth', () => {
  it('counts objects and arrays alike, top level included', () => {
    expect(jsonTextExceedsDepth(nested(3), 3)).toBe(false);
    expect(jsonTextExceedsDepth(nested(4), 3)).toBe(true);
    expect(jsonTextExceedsDepth('{"a":[{"b":[1]}]}', 4)).toBe(false);
    expect(jsonTextExceedsDepth('{"a":[{"b":[1]}]}', 3)).toBe(true);
    // Siblings do not add up.
    expect(jsonTextExceedsDepth('[[1],[2],[3],[4],[5],[6]]', 2)).toBe(false);
  });

  it('ignores brackets inside strings, escaped quotes included', () => {
    expect(jsonTextExceedsDepth(`{"a":"${'['.repeat(50)}"}`, 1)).toBe(false);
    expect(jsonTextExceedsDepth(`{"a":"\\"${'{'.repeat(50)}\\\\"}`, 1)).toBe(false);
    expect(jsonTextExceedsDepth(`{"a":"\\\\",${'"b":{'.repeat(3)}1}}}}`, 3)).toBe(true);
  });

  it('walks parsed values without recursion, however deep', () => {
    const deep = JSON.parse(nested(200_000)) as unknown;
    expect(jsonValueExceedsDepth(deep, MAX_JSON_DEPTH)).toBe(true);
    expect(jsonValueExceedsDepth({ a: [{ b: [1] }] }, 4)).toBe(false);
    expect(jsonValueExceedsDepth({ a: [{ b: [1] }] }, 3)).toBe(true);
    expect(jsonValueExceedsDepth('just text', 0)).toBe(false);
  });

  it('parses up to the limit and refuses past it, before parsing', () => {
    expect(parseJsonSafely(nested(MAX_JSON_DEPTH))).toBeInstanceOf(Array);
    expect(() => parseJsonSafely(nested(MAX_JSON_DEPTH + 1))).toThrow(JsonTooDeepError);
    expect(() => parseJsonSafely(nested(1_000_000))).toThrow(JsonTooDeepError);
    expect(() => parseJsonSafely('{"a": ')).toThrow(SyntaxError);
    expect(parseJsonSafely('{"__proto__": {"x": 1}, "y": 2}')).toEqual({ y: 2 });
  });

  it('reads a stored row too deep to serialize as the fallback', () => {
    expect(parseStoredJson(nested(10_000), { fallback: true })).toEqual({ fallback: true });
    expect(parseStoredJson('{"a":{"b":1}}', {})).toEqual({ a: { b: 1 } });
  });
});
