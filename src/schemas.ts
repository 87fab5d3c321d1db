/** Schema helpers shared by the config schema and the route schemas. */
import { Type } from '@sinclair/typebox';

/**
 * One of a fixed set of strings, as a JSON Schema `enum`: Ajv's error then carries the allowed
 * values, so a wrong value (in the config or a request) is told what it may be.
 */
export function StringEnum<const T extends string>(values: readonly T[], options: { default?: NoInfer<T> } = {}) {
  return Type.Unsafe<T>({ type: 'string', enum: [...values], ...options });
}
