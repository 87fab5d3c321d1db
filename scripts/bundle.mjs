#!/usr/bin/env node
// Bundles the compiled CLI (dist/src/main.js) into one ES module, dist/bundle/main.mjs, which
// bin/bot-homeserver.js runs. Loading one file instead of ~1,500 module files halves the start-up
// time and saves ~20 MB of RSS (docs/benchmarks.md). Native addons stay external: they are loaded
// from node_modules as usual. The library entry points (`.`, `./testing`) stay unbundled.
import { build } from 'esbuild';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));

await build({
  absWorkingDir: root,
  entryPoints: ['dist/src/main.js'],
  outfile: 'dist/bundle/main.mjs',
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  external: ['better-sqlite3', 'argon2'],
  // CommonJS dependencies call require() for Node built-ins; an ES module has no require of its own.
  banner: { js: "import { createRequire as __bundleRequire } from 'node:module'; const require = __bundleRequire(import.meta.url);" },
  // BUNDLE_READABLE=1 keeps one statement per line, so a CPU profile's line numbers mean something.
  minifyWhitespace: !process.env.BUNDLE_READABLE,
  minifySyntax: true,
  sourcemap: 'linked',
  legalComments: 'linked',
  logLevel: 'warning',
});
