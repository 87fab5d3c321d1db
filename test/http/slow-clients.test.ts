/**
 * Slow clients cannot hold the listener: a request must arrive whole within
 * listen.request_timeout, and one address holds at most listen.max_connections_per_address
 * connections. Before, an unauthenticated POST /login with a Content-Length of 100,000 and a
 * byte every 15 s stayed open past 100 s (Fastify's timeouts are off by default).
 */
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/server.js';
import { testConfig } from '../support/homeserver.js';

let running: RunningServer | undefined;
afterEach(async () => {
  await running?.close();
  running = undefined;
});

async function start(listen: Record<string, unknown>): Promise<RunningServer> {
  running = await startServer(testConfig({ listen: { host: '127.0.0.1', port: 0, ...listen } }));
  return running;
}

interface RawAnswer {
  status: number;
  body: string;
  /** Bytes the client managed to send before the server closed the connection. */
  sent: number;
}

/** Opens a socket, sends `head`, then one byte of body every `everyMs` until the server closes it. */
function trickle(port: number, head: string, everyMs: number): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    let received = '';
    let sent = 0;
    socket.on('data', (chunk) => (received += chunk.toString()));
    socket.on('error', () => undefined);
    socket.write(head);
    const timer = setInterval(() => {
      if (socket.writable) {
        socket.write(' ');
        sent += 1;
      }
    }, everyMs);
    socket.on('close', () => {
      clearInterval(timer);
      const [statusLine = '', ...rest] = received.split('\r\n');
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(statusLine)?.[1] ?? 0);
      if (status === 0) reject(new Error(`no answer before the connection closed: ${JSON.stringify(received)}`));
      else resolve({ status, body: rest.join('\r\n').split('\r\n\r\n').slice(1).join('\r\n\r\n'), sent });
    });
  });
}

describe('slow clients', () => {
  it('get 408 with a Matrix error when a body does not arrive in time, logged in or not', async () => {
    const server = await start({ request_timeout: '1s' });
    const slowLogin = await trickle(server.port, 'POST /_matrix/client/v3/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{', 100);
    expect(slowLogin.status).toBe(408);
    expect(JSON.parse(slowLogin.body)).toEqual({ errcode: 'M_UNKNOWN', error: 'The request did not arrive in time' });
    // Well short of the 100,000 bytes it announced: it was cut off, not waited for.
    expect(slowLogin.sent).toBeLessThan(100);

    const { services } = server.app.homeserver;
    const user = await services.accounts.createUser({ localpart: 'slow', password: 'pw' });
    const { access_token: token, device_id: deviceId } = await services.sessions.createSession(user.user_id);
    const roomId = await services.rooms.createRoom({ userId: user.user_id, deviceId, accessTokenId: 0 }, {});
    const slowSend = await trickle(
      server.port,
      `PUT /_matrix/client/v3/rooms/${encodeURIComponent(roomId)}/send/m.room.message/1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\nContent-Length: 50000\r\n\r\n{`,
      100,
    );
    expect(slowSend.status).toBe(408);
    // Headers that never end are cut off the same way.
    const slowHeaders = await trickle(server.port, 'GET /_matrix/client/versions HTTP/1.1\r\nX-Slow: ', 100);
    expect(slowHeaders.status).toBe(408);
  });

  it('still lets a long-polling sync wait longer than the request timeout', async () => {
    const server = await start({ request_timeout: '1s' });
    const { services } = server.app.homeserver;
    const user = await services.accounts.createUser({ localpart: 'poller', password: 'pw' });
    const { access_token: token } = await services.sessions.createSession(user.user_id);
    const first = await fetch(`${server.url}_matrix/client/v3/sync`, { headers: { Authorization: `Bearer ${token}` } });
    const { next_batch: since } = (await first.json()) as { next_batch: string };
    // Nothing happens: the sync waits its whole 2.5 s, past the 1 s request timeout, and answers.
    const started = Date.now();
    const res = await fetch(`${server.url}_matrix/client/v3/sync?since=${since}&timeout=2500`, { headers: { Authorization: `Bearer ${token}` } });
    expect(res.status).toBe(200);
    expect(Date.now() - started).toBeGreaterThanOrEqual(2000);
  });

  it('closes connections past max_connections_per_address as they open', async () => {
    const server = await start({ max_connections_per_address: 3 });
    const open = (): Promise<net.Socket> =>
      new Promise((resolve, reject) => {
        const socket = net.connect(server.port, '127.0.0.1', () => resolve(socket));
        socket.on('error', reject);
      });
    const closed = (socket: net.Socket) => new Promise<void>((resolve) => (socket.destroyed ? resolve() : socket.once('close', () => resolve())));
    const held = [await open(), await open(), await open()];
    const fourth = await open();
    await closed(fourth);
    // The three held still work.
    const answer = await new Promise<string>((resolve) => {
      held[0]!.once('data', (chunk) => resolve(chunk.toString()));
      held[0]!.write('GET /_matrix/client/versions HTTP/1.1\r\nHost: x\r\n\r\n');
    });
    expect(answer).toMatch(/^HTTP\/1\.1 200/);
    // A slot freed is a slot again.
    held.pop()!.destroy();
    await new Promise((resolve) => setTimeout(resolve, 50));
    const again = await open();
    const reply = await new Promise<string>((resolve) => {
      again.once('data', (chunk) => resolve(chunk.toString()));
      again.write('GET /_matrix/client/versions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    });
    expect(reply).toMatch(/^HTTP\/1\.1 200/);
    for (const socket of [...held, again]) socket.destroy();
  });

  it('does not limit connections per address behind a reverse proxy', async () => {
    const server = await start({ max_connections_per_address: 1, x_forwarded: true });
    const sockets = await Promise.all(
      [1, 2, 3].map(
        () =>
          new Promise<net.Socket>((resolve) => {
            const socket = net.connect(server.port, '127.0.0.1', () => resolve(socket));
          }),
      ),
    );
    const answers = await Promise.all(
      sockets.map(
        (socket) =>
          new Promise<string>((resolve) => {
            socket.once('data', (chunk) => resolve(chunk.toString()));
            socket.write('GET /_matrix/client/versions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
          }),
      ),
    );
    for (const answer of answers) expect(answer).toMatch(/^HTTP\/1\.1 200/);
  });
});
