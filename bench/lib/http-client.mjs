/**
 * A minimal JSON client for the Matrix Client-Server API over node:http with keep-alive.
 * Deliberately small: the load generator shares the machine's CPUs with the server, so every
 * microsecond spent here is one the server does not get.
 */
import http from 'node:http';
import https from 'node:https';
import { createHmac } from 'node:crypto';

export class HttpError extends Error {
  constructor(method, path, status, body) {
    super(`${method} ${path} -> ${status}: ${String(body).slice(0, 300)}`);
    this.status = status;
    this.body = body;
  }
}

export class Client {
  /**
   * @param {string} baseUrl like http://127.0.0.1:1234
   * @param {{ maxSockets?: number }} [options] maxSockets per client (default 1: one connection)
   */
  constructor(baseUrl, options = {}) {
    const url = new URL(baseUrl);
    this.host = url.hostname;
    this.port = Number(url.port);
    // https for servers that federate (TLS on their own listener); their test certificates are
    // not checked here: only what the server does is measured.
    this.transport = url.protocol === 'https:' ? https : http;
    this.agent = new this.transport.Agent({
      keepAlive: true,
      maxSockets: options.maxSockets ?? 1,
      maxFreeSockets: options.maxFreeSockets ?? 256,
      scheduling: 'lifo',
      ...(url.protocol === 'https:' ? { rejectUnauthorized: false } : {}),
    });
  }

  /**
   * One request. Resolves with { status, body (parsed JSON or raw text), ms } whatever the status;
   * rejects only on network errors. `ms` runs from the call to the last byte of the answer.
   */
  request(method, path, { token, body, timeoutMs = 30_000, onSent } = {}) {
    const started = performance.now();
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    const headers = { Accept: 'application/json' };
    if (token) headers.Authorization = `Bearer ${token}`;
    if (payload) {
      headers['Content-Type'] = 'application/json';
      headers['Content-Length'] = payload.length;
    }
    return new Promise((resolve, reject) => {
      const req = this.transport.request({ host: this.host, port: this.port, method, path, headers, agent: this.agent }, (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => {
          // Timed at the last byte, before parsing: a large answer (an initial sync) takes the
          // generator milliseconds to parse, which is not the server's time.
          const ms = performance.now() - started;
          const text = Buffer.concat(chunks).toString('utf8');
          let parsed = text;
          if (text.length > 0 && text[0] === '{') {
            try {
              parsed = JSON.parse(text);
            } catch {
              // leave as text; the caller sees a non-object body
            }
          }
          resolve({ status: res.statusCode, body: parsed, ms, bytes: text.length });
        });
        res.on('error', reject);
      });
      if (timeoutMs > 0) req.setTimeout(timeoutMs, () => req.destroy(new Error(`${method} ${path}: no answer within ${timeoutMs} ms`)));
      req.on('error', reject);
      if (onSent) req.once('finish', onSent);
      req.end(payload);
    });
  }

  /** Like request, but throws HttpError unless the status is 200. Returns the parsed body. */
  async ok(method, path, options) {
    const res = await this.request(method, path, options);
    if (res.status !== 200) throw new HttpError(method, path, res.status, typeof res.body === 'string' ? res.body : JSON.stringify(res.body));
    return res.body;
  }

  close() {
    this.agent.destroy();
  }
}

export const CS = '/_matrix/client/v3';

/** Registers a user with the Synapse-style shared-secret admin API; returns { user_id, access_token }. */
export async function registerUser(client, sharedSecret, username, password) {
  const { nonce } = await client.ok('GET', '/_synapse/admin/v1/register');
  const mac = createHmac('sha1', sharedSecret).update(`${nonce}\0${username}\0${password}\0notadmin`).digest('hex');
  const body = await client.ok('POST', '/_synapse/admin/v1/register', { body: { nonce, username, password, mac } });
  return { user_id: body.user_id, access_token: body.access_token };
}

export const roomPath = (roomId) => encodeURIComponent(roomId);
