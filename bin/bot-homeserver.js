#!/usr/bin/env node
// Entry point of the `bot-homeserver` command: runs the CLI, bundled into one file (scripts/bundle.mjs)
// so that the process starts fast.
import { main, describeFailure } from '../dist/bundle/main.mjs';

main(process.argv).catch((err) => {
  console.error(`bot-homeserver: ${describeFailure(err)}`);
  process.exit(1);
});
