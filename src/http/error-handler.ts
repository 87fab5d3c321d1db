/**
 * The one translator from thrown errors to Matrix error bodies. Client mistakes keep their
 * errcode and Synapse's status; anything unexpected is logged and answered 500 `M_UNKNOWN`
 * without internals.
 */
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import FindMyWay, { type HTTPMethod, type HTTPVersion } from 'find-my-way';
import { MatrixError } from '../core/errors.js';
import { MAX_JSON_DEPTH } from '../core/json.js';
import { NOT_JSON, TOO_DEEP } from './json-bodies.js';

/** Errors Fastify raises before routing (a malformed URL), answered like every other error. */
export function frameworkErrorHandler(error: FastifyError, _request: FastifyRequest, reply: FastifyReply): void {
  const status = error.statusCode && error.statusCode >= 400 && error.statusCode < 500 ? error.statusCode : 400;
  sendError(reply, new MatrixError('M_UNKNOWN', error.code === 'FST_ERR_BAD_URL' ? 'Invalid URL' : error.message, { status }));
}

export function installErrorHandling(app: FastifyInstance): void {
  app.setErrorHandler((error: FastifyError, request, reply) => {
    const matrixError = toMatrixError(error, request);
    // Another server that failed or did not answer (502, 504, said so on purpose) is no fault
    // of ours: a warning, not an error.
    if (error instanceof MatrixError && (matrixError.status === 502 || matrixError.status === 504)) request.log.warn({ err: error }, 'another server failed');
    else if (matrixError.status >= 500) request.log.error({ err: error }, 'unexpected error');
    sendError(reply, matrixError);
  });

  // Every registered path, to tell "no such endpoint" (404) from "wrong method" (405). The router
  // is built on the first unknown request: compiling every route a second time at start cost
  // about a sixth of starting an app.
  const routes: Array<[HTTPMethod, string]> = [];
  let knownRoutes: ReturnType<typeof FindMyWay<HTTPVersion.V1>> | undefined;
  app.addHook('onRoute', (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    for (const method of methods as HTTPMethod[]) {
      if (method !== 'HEAD' && method !== 'OPTIONS') routes.push([method, route.url]);
    }
  });
  const routerOfKnownRoutes = () => {
    if (!knownRoutes) {
      knownRoutes = FindMyWay<HTTPVersion.V1>({ ignoreTrailingSlash: false });
      const noop = () => undefined;
      for (const [method, url] of routes) if (!knownRoutes.hasRoute(method, url)) knownRoutes.on(method, url, noop);
    }
    return knownRoutes;
  };

  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split('?')[0] ?? '/';
    const known = routerOfKnownRoutes();
    const allowed = ['GET', 'PUT', 'POST', 'DELETE'].filter(
      (method) => method !== request.method && known.find(method as 'GET', path) !== null,
    );
    if (allowed.length > 0) {
      reply.header('Allow', allowed.join(', '));
      sendError(reply, new MatrixError('M_UNRECOGNIZED', 'Unrecognized request', { status: 405 }));
      return;
    }
    sendError(reply, new MatrixError('M_UNRECOGNIZED', 'Unrecognized request'));
  });
}

export function sendError(reply: FastifyReply, error: MatrixError): void {
  reply.code(error.status).headers(error.headers).type('application/json').send(error.toJSON());
}

interface ValidationIssue {
  keyword: string;
  instancePath: string;
  message?: string;
  params: Record<string, unknown>;
}

function toMatrixError(error: FastifyError, request: FastifyRequest): MatrixError {
  if (error instanceof MatrixError) return error;
  if (error.validation) return validationError(error, request);
  switch (error.code) {
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return new MatrixError('M_NOT_JSON', 'Content not JSON.');
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new MatrixError('M_TOO_LARGE', 'Request body too large');
  }
  // Fastify's own 4xx (a malformed URL, say) are the client's doing: keep the status, not the internals.
  const status = error.statusCode ?? 500;
  if (status >= 400 && status < 500) return new MatrixError('M_UNKNOWN', error.message, { status });
  return new MatrixError('M_UNKNOWN', 'Internal server error', { status: 500 });
}

function validationError(error: FastifyError, request: FastifyRequest): MatrixError {
  const context = error.validationContext ?? 'body';
  if (context === 'body' && request.body === TOO_DEEP) {
    return new MatrixError('M_BAD_JSON', `Content is nested too deeply (more than ${MAX_JSON_DEPTH} levels)`);
  }
  if (context === 'body' && (request.body === undefined || request.body === null || request.body === NOT_JSON)) {
    return new MatrixError('M_NOT_JSON', 'Content not JSON.');
  }
  const issue = (error.validation as ValidationIssue[])[0];
  const where = describeLocation(context, issue);
  const message = issue?.message ?? 'is invalid';
  if (issue?.keyword === 'enum') {
    const allowed = (issue.params.allowedValues as unknown[]).map((value) => JSON.stringify(value)).join(', ');
    return new MatrixError(context === 'body' ? 'M_BAD_JSON' : 'M_INVALID_PARAM', `${where} must be one of ${allowed}`);
  }
  if (context === 'body') {
    if (issue?.instancePath === '' && issue.keyword === 'type') {
      return new MatrixError('M_BAD_JSON', 'Content must be a JSON object.');
    }
    if (issue?.keyword === 'required') return new MatrixError('M_BAD_JSON', `${where} is required`);
    return new MatrixError('M_BAD_JSON', `${where} ${message}`);
  }
  if (issue?.keyword === 'required') return new MatrixError('M_MISSING_PARAM', `Missing ${where}`);
  return new MatrixError('M_INVALID_PARAM', `${where} ${message}`);
}

/** "body.identifier.user", "query parameter limit", ... */
function describeLocation(context: string, issue: ValidationIssue | undefined): string {
  const segments = (issue?.instancePath ?? '').split('/').filter(Boolean);
  if (issue?.keyword === 'required') segments.push(String(issue.params.missingProperty));
  const path = segments.join('.');
  if (context === 'querystring') return `query parameter ${path || '(query)'}`;
  if (context === 'params') return `path parameter ${path}`;
  return `${context}${path ? `.${path}` : ''}`;
}
