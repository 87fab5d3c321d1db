/**
 * A certificate authority and a server certificate made with openssl for the federation tests:
 * servers federate over real TLS, and trust this CA through federation_custom_ca_list. Made once
 * per test process, in a temporary directory.
 */
import { execFileSync } from 'node:child_process';
import { request as httpsRequest } from 'node:https';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface TestCertificates {
  caPath: string;
  certPath: string;
  keyPath: string;
}

let made: TestCertificates | undefined;

/** A CA, and one certificate for every name given (and 127.0.0.1), signed by it. */
export function testCertificates(names: readonly string[] = ['a.test', 'b.test', 'c.test', 'evil.test']): TestCertificates {
  if (made) return made;
  const dir = mkdtempSync(join(tmpdir(), 'bhs-tls-'));
  const openssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
  openssl('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '2', '-subj', '/CN=bot-homeserver test CA', '-keyout', 'ca.key', '-out', 'ca.pem');
  openssl('req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-subj', '/CN=federation test', '-keyout', 'server.key', '-out', 'server.csr');
  const san = [...names.map((name) => `DNS:${name}`), 'IP:127.0.0.1'].join(',');
  writeFileSync(join(dir, 'ext.cnf'), `subjectAltName=${san}\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n`);
  openssl('x509', '-req', '-in', 'server.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-days', '2', '-extfile', 'ext.cnf', '-out', 'server.pem');
  made = { caPath: join(dir, 'ca.pem'), certPath: join(dir, 'server.pem'), keyPath: join(dir, 'server.key') };
  return made;
}

/** A fetch for an SDK that trusts `ca` (the test servers listen with TLS under it). */
export function fetchTrusting(ca: Buffer): typeof fetch {
  return (async (input: string | URL | Request, init?: RequestInit) => {
    const url = new URL(typeof input === 'string' || input instanceof URL ? input : input.url);
    const headers = Object.fromEntries(new Headers(init?.headers).entries());
    const body = init?.body === undefined || init.body === null ? undefined : typeof init.body === 'string' ? init.body : Buffer.from(init.body as ArrayBuffer);
    return new Promise<Response>((resolve, reject) => {
      const req = httpsRequest(url, { method: init?.method ?? 'GET', headers, ca, signal: init?.signal ?? undefined }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => {
          const status = res.statusCode ?? 500;
          const responseHeaders = new Headers();
          for (const [name, value] of Object.entries(res.headers)) if (typeof value === 'string') responseHeaders.set(name, value);
          resolve(new Response(status === 204 || status === 304 ? null : Buffer.concat(chunks), { status, headers: responseHeaders }));
        });
        res.on('error', reject);
      });
      req.on('error', reject);
      req.end(body);
    });
  }) as typeof fetch;
}
