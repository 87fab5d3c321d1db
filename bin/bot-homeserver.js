#!/usr/bin/env node
// Entry point of the `bot-homeserver` command: runs the CLI, bundled into one file (scripts/bundle.mjs)
// so that the process starts fast. Stack traces point into the TypeScript sources through the
// bundle's source map (dist/bundle/*.map), not into minified chunks: maps are enabled before the
// bundle loads, hence the dynamic import.
process.setSourceMapsEnabled(true);
const { main, describeFailure } = await import('../dist/bundle/main.mjs');

main(process.argv).catch((err) => {
  console.error(`bot-homeserver: ${describeFailure(err)}`);
  process.exit(1);
});
