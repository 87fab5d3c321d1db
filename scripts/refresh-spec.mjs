#!/usr/bin/env node
// Refreshes test/fixtures/matrix-spec/ (the Matrix spec files the tests validate responses
// against) from a checkout of https://github.com/matrix-org/matrix-spec:
//
//   git clone --depth 1 --branch v1.19 https://github.com/matrix-org/matrix-spec /tmp/matrix-spec
//   node scripts/refresh-spec.mjs /tmp/matrix-spec
//
// It copies what test/support/spec-validator.ts loads: the Client-Server and Application Service
// OpenAPI documents, the event schemas and their examples, data/string-formats.yaml, and every
// other file those `$ref` (a few identity-API definitions), so that every reference resolves
// offline. The old copy of data/ is replaced, so files removed upstream go too. LICENSE comes
// along; NOTICE, SOURCE.md and VALIDATING.md are ours: update SOURCE.md's version line by hand.
// `--out DIR` writes the copy elsewhere (the test that checks the copy is complete uses it).
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parse as parseYaml } from 'yaml';

/** Folders copied whole, and single files, relative to the checkout. */
const ROOTS = ['data/api/client-server', 'data/api/application-service', 'data/event-schemas', 'data/string-formats.yaml'];

function usage(message) {
  console.error(`${message}\nusage: node scripts/refresh-spec.mjs <path to a matrix-spec checkout> [--out DIR]`);
  process.exit(1);
}

const args = process.argv.slice(2);
const outAt = args.indexOf('--out');
const out = outAt === -1 ? undefined : args.splice(outAt, 2)[1];
if (outAt !== -1 && !out) usage('--out needs a directory');
if (args.length !== 1) usage(args.length === 0 ? 'no checkout given' : `unexpected arguments: ${args.slice(1).join(' ')}`);
const target = out ? path.resolve(out) : fileURLToPath(new URL('../test/fixtures/matrix-spec/', import.meta.url));

function walk(dir, out = []) {
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) walk(full, out);
    else if (/\.(ya?ml|json)$/.test(entry.name)) out.push(full);
  }
  return out;
}

/** Every `$ref` value in a parsed document. */
function refsOf(value, out = []) {
  if (Array.isArray(value)) for (const item of value) refsOf(item, out);
  else if (value !== null && typeof value === 'object') {
    for (const [key, item] of Object.entries(value)) {
      if (key === '$ref' && typeof item === 'string') out.push(item);
      else refsOf(item, out);
    }
  }
  return out;
}

const from = path.resolve(args[0]);
if (!fs.existsSync(path.join(from, 'data', 'api', 'client-server'))) usage(`${from} has no data/api/client-server: not a matrix-spec checkout`);

// The roots, then whatever they reference outside themselves, until nothing new turns up.
const wanted = new Set();
for (const root of ROOTS) {
  const full = path.join(from, root);
  if (!fs.existsSync(full)) usage(`${full} is missing`);
  for (const file of fs.statSync(full).isDirectory() ? walk(full) : [full]) wanted.add(file);
}
const queue = [...wanted];
const missing = [];
while (queue.length > 0) {
  const file = queue.pop();
  let doc;
  try {
    doc = parseYaml(fs.readFileSync(file, 'utf8'));
  } catch (err) {
    usage(`cannot parse ${path.relative(from, file)}: ${err.message}`);
  }
  for (const ref of refsOf(doc)) {
    const [relative] = ref.split('#');
    if (!relative || /^[a-z][a-z0-9+.-]*:/i.test(relative)) continue; // same file, or a URL
    const referenced = path.resolve(path.dirname(file), relative);
    if (wanted.has(referenced)) continue;
    if (!fs.existsSync(referenced)) {
      missing.push(`${path.relative(from, file)} -> ${ref}`);
      continue;
    }
    wanted.add(referenced);
    queue.push(referenced);
  }
}
if (missing.length > 0) usage(`references to missing files:\n  ${missing.join('\n  ')}`);

if (path.resolve(target) === from) usage('the checkout and the copy are the same folder');
fs.rmSync(path.join(target, 'data'), { recursive: true, force: true });
let bytes = 0;
for (const file of wanted) {
  const relative = path.relative(from, file);
  if (relative.startsWith('..')) usage(`a reference leads outside the checkout: ${file}`);
  fs.mkdirSync(path.join(target, path.dirname(relative)), { recursive: true });
  fs.copyFileSync(file, path.join(target, relative));
  bytes += fs.statSync(file).size;
}
fs.copyFileSync(path.join(from, 'LICENSE'), path.join(target, 'LICENSE'));

let version = 'unknown (not a git checkout)';
try {
  const git = (...args) => execFileSync('git', ['-C', from, ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  // Only the checkout's own repository: a copy inside another repository is not a version of the spec.
  if (fs.realpathSync(git('rev-parse', '--show-toplevel')) === fs.realpathSync(from)) {
    version = `${git('describe', '--tags', '--always')} (commit ${git('rev-parse', 'HEAD')})`;
  }
} catch {
  // Not a git checkout (a copy or an unpacked archive): the version stays unknown.
}
console.log(`copied ${wanted.size} files (${(bytes / 1024).toFixed(0)} KiB) into ${path.relative(process.cwd(), target) || '.'}`);
console.log(`source version: ${version}; put it in test/fixtures/matrix-spec/SOURCE.md`);
