#!/usr/bin/env node
// The image's HEALTHCHECK: GET /health on the port the server listens on. The image sets that port
// with BOT_HOMESERVER_LISTEN__PORT (8008 unless `docker run -e` says otherwise), and the server
// takes the environment over any config file, so this check and the server read the same value.
// Reading the whole configuration instead would cost ~0.5 s of CPU on every check.
// Exit status 0 when /health answers 200 in time, 1 otherwise (Docker's convention).
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';

const TIMEOUT_MS = 2500;
const port = Number(process.env.BOT_HOMESERVER_LISTEN__PORT || 8008);
// TLS on the listener itself (tls_certificate_path); its certificate names the public host, not
// 127.0.0.1, and this only asks "are you up".
const tls = Boolean(process.env.BOT_HOMESERVER_TLS_CERTIFICATE_PATH);

const req = (tls ? httpsRequest : httpRequest)(
  { host: '127.0.0.1', port, path: '/health', timeout: TIMEOUT_MS, rejectUnauthorized: false },
  (res) => {
    res.resume();
    if (res.statusCode !== 200) console.error(`healthcheck: port ${port}: /health answered ${res.statusCode}`);
    process.exit(res.statusCode === 200 ? 0 : 1);
  },
);
req.on('timeout', () => req.destroy(new Error(`no answer within ${TIMEOUT_MS} ms`)));
req.on('error', (err) => {
  console.error(`healthcheck: port ${port}: ${err.message}`);
  process.exit(1);
});
req.end();
