#!/usr/bin/env node
// Entry point of the `bot-homeserver` command: runs the compiled CLI from dist/.
import { main, describeFailure } from '../dist/src/main.js';

main(process.argv).catch((err) => {
  console.error(`bot-homeserver: ${describeFailure(err)}`);
  process.exit(1);
});
