/**
 * The one error the feed module throws. Its message is shown to the chat user who added the feed,
 * so it says what went wrong in plain words ("the server answered 404 Not Found"), never a stack.
 */
export class FeedError extends Error {
  override readonly name = 'FeedError';
}
