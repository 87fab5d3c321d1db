/**
 * A fake homeserver for the federation-safety tests: it signs its requests and events with an
 * ed25519 key of its own (published at `/_matrix/key/v2/server` like any server's), listens with
 * TLS on loopback under the test CA, is found by the servers of a `Federation` like they find each
 * other, and answers what they ask of it as the test scripts, recording every request. It is what
 * a hostile server on the open federation would be, with no code of ours in its answers.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { Socket } from 'node:net';
import { ed25519Signer, signJson, type Signer } from '../../src/core/signed-json.js';
import { FederationClient } from '../../src/federation/http-client.js';
import { finishPdu, type Pdu, type UnsignedPdu } from '../../src/rooms/pdu.js';
import { roomVersion } from '../../src/rooms/room-versions.js';
import type { Federation } from './federation.js';
import { testCertificates } from './tls.js';

export interface RecordedRequest {
  method: string;
  path: string;
  body: unknown;
  at: number;
}

/** A scripted answer: a status and a JSON body; `undefined` falls through to 404. */
export type Answer = { status?: number; body: unknown } | undefined;
export type Handler = (request: RecordedRequest) => Answer | Promise<Answer>;

export interface HostileServer {
  name: string;
  port: number;
  signer: Signer;
  /** Every request another server made of it, in order (its key listing included). */
  requests: RecordedRequest[];
  /** Answers requests whose path (without the query) starts with `prefix`; the newest route wins. */
  route(method: string, prefix: string, handler: Handler): void;
  /** Never answers requests whose path starts with `prefix` (until closed). */
  hang(method: string, prefix: string): void;
  /** Signed federation requests to other servers, as this server. */
  client: FederationClient;
  /** Sends a transaction to `destination`; resolves with its answer. */
  send(destination: string, pdus: unknown[], edus?: unknown[]): Promise<{ pdus: Record<string, { error?: string }> }>;
  /** A PDU of this server: hashed, signed, with its id. */
  pdu(roomVersionId: string, draft: UnsignedPdu): { pdu: Pdu; eventId: string };
  /** Joins `userId` (of this server) to a room through `via`, as a real server would: make_join, sign, send_join. */
  join(via: string, roomId: string, userId: string): Promise<{ eventId: string; pdu: Pdu; roomVersion: string; state: Pdu[] }>;
  close(): Promise<void>;
}

let txnCounter = 0;

export async function startHostileServer(federation: Federation, name = 'evil.test'): Promise<HostileServer> {
  const tls = testCertificates();
  const signer = ed25519Signer(name, 'evil', randomBytes(32));
  const requests: RecordedRequest[] = [];
  const routes: Array<{ method: string; prefix: string; handler: Handler | 'hang' }> = [];
  const sockets = new Set<Socket>();
  const hanging = new Set<() => void>();

  const keyListing = () =>
    signJson({ server_name: name, valid_until_ts: Date.now() + 3_600_000, verify_keys: { [signer.keyId]: { key: signer.publicKey } }, old_verify_keys: {} }, signer);

  const server: Server = createServer({ cert: readFileSync(tls.certPath), key: readFileSync(tls.keyPath) }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      void (async () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let body: unknown;
        try {
          body = text === '' ? undefined : JSON.parse(text);
        } catch {
          body = text;
        }
        const recorded: RecordedRequest = { method: req.method ?? 'GET', path: req.url ?? '/', body, at: Date.now() };
        requests.push(recorded);
        const path = recorded.path.split('?')[0]!;
        const reply = (status: number, json: unknown) => {
          if (res.destroyed) return;
          const payload = Buffer.from(JSON.stringify(json));
          res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': String(payload.length) });
          res.end(payload);
        };
        if (path.startsWith('/_matrix/key/v2/server')) return reply(200, keyListing());
        for (let i = routes.length - 1; i >= 0; i--) {
          const route = routes[i]!;
          if (route.method !== recorded.method || !path.startsWith(route.prefix)) continue;
          if (route.handler === 'hang') {
            await new Promise<void>((resolve) => hanging.add(resolve));
            return;
          }
          const answer = await route.handler(recorded);
          if (answer) return reply(answer.status ?? 200, answer.body);
        }
        reply(404, { errcode: 'M_NOT_FOUND', error: 'nothing here' });
      })();
    });
  });
  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  federation.addPeer(name, port);
  const hooks = federation.hooksFor(name);
  const client = new FederationClient({
    signer,
    addressRefusal: () => undefined,
    isAllowedDestination: () => true,
    verifyCertificates: true,
    ca: [readFileSync(tls.caPath, 'utf8')],
    timeoutMs: 30_000,
    maxResponseBytes: 64 * 1024 * 1024,
    resolveHost: hooks.resolveHost,
    resolveSrv: hooks.resolveSrv,
  });

  const pdu = (versionId: string, draft: UnsignedPdu) => {
    const version = roomVersion(versionId);
    if (!version) throw new Error(`unknown room version ${versionId}`);
    return finishPdu(draft, version, signer);
  };

  return {
    name,
    port,
    signer,
    requests,
    client,
    route(method, prefix, handler) {
      routes.push({ method, prefix, handler });
    },
    hang(method, prefix) {
      routes.push({ method, prefix, handler: 'hang' });
    },
    async send(destination, pdus, edus = []) {
      return client.request(destination, {
        method: 'PUT',
        path: `/_matrix/federation/v1/send/${name}-${Date.now()}-${++txnCounter}`,
        body: { origin: name, origin_server_ts: Date.now(), pdus, edus },
        timeoutMs: 300_000,
      });
    },
    pdu,
    async join(via, roomId, userId) {
      const made = await client.request<{ event: UnsignedPdu; room_version: string }>(via, {
        method: 'GET',
        path: `/_matrix/federation/v1/make_join/${encodeURIComponent(roomId)}/${encodeURIComponent(userId)}?ver=10&ver=9&ver=8&ver=11&ver=12&ver=1&ver=2`,
      });
      const { pdu: signed, eventId } = pdu(made.room_version, { ...made.event, origin_server_ts: Date.now() });
      const answer = await client.request<{ state: Pdu[] }>(via, {
        method: 'PUT',
        path: `/_matrix/federation/v2/send_join/${encodeURIComponent(roomId)}/${encodeURIComponent(eventId)}`,
        body: signed,
      });
      return { eventId, pdu: signed, roomVersion: made.room_version, state: answer.state };
    },
    async close() {
      for (const release of hanging) release();
      for (const socket of sockets) socket.destroy();
      client.close();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
