// The esbuild step of `npm run build` (scripts/build.mjs): bundles the compiled CLI
// (<dist>/src/main.js) into <dist>/bundle/main.mjs, which bin/bot-homeserver.js runs, plus chunks
// for what loads on first use. Loading a few files instead of ~1,500 module files halves the
// start-up time and saves ~20 MB of RSS (docs/benchmarks.md). Native addons stay external: they are
// loaded from node_modules as usual, and so is the bridge's crypto (WebAssembly beside its module). The library entry points (`.`, `./testing`) stay unbundled.
import { build } from 'esbuild';
import { basename } from 'node:path';

/**
 * Bundles `<distDir>/src` into `<distDir>/bundle` (a fresh folder: build.mjs stages every build).
 * Resolves with this build's own files under `bundle/chunks/`.
 */
export async function bundle(distDir) {
  const common = {
    // Paths relative to the build's own folder, whatever its name: chunk names hash them, and the
    // same sources must give the same names (scripts/build.mjs keeps the previous build's chunks).
    absWorkingDir: distDir,
    outdir: 'bundle',
    outExtension: { '.js': '.mjs' },
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    // CommonJS dependencies call require() for Node built-ins; an ES module has no require of its own.
    banner: { js: "import { createRequire as __bundleRequire } from 'node:module'; const require = __bundleRequire(import.meta.url);" },
    // BUNDLE_READABLE=1 keeps one statement per line, so a CPU profile's line numbers mean something.
    minifyWhitespace: !process.env.BUNDLE_READABLE,
    minifySyntax: true,
    // Stack traces only need the mappings; the sources' text (most of it node_modules) would
    // triple the size of the maps in the package, and src/ sits beside dist/ in a checkout.
    sourcemap: 'linked',
    sourcesContent: false,
    legalComments: 'linked',
    logLevel: 'warning',
    metafile: true,
  };

  const cli = await build({
    ...common,
    entryPoints: { main: 'src/main.js' },
    // What the code imports dynamically (the webhook renderers) goes to chunks of
    // its own, parsed only when first used: start-up and idle memory pay for what runs.
    splitting: true,
    chunkNames: 'chunks/[name]-[hash]',
    // The bridge's crypto (WebAssembly) loads its .wasm file from beside its own module: it stays in node_modules.
    external: ['better-sqlite3', 'better-sqlite3-node20', 'argon2', 'sodium-native', '@matrix-org/matrix-sdk-crypto-wasm'],
  });

  // Feeds are parsed in a worker thread (src/bridge/feeds/parser-thread.ts), which looks for its code
  // next to the module that starts it: here, next to main.mjs. A build of its own, in one file, so
  // the CLI's bundle shares no chunk with it and loads none of the parsers.
  await build({ ...common, entryPoints: { 'feed-parse-worker': 'src/bridge/feeds/parse-worker.js' } });

  // The metafile lists every output: code, source maps and legal notices.
  return Object.keys(cli.metafile.outputs).filter((path) => path.startsWith('bundle/chunks/')).map((path) => basename(path)).sort();
}
