/**
 * The one error the feed module throws. Its message is shown to the chat user who added the feed,
 * so it says what went wrong in plain words ("the server answered 404 Not Found"), never a stack.
 */
export class FeedError extends Error {
  override readonly name = 'FeedError';
  /** Refused because the feed's address is not public: an operator may allow such feeds. */
  readonly privateAddress: boolean;

  constructor(message: string, options: { privateAddress?: boolean; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.privateAddress = options.privateAddress ?? false;
  }
}
