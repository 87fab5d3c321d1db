/**
 * Route schema validation. Bodies are validated strictly (a password sent as the number 5 is a
 * wrong shape, not the string "5"); query strings and path segments arrive as text, so they are
 * coerced to the declared types. Nothing is removed from bodies: event content is free-form.
 */
import { Ajv, type Options } from 'ajv';
import type { FastifyInstance } from 'fastify';

const common: Options = { useDefaults: true, allErrors: false, strict: false, allowUnionTypes: true };

export function installValidation(app: FastifyInstance): void {
  const bodies = new Ajv({ ...common, coerceTypes: false });
  const textParts = new Ajv({ ...common, coerceTypes: 'array' });
  app.setValidatorCompiler(({ schema, httpPart }) =>
    (httpPart === 'body' ? bodies : textParts).compile(schema as object),
  );
}
