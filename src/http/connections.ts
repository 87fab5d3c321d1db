/**
 * What one client can hold of the listener. Fastify leaves request timeouts off, so a client that
 * sent a Content-Length and then one byte every few seconds kept its connection (and its socket,
 * buffers and parser) for as long as it liked, unauthenticated.
 *
 * - A request must arrive whole (headers and body) within `listen.request_timeout`; otherwise it
 *   is answered 408 and the connection closed. Node checks this itself, and only until the
 *   request has arrived: a long-polling /sync that waits minutes for news is not affected.
 * - One client address may hold at most `listen.max_connections_per_address` connections at
 *   once; more are closed as they open. Behind a reverse proxy (`listen.x_forwarded`) every
 *   connection comes from the proxy, so the limit belongs there and is not applied here.
 */
import http from 'node:http';
import type { Server } from 'node:http';
import type { Socket } from 'node:net';
import type { Config } from '../config/index.js';

/** The node:http server options for the request deadline (Fastify passes them on). */
export function requestDeadlineOptions(listen: Config['listen']): { http: http.ServerOptions; requestTimeout: number } {
  const timeout = listen.request_timeout;
  return {
    requestTimeout: timeout,
    http: {
      requestTimeout: timeout,
      headersTimeout: timeout,
      // How often Node looks for requests past their deadline (it defaults to 30 s, which would
      // let a slow client run half a minute over): a tenth of the timeout, within 100 ms and 5 s.
      connectionsCheckingInterval: Math.min(5_000, Math.max(100, Math.floor(timeout / 10))),
    },
  };
}

/**
 * Closes connections past `max` from one address as they open (0: no limit). Returns a function
 * that says how many connections an address holds (for tests and metrics).
 */
export function limitConnectionsPerAddress(server: Server, max: number): (address: string) => number {
  const open = new Map<string, number>();
  if (max > 0) {
    server.on('connection', (socket: Socket) => {
      const address = socket.remoteAddress ?? '';
      const count = (open.get(address) ?? 0) + 1;
      if (count > max) {
        socket.destroy();
        return;
      }
      open.set(address, count);
      socket.once('close', () => {
        const left = (open.get(address) ?? 1) - 1;
        if (left > 0) open.set(address, left);
        else open.delete(address);
      });
    });
  }
  return (address) => open.get(address) ?? 0;
}

/**
 * Answers what Node refuses before a request reaches Fastify's routes (a request past its
 * deadline, headers too large, a malformed request line) with a Matrix error, then closes the
 * connection, as Fastify's own handler does but with the body every other error has.
 */
export function clientErrorHandler(error: NodeJS.ErrnoException, socket: Socket): void {
  if (error.code === 'ECONNRESET' || socket.destroyed) return;
  let status = 400;
  let message = 'Malformed request';
  if (error.code === 'ERR_HTTP_REQUEST_TIMEOUT') {
    status = 408;
    message = 'The request did not arrive in time';
  } else if (error.code === 'HPE_HEADER_OVERFLOW') {
    status = 431;
    message = 'Request headers (or the URL) are too large';
  }
  const body = JSON.stringify({ errcode: 'M_UNKNOWN', error: message });
  if (socket.writable) {
    socket.write(
      `HTTP/1.1 ${status} ${http.STATUS_CODES[status]}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy();
}

/**
 * Runs a long poll with a signal that aborts when its client goes away, so a parked request
 * (`/sync`, legacy `/events`) is freed at once rather than at its timeout.
 */
export async function whileClientWaits<T>(raw: http.ServerResponse, poll: (signal: AbortSignal) => Promise<T>): Promise<T> {
  const disconnected = new AbortController();
  const onClose = (): void => {
    if (!raw.writableFinished) disconnected.abort();
  };
  raw.once('close', onClose);
  try {
    return await poll(disconnected.signal);
  } finally {
    raw.off('close', onClose);
  }
}
