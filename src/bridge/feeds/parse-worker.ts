/**
 * The worker thread feeds are parsed in (see parser-thread.ts): a request per message, answered
 * with the parsed feed or the FeedError's message. Nothing else runs here.
 */
import { parentPort } from 'node:worker_threads';
import { FeedError } from './error.js';
import { parseFeed, type ParsedFeed } from './parse.js';

export interface ParseRequest {
  id: number;
  body: Uint8Array;
  url: string;
  contentType: string | undefined;
}

export type ParseReply = { id: number; feed: ParsedFeed } | { id: number; error: string };

parentPort?.on('message', (request: ParseRequest) => {
  let reply: ParseReply;
  try {
    const body = Buffer.from(request.body.buffer, request.body.byteOffset, request.body.byteLength);
    const source = request.contentType === undefined ? { url: request.url } : { url: request.url, contentType: request.contentType };
    reply = { id: request.id, feed: parseFeed(body, source) };
  } catch (error) {
    // parseFeed turns every failure into a FeedError; anything else is still told, not thrown.
    reply = { id: request.id, error: error instanceof FeedError ? error.message : `the feed could not be read (${String(error)})` };
  }
  parentPort?.postMessage(reply);
});
