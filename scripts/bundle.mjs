#!/usr/bin/env node
// Bundles the compiled CLI (dist/src/main.js) into dist/bundle/main.mjs, which bin/bot-homeserver.js
// runs, plus chunks for what loads on first use. Loading a few files instead of ~1,500 module files
// halves the start-up time and saves ~20 MB of RSS (docs/benchmarks.md). Native addons stay external: they are loaded
// from node_modules as usual. The library entry points (`.`, `./testing`) stay unbundled.
import { build } from 'esbuild';
import { rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
// Chunk names carry a content hash: without this, every build would leave the previous ones behind.
rmSync(new URL('../dist/bundle', import.meta.url), { recursive: true, force: true });

await build({
  absWorkingDir: root,
  entryPoints: { main: 'dist/src/main.js' },
  outdir: 'dist/bundle',
  outExtension: { '.js': '.mjs' },
  // What the code imports dynamically (the webhook renderers) goes to chunks of
  // its own, parsed only when first used: start-up and idle memory pay for what runs.
  splitting: true,
  chunkNames: 'chunks/[name]-[hash]',
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  external: ['better-sqlite3', 'better-sqlite3-node20', 'argon2'],
  // CommonJS dependencies call require() for Node built-ins; an ES module has no require of its own.
  banner: { js: "import { createRequire as __bundleRequire } from 'node:module'; const require = __bundleRequire(import.meta.url);" },
  // BUNDLE_READABLE=1 keeps one statement per line, so a CPU profile's line numbers mean something.
  minifyWhitespace: !process.env.BUNDLE_READABLE,
  minifySyntax: true,
  sourcemap: 'linked',
  legalComments: 'linked',
  logLevel: 'warning',
});

// Feeds are parsed in a worker thread (src/bridge/feeds/parser-thread.ts), which looks for its code
// next to the module that starts it: here, next to main.mjs. A build of its own, in one file, so
// the CLI's bundle shares no chunk with it and loads none of the parsers.
await build({
  absWorkingDir: root,
  entryPoints: { 'feed-parse-worker': 'dist/src/bridge/feeds/parse-worker.js' },
  outdir: 'dist/bundle',
  outExtension: { '.js': '.mjs' },
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  banner: { js: "import { createRequire as __bundleRequire } from 'node:module'; const require = __bundleRequire(import.meta.url);" },
  minifyWhitespace: !process.env.BUNDLE_READABLE,
  minifySyntax: true,
  sourcemap: 'linked',
  legalComments: 'linked',
  logLevel: 'warning',
});
