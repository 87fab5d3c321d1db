/** Schema helpers shared by the config schema and the route schemas. */
import { Type } from '@sinclair/typebox';
import type { ValidateFunction } from 'ajv';

/**
 * One of a fixed set of strings, as a JSON Schema `enum`: Ajv's error then carries the allowed
 * values, so a wrong value (in the config or a request) is told what it may be.
 */
export function StringEnum<const T extends string>(values: readonly T[], options: { default?: NoInfer<T> } = {}) {
  return Type.Unsafe<T>({ type: 'string', enum: [...values], ...options });
}

/**
 * A validator compiled by `compile` on its first call, not before: the server has a few hundred
 * schemas and a bot exercises a dozen, and compiling them all up front was most of start-up.
 */
export function compiledOnFirstUse(compile: () => ValidateFunction): ValidateFunction {
  let validate: ValidateFunction | undefined;
  const lazy = ((data: unknown) => {
    validate ??= compile();
    const valid = validate(data);
    lazy.errors = validate.errors;
    return valid;
  }) as ValidateFunction;
  lazy.errors = null;
  return lazy;
}
