/**
 * A command refused or could not do what it was asked, for a reason the operator can act on. The
 * CLI prints its message alone (src/main.ts, describeFailure): one sentence, no code, no stack.
 */
export class CommandError extends Error {
  override name = 'CommandError';
}
