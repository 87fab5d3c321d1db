/**
 * Route schema validation. Bodies are validated strictly (a password sent as the number 5 is a
 * wrong shape, not the string "5"); query strings and path segments arrive as text, so they are
 * coerced to the declared types. Nothing is removed from bodies: event content is free-form.
 */
import type { TSchema } from '@sinclair/typebox';
import { Ajv, type Options, type ValidateFunction } from 'ajv';
import type { FastifyInstance } from 'fastify';
import { NOT_JSON, TOO_DEEP } from './json-bodies.js';
import { compiledOnFirstUse } from '../schemas.js';

// The schemas are ours, so they are not checked against the meta-schema (compiling that cost ~30 ms
// per Ajv instance, on the first request).
const common: Options = { useDefaults: true, allErrors: false, strict: false, allowUnionTypes: true, validateSchema: false };
const OPTIONAL_BODY = 'x-optional-body';

/**
 * Marks a body schema as one the client may leave out entirely (Synapse's deactivate and
 * override_ratelimit take an empty POST). A plain keyword, since Fastify copies schemas.
 */
export function optionalBody<T extends TSchema>(schema: T): T {
  return { ...schema, [OPTIONAL_BODY]: true };
}

// Shared by every app in the process, with compiled validators kept by schema text: compiling is
// most of what building an app costs, and a test process builds many (one per test or reset).
// Fastify hands each route a copy of its schema, so the text, not the object, is the key.
const bodies = new Ajv({ ...common, coerceTypes: false });
const textParts = new Ajv({ ...common, coerceTypes: 'array' });
const compiled = new Map<string, ValidateFunction>();

function compile(ajv: Ajv, kind: string, schema: object): ValidateFunction {
  const key = `${kind}\n${JSON.stringify(schema)}`;
  let validate = compiled.get(key);
  if (!validate) {
    validate = ajv.compile(schema);
    compiled.set(key, validate);
  }
  return validate;
}

export function installValidation(app: FastifyInstance): void {
  app.setValidatorCompiler(({ schema, httpPart }) => {
    if (httpPart !== 'body') return compiledOnFirstUse(() => compile(textParts, 'text', schema as object));
    const validate = compiledOnFirstUse(() => compile(bodies, 'body', schema as object));
    const optional = (schema as Record<string, unknown>)[OPTIONAL_BODY] === true;
    const validateBody = (data: unknown): boolean => {
      // A body that did not parse fails here, on routes that read a body, and nowhere else; the
      // error handler sees the stand-in and answers M_NOT_JSON (M_BAD_JSON when too deep).
      if (data === NOT_JSON || data === TOO_DEEP) {
        validateBody.errors = [{ keyword: 'type', instancePath: '', schemaPath: '#', params: {}, message: 'not JSON' }];
        return false;
      }
      // Fastify hands a missing body to validators as null.
      if (optional && (data === undefined || data === null)) return true;
      const valid = validate(data);
      validateBody.errors = validate.errors;
      return valid;
    };
    validateBody.errors = null as typeof validate.errors;
    return validateBody;
  });
}
