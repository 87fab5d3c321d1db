// Validates HTTP responses against the official Matrix Client-Server OpenAPI documents
// (see test/fixtures/matrix-spec/VALIDATING.md for why things are done the way they are).
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { performance } from 'node:perf_hooks';
import { Ajv2020 } from 'ajv/dist/2020.js';
import type { ErrorObject, ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsImport from 'ajv-formats';
import { parse as parseYaml } from 'yaml';

// ajv-formats is CommonJS: under NodeNext the default import is typed as the whole module,
// while at runtime it is the plugin function itself.
type FormatsPlugin = typeof addFormatsImport.default;
const addFormats: FormatsPlugin =
  (addFormatsImport as unknown as { default?: FormatsPlugin }).default ??
  (addFormatsImport as unknown as FormatsPlugin);

// ---------------------------------------------------------------------------------------------
// Public types

/** What `expect*` helpers accept: a supertest response, a fastify `inject()` response, or a plain object. */
export interface ResponseLike {
  status?: number;
  statusCode?: number;
  /** Parsed body (supertest, plain objects) or raw payload string (fastify inject). */
  body?: unknown;
  /** fastify inject (light-my-request) parses the payload via `json()`. */
  json?: () => unknown;
  headers?: Record<string, unknown>;
  /** supertest: the superagent request (method + absolute url). */
  request?: { method?: string; url?: string };
  /** fastify inject: the simulated IncomingMessage. */
  raw?: { req?: { method?: string; url?: string } };
}

/** A spec operation a request path resolved to. */
export interface SpecOperation {
  /** Document file relative to data/api/client-server, e.g. `login.yaml`. */
  file: string;
  /** Lower-case HTTP method. */
  method: string;
  /** Full path template including the server base path, e.g. `/_matrix/client/v3/login`. */
  template: string;
  operationId: string | undefined;
}

export interface SpecResponseExample {
  operation: SpecOperation;
  status: string;
  name: string;
  /** A concrete request path for the operation (every `{param}` filled with `param`). */
  path: string;
  /** The example value with its `$ref`s to data/event-schemas/examples resolved. */
  value: unknown;
}

// ---------------------------------------------------------------------------------------------
// Loading (once per process, lazily)

type Json = unknown;
type JsonObject = Record<string, unknown>;

interface IndexedOperation extends SpecOperation {
  docUrl: string;
  /** JSON pointer tokens from the document root to the operation object. */
  pointer: string[];
  segments: string[];
  literalCount: number;
  op: JsonObject;
}

interface SpecIndex {
  dataDir: string;
  ajv: Ajv2020;
  docs: Map<string, Json>;
  operations: IndexedOperation[];
  validators: Map<string, ValidateFunction>;
  loadMs: number;
}

const HTTP_METHODS = new Set(['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace']);

let cached: SpecIndex | undefined;

/**
 * Directory that holds the spec's `data/` folder: the copy in the repository
 * (test/fixtures/matrix-spec, refreshed by scripts/refresh-spec.mjs), or MATRIX_SPEC_DIR to try
 * another version of the spec.
 */
export function specDir(): string {
  const override = process.env['MATRIX_SPEC_DIR'];
  if (override) return path.resolve(override);
  return fileURLToPath(new URL('../fixtures/matrix-spec', import.meta.url));
}

function isObject(v: unknown): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function walkFiles(dir: string, out: string[] = []): string[] {
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) walkFiles(full, out);
    else if (/\.(ya?ml|json)$/.test(entry.name)) out.push(full);
  }
  return out;
}

// The regexes in string-formats.yaml are commented out upstream ("# regex: ..."), so read them
// from the comments; formats without one accept any string.
function loadCustomFormats(dataDir: string): Record<string, RegExp | true> {
  const text = fs.readFileSync(path.join(dataDir, 'string-formats.yaml'), 'utf8');
  const parsed = parseYaml(text) as JsonObject;
  const formats: Record<string, RegExp | true> = {};
  const blocks = text.split(/^(?=[A-Za-z][\w-]*:\s*$)/m);
  for (const name of Object.keys(parsed)) {
    const block = blocks.find((b) => b.startsWith(`${name}:`)) ?? '';
    const m = /^\s*#\s*regex:\s*(".*")\s*$/m.exec(block);
    formats[name] = m?.[1] ? new RegExp(parseYaml(m[1]) as string) : true;
  }
  // Tighten where the grammar is unambiguous (appendices: "@localpart:domain", "#alias:domain");
  // room/event IDs have no server part in newer room versions, so keep the upstream prefix check.
  formats['mx-user-id'] = /^@[^:]+:.+$/;
  formats['mx-room-alias'] = /^#[^:]+:.+$/;
  formats['mx-unpadded-base64'] = /^[A-Za-z0-9+/]*$/;
  formats['mx-urlsafe-unpadded-base64'] = /^[A-Za-z0-9_-]*$/;
  // uri/email are standard formats provided by ajv-formats.
  delete formats['uri'];
  delete formats['email'];
  return formats;
}

function basePathsOf(doc: JsonObject): string[] {
  const servers = Array.isArray(doc['servers']) ? doc['servers'] : [];
  const bases = new Set<string>();
  for (const server of servers) {
    if (!isObject(server) || typeof server['url'] !== 'string') continue;
    const vars = isObject(server['variables']) ? server['variables'] : {};
    const url = server['url'].replace(/\{(\w+)\}/g, (_, name: string) => {
      const v = vars[name];
      return isObject(v) && typeof v['default'] === 'string' ? v['default'] : '';
    });
    // e.g. "https://localhost:8008/_matrix/client/v3" -> "/_matrix/client/v3"
    bases.add(new URL(url, 'https://localhost').pathname.replace(/\/$/, ''));
  }
  return bases.size ? [...bases] : [''];
}

function loadSpecIndex(): SpecIndex {
  const t0 = performance.now();
  const root = specDir();
  const dataDir = path.join(root, 'data');
  if (!fs.existsSync(path.join(dataDir, 'api', 'client-server'))) {
    throw new Error(`Matrix spec not found in ${root} (set MATRIX_SPEC_DIR to the folder holding data/)`);
  }
  const ajv = new Ajv2020({
    strict: false, // x-addedInMatrixVersion & co.
    allowUnionTypes: true, // nullable is `type: [X, "null"]`
    allErrors: true,
    validateSchema: false, // OpenAPI documents are not JSON Schemas; the spec is trusted
    formats: loadCustomFormats(dataDir),
  });
  addFormats(ajv);

  const examplesDir = path.join(dataDir, 'event-schemas', 'examples') + path.sep;
  const docs = new Map<string, Json>();
  for (const file of walkFiles(dataDir)) {
    // Examples use `$ref` with sibling keys, which is not a valid schema.
    if (file.startsWith(examplesDir) || path.basename(file) === 'string-formats.yaml') continue;
    const doc: unknown = parseYaml(fs.readFileSync(file, 'utf8'));
    const url = pathToFileURL(file).href;
    docs.set(url, doc);
    // Registering each file under its own URL lets ajv resolve the relative $refs itself.
    if (isObject(doc) || typeof doc === 'boolean') ajv.addSchema(isObject(doc) ? { ...doc, $id: url } : doc, url);
  }

  const csDir = path.join(dataDir, 'api', 'client-server');
  const operations: IndexedOperation[] = [];
  for (const file of fs.readdirSync(csDir).filter((f) => f.endsWith('.yaml')).sort()) {
    const docUrl = pathToFileURL(path.join(csDir, file)).href;
    const doc = docs.get(docUrl);
    if (!isObject(doc) || !isObject(doc['paths'])) continue;
    for (const base of basePathsOf(doc)) {
      for (const [key, item] of Object.entries(doc['paths'])) {
        if (!isObject(item)) continue;
        // Keys like "/rooms/{roomId}/invite " carry a trailing space (duplicates across files).
        const template = base + key.trim();
        const segments = template.split('/');
        const literalCount = segments.filter((s) => !/^\{[^}]+\}$/.test(s)).length;
        for (const [method, op] of Object.entries(item)) {
          if (!HTTP_METHODS.has(method) || !isObject(op)) continue;
          operations.push({
            file,
            method,
            template,
            operationId: typeof op['operationId'] === 'string' ? op['operationId'] : undefined,
            docUrl,
            pointer: ['paths', key, method],
            segments,
            literalCount,
            op,
          });
        }
      }
    }
  }

  return { dataDir, ajv, docs, operations, validators: new Map(), loadMs: performance.now() - t0 };
}

function spec(): SpecIndex {
  cached ??= loadSpecIndex();
  return cached;
}

/** Loads the spec now (e.g. in `beforeAll`) and returns how long loading took, in milliseconds. */
export function loadMatrixSpec(): { loadMs: number; documents: number; operations: number } {
  const s = spec();
  return { loadMs: s.loadMs, documents: s.docs.size, operations: s.operations.length };
}

// ---------------------------------------------------------------------------------------------
// Path matching

function splitRequestPath(rawPath: string): string[] | string {
  let p = rawPath.replace(/[?#].*$/s, '');
  // Accept absolute URLs too (supertest's request.url).
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(p)) p = new URL(p).pathname;
  const segments: string[] = [];
  for (const seg of p.split('/')) {
    try {
      segments.push(decodeURIComponent(seg));
    } catch {
      return `path segment ${JSON.stringify(seg)} is not valid percent-encoding`;
    }
  }
  // Old /r0/ paths are not in the spec: validate them as their /v3/ twins.
  if (segments[1] === '_matrix' && (segments[2] === 'client' || segments[2] === 'media') && segments[3] === 'r0') {
    segments[3] = 'v3';
  }
  return segments;
}

function templateMatches(template: string[], actual: string[]): boolean {
  if (template.length !== actual.length) return false;
  return template.every((t, i) => (/^\{[^}]+\}$/.test(t) ? true : t === actual[i]));
}

/** Path matches regardless of method, most specific (most literal segments) first. */
function matchingOperations(segments: string[]): IndexedOperation[] {
  const hits = spec().operations.filter((o) => templateMatches(o.segments, segments));
  return hits.sort((a, b) => b.literalCount - a.literalCount);
}

function candidatesFor(method: string, rawPath: string): { ops: IndexedOperation[] } | { error: string } {
  const segments = splitRequestPath(rawPath);
  if (typeof segments === 'string') return { error: segments };
  let all = matchingOperations(segments);
  // Clients may drop the trailing slash of an empty state key (`/state/m.room.power_levels`);
  // limited to {stateKey} so a missing segment elsewhere (e.g. a txnId) is still reported.
  if (all.length === 0 && segments[segments.length - 1] !== '') {
    all = matchingOperations([...segments, '']).filter((o) => o.segments[o.segments.length - 1] === '{stateKey}');
  }
  const m = method.toLowerCase();
  const withMethod = all.filter((o) => o.method === m);
  if (withMethod.length === 0) {
    if (all.length === 0) return { error: `no operation in the Matrix spec matches path ${rawPath}` };
    const methods = [...new Set(all.map((o) => o.method.toUpperCase()))].join(', ');
    return { error: `the Matrix spec has no ${method.toUpperCase()} ${rawPath} (that path allows ${methods})` };
  }
  // Keep every operation as specific as the best one: a few paths are defined in two files.
  const best = withMethod[0]!.literalCount;
  return { ops: withMethod.filter((o) => o.literalCount === best) };
}

function publicOp(o: IndexedOperation): SpecOperation {
  return { file: o.file, method: o.method, template: o.template, operationId: o.operationId };
}

/** The spec operation(s) a request resolves to (several when a path is defined in two files). */
export function resolveOperations(method: string, requestPath: string): SpecOperation[] {
  const c = candidatesFor(method, requestPath);
  return 'ops' in c ? c.ops.map(publicOp) : [];
}

// ---------------------------------------------------------------------------------------------
// Response schemas

function pointerToFragment(tokens: string[]): string {
  return '/' + tokens.map((t) => encodeURIComponent(t.replace(/~/g, '~0').replace(/\//g, '~1'))).join('/');
}

function getAt(doc: Json, tokens: string[]): Json {
  let cur: Json = doc;
  for (const t of tokens) {
    if (!isObject(cur) && !Array.isArray(cur)) return undefined;
    cur = (cur as Record<string, unknown>)[t];
  }
  return cur;
}

/** Follows an OpenAPI-level `$ref` (e.g. `#/components/responses/rateLimited`). */
function followRef(docUrl: string, tokens: string[]): { docUrl: string; tokens: string[]; value: Json } {
  const s = spec();
  let value = getAt(s.docs.get(docUrl), tokens);
  for (let hops = 0; isObject(value) && typeof value['$ref'] === 'string' && hops < 10; hops++) {
    const target = new URL(value['$ref'], docUrl);
    const fragment = decodeURIComponent(target.hash.replace(/^#/, ''));
    target.hash = '';
    docUrl = target.href;
    tokens = fragment
      .split('/')
      .slice(1)
      .map((t) => t.replace(/~1/g, '/').replace(/~0/g, '~'));
    value = getAt(s.docs.get(docUrl), tokens);
  }
  return { docUrl, tokens, value };
}

function responseSchemaRef(o: IndexedOperation, status: number): { ref: string } | { error: string } {
  const responses = o.op['responses'];
  const name = `${o.method.toUpperCase()} ${o.template} (${o.file})`;
  if (!isObject(responses)) return { error: `${name} declares no responses` };
  const range = `${Math.floor(status / 100)}XX`;
  const key = [String(status), range, range.toLowerCase(), 'default'].find((k) => k in responses);
  if (key === undefined) {
    const declared = Object.keys(responses).join(', ');
    return {
      error:
        `${name} declares no response for status ${status} (declared: ${declared})` +
        (status >= 400 ? '; use expectMatrixError for undeclared error statuses' : ''),
    };
  }
  const resp = followRef(o.docUrl, [...o.pointer, 'responses', key]);
  const content = isObject(resp.value) ? resp.value['content'] : undefined;
  if (!isObject(content) || !isObject(content['application/json'])) {
    const types = isObject(content) ? Object.keys(content).join(', ') : 'none';
    return { error: `${name} response ${key} has no application/json body (content types: ${types})` };
  }
  if (!('schema' in content['application/json'])) return { error: `${name} response ${key} has no JSON schema` };
  return { ref: resp.docUrl + '#' + pointerToFragment([...resp.tokens, 'content', 'application/json', 'schema']) };
}

function validatorFor(ref: string): ValidateFunction {
  const s = spec();
  let v = s.validators.get(ref);
  if (!v) {
    v = s.ajv.compile({ $ref: ref });
    s.validators.set(ref, v);
  }
  return v;
}

function formatErrors(errors: ErrorObject[] | null | undefined): string[] {
  return (errors ?? []).map((e) => {
    const where = e.instancePath || '(root)';
    const extra =
      e.keyword === 'enum'
        ? ` ${JSON.stringify((e.params as { allowedValues?: unknown }).allowedValues)}`
        : e.keyword === 'additionalProperties'
          ? ` (${String((e.params as { additionalProperty?: unknown }).additionalProperty)})`
          : '';
    return `body${where === '(root)' ? '' : where} ${e.message ?? e.keyword}${extra}`;
  });
}

// Known divergence kept on purpose (VALIDATING.md): like Synapse, joined_members sends
// display_name/avatar_url as null when unset, because matrix-nio needs the keys.
function applyKnownDivergences(o: IndexedOperation, body: unknown): unknown {
  if (o.method !== 'get' || !o.template.endsWith('/rooms/{roomId}/joined_members')) return body;
  if (!isObject(body) || !isObject(body['joined'])) return body;
  const copy = structuredClone(body) as { joined: Record<string, unknown> };
  for (const member of Object.values(copy.joined)) {
    if (!isObject(member)) continue;
    for (const k of ['display_name', 'avatar_url']) if (member[k] === null) delete member[k];
  }
  return copy;
}

/**
 * Validates a response body against the spec operation that `method` + `path` resolve to.
 * Returns human-readable problems; an empty list means valid. An unknown path, method or
 * undeclared status is reported as a problem, so a typo can't pass silently.
 */
export function validateResponse(method: string, requestPath: string, status: number, body: unknown): string[] {
  const c = candidatesFor(method, requestPath);
  if ('error' in c) return [c.error];
  const failures: string[] = [];
  for (const o of c.ops) {
    const r = responseSchemaRef(o, status);
    if ('error' in r) {
      failures.push(r.error);
      continue;
    }
    const validate = validatorFor(r.ref);
    if (validate(applyKnownDivergences(o, body))) return [];
    const label = `${method.toUpperCase()} ${o.template} (${o.file}) ${status}:`;
    failures.push(...formatErrors(validate.errors).map((e) => `${label} ${e}`));
  }
  return failures;
}

/**
 * Checks a transaction a homeserver pushes to an application service (`PUT
 * /_matrix/app/v1/transactions/{txnId}`) against the Application Service API's request schema.
 */
export function validateAppserviceTransaction(body: unknown): string[] {
  const s = spec();
  const file = pathToFileURL(path.join(s.dataDir, 'api', 'application-service', 'transactions.yaml')).href;
  const validate = validatorFor(file + '#' + pointerToFragment(['paths', '/transactions/{txnId}', 'put', 'requestBody', 'content', 'application/json', 'schema']));
  return validate(body) ? [] : formatErrors(validate.errors);
}

// ---------------------------------------------------------------------------------------------
// Matrix errors

/** Checks an error body against definitions/errors/error.yaml, and that `errcode` and `error` are strings. */
export function validateMatrixError(body: unknown): string[] {
  const s = spec();
  const ref = pathToFileURL(path.join(s.dataDir, 'api', 'client-server', 'definitions', 'errors', 'error.yaml')).href;
  const validate = validatorFor(ref);
  const problems = validate(body) ? [] : formatErrors(validate.errors);
  // The spec text requires both fields although the schema only requires errcode.
  if (!isObject(body)) return problems.length ? problems : ['body is not a JSON object'];
  if (typeof body['errcode'] !== 'string' || body['errcode'] === '') problems.push('body/errcode must be a non-empty string');
  if (typeof body['error'] !== 'string') problems.push('body/error must be a string');
  return [...new Set(problems)];
}

// ---------------------------------------------------------------------------------------------
// Events

/**
 * Validates an event against data/event-schemas/schema/<type>.yaml (and the msgtype-specific
 * schema for m.room.message). The API schemas only type `content` as `object`, so this is where
 * event contents get checked. `roomId` is filled in when missing because the schemas require
 * `room_id`, which /sync omits.
 */
export function validateEvent(event: unknown, opts: { roomId?: string } = {}): string[] {
  if (!isObject(event) || typeof event['type'] !== 'string') return ['event must be an object with a string type'];
  const s = spec();
  const dir = path.join(s.dataDir, 'event-schemas', 'schema');
  const files = [`${event['type']}.yaml`];
  const content = event['content'];
  if (isObject(content) && typeof content['msgtype'] === 'string') files.push(`${event['type']}$${content['msgtype']}.yaml`);
  const existing = files.filter((f) => s.docs.has(pathToFileURL(path.join(dir, f)).href));
  if (existing.length === 0) return [`no event schema for type ${event['type']}`];
  const subject = opts.roomId !== undefined && !('room_id' in event) ? { ...event, room_id: opts.roomId } : event;
  return existing.flatMap((f) => {
    const validate = validatorFor(pathToFileURL(path.join(dir, f)).href);
    return validate(subject) ? [] : formatErrors(validate.errors).map((e) => `${f}: ${e.replace(/^body/, 'event')}`);
  });
}

// ---------------------------------------------------------------------------------------------
// Assertions

function statusOf(res: ResponseLike): number | undefined {
  return res.status ?? res.statusCode;
}

/** The JSON body of a supertest/inject/plain response, or a problem description. */
function jsonBodyOf(res: ResponseLike): { body: unknown } | { error: string } {
  const ct = res.headers?.['content-type'];
  if (typeof ct === 'string' && !/^application\/json\b/i.test(ct)) {
    return { error: `content-type is ${JSON.stringify(ct)}, expected application/json` };
  }
  try {
    if (typeof res.json === 'function') return { body: res.json() };
    if (typeof res.body === 'string') return { body: JSON.parse(res.body) as unknown };
  } catch {
    return { error: 'response body is not valid JSON' };
  }
  return { body: res.body };
}

function requestOf(res: ResponseLike): { method?: string; path?: string } {
  const req = res.raw?.req ?? res.request;
  if (!req) return {};
  // supertest records an absolute URL; keep only path + query for matching and messages.
  const url = req.url && /^[a-z][a-z0-9+.-]*:\/\//i.test(req.url) ? new URL(req.url) : undefined;
  return { method: req.method, path: url ? url.pathname + url.search : req.url };
}

function fail(summary: string, problems: string[], body: unknown): never {
  let shown: string;
  try {
    shown = JSON.stringify(body, null, 2) ?? String(body);
  } catch {
    shown = String(body);
  }
  if (shown.length > 2000) shown = shown.slice(0, 2000) + '\n…';
  throw new Error(`${summary}\n${problems.map((p) => `  - ${p}`).join('\n')}\nbody: ${shown}`);
}

/**
 * Throws unless `res` (supertest response, fastify inject response, or `{ status, body }`)
 * matches the spec's response schema for `method` + `path` at its status code.
 */
export function expectMatchesSpec(method: string, requestPath: string, res: ResponseLike): void {
  const status = statusOf(res);
  const label = `${method.toUpperCase()} ${requestPath}`;
  if (status === undefined) throw new Error(`${label}: response has no status/statusCode`);
  const parsed = jsonBodyOf(res);
  if ('error' in parsed) fail(`${label} → ${status}: not a JSON response`, [parsed.error], res.body);
  const problems = validateResponse(method, requestPath, status, parsed.body);
  if (problems.length) fail(`${label} → ${status} does not match the Matrix spec:`, problems, parsed.body);
}

/**
 * Same as `expectMatchesSpec`, response first; `method`/`path` default to the request recorded on
 * a supertest or fastify inject response.
 */
export function expectValidResponse(res: ResponseLike, method?: string, requestPath?: string): void {
  const req = requestOf(res);
  const m = method ?? req.method;
  const p = requestPath ?? req.path;
  if (!m || !p) throw new Error('expectValidResponse: pass method and path (the response does not record its request)');
  expectMatchesSpec(m, p, res);
}

/** Throws unless `res` has the expected status and a spec-valid error body with the expected errcode. */
export function expectMatrixError(res: ResponseLike, status: number, errcode: string): void {
  const actual = statusOf(res);
  const parsed = jsonBodyOf(res);
  const body = 'body' in parsed ? parsed.body : res.body;
  const problems = 'error' in parsed ? [parsed.error] : validateMatrixError(parsed.body);
  if (actual !== status) problems.unshift(`status is ${String(actual)}, expected ${status}`);
  const got = isObject(body) ? body['errcode'] : undefined;
  if (got !== errcode) problems.push(`errcode is ${JSON.stringify(got)}, expected ${JSON.stringify(errcode)}`);
  if (problems.length) fail(`expected Matrix error ${status} ${errcode}:`, problems, body);
}

// ---------------------------------------------------------------------------------------------
// Spec examples (used to self-test this helper)

function deepMerge(base: unknown, over: unknown): unknown {
  if (!isObject(base) || !isObject(over)) return over;
  const out: JsonObject = { ...base };
  for (const [k, v] of Object.entries(over)) out[k] = k in out ? deepMerge(out[k], v) : v;
  return out;
}

const exampleFiles = new Map<string, unknown>();

// Example values `$ref` files under event-schemas/examples with sibling keys that override the
// referenced object (deep merge, as the spec's own renderer does).
function resolveExampleRefs(value: unknown, baseUrl: string, depth = 0): unknown {
  if (depth > 50) throw new Error(`example $ref nesting too deep at ${baseUrl}`);
  if (Array.isArray(value)) return value.map((v) => resolveExampleRefs(v, baseUrl, depth + 1));
  if (!isObject(value)) return value;
  const { $ref, ...rest } = value;
  const siblings: JsonObject = {};
  for (const [k, v] of Object.entries(rest)) siblings[k] = resolveExampleRefs(v, baseUrl, depth + 1);
  if (typeof $ref !== 'string') return siblings;
  const target = new URL($ref, baseUrl).href;
  let loaded = exampleFiles.get(target);
  if (loaded === undefined) {
    loaded = parseYaml(fs.readFileSync(fileURLToPath(target), 'utf8')) as unknown;
    exampleFiles.set(target, loaded);
  }
  return deepMerge(resolveExampleRefs(loaded, target, depth + 1), siblings);
}

/** Every application/json response example in the Client-Server documents. */
export function listSpecResponseExamples(): SpecResponseExample[] {
  const s = spec();
  const out: SpecResponseExample[] = [];
  const seen = new Set<string>();
  for (const o of s.operations) {
    const responses = o.op['responses'];
    if (!isObject(responses)) continue;
    for (const status of Object.keys(responses)) {
      const resp = followRef(o.docUrl, [...o.pointer, 'responses', status]);
      const media = isObject(resp.value) && isObject(resp.value['content']) ? resp.value['content']['application/json'] : undefined;
      if (!isObject(media) || !isObject(media['examples'])) continue;
      for (const [name, ex] of Object.entries(media['examples'])) {
        if (!isObject(ex) || !('value' in ex)) continue;
        const id = `${o.docUrl} ${o.template} ${o.method} ${status} ${name}`;
        if (seen.has(id)) continue;
        seen.add(id);
        out.push({
          operation: publicOp(o),
          status,
          name,
          path: o.template.replace(/\{(\w+)\}/g, '$1'),
          value: resolveExampleRefs(ex['value'], resp.docUrl),
        });
      }
    }
  }
  return out;
}
