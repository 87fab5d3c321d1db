/**
 * `bot-homeserver dev-federation DIR`: two homeservers that federate with each other on this
 * machine, ready to start. Federation needs TLS that each side trusts, names the other can reach,
 * and loopback allowed (it is refused by default): a throwaway CA, one certificate for 127.0.0.1,
 * server names `127.0.0.1:<port>` (an IP literal with a port is used as is, no DNS or well-known),
 * and two configs saying so. Plus a script that joins them with curl, and the recipe.
 *
 * The certificates are made with node-forge, in-process: the openssl command is missing on many
 * machines (Windows, slim containers), and Node's crypto makes keys but not certificates. The keys
 * are Node's own (RSA 2048); forge only assembles and signs the certificates.
 */
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import forge from 'node-forge';
import { CommandError } from './command-error.js';

/** How long the certificates are valid: long enough to play, short enough to be thrown away. */
const VALID_DAYS = 90;

export interface DevFederationOptions {
  dir: string;
  mainPort: number;
  botsPort: number;
  /** The command line that runs bot-homeserver here, for the recipe and the script. */
  command: string;
}

export interface DevFederation {
  /** What to do next, for the terminal (also written to DIR/README.md). */
  recipe: string;
  files: string[];
}

export function writeDevFederation(options: DevFederationOptions): DevFederation {
  const dir = resolve(options.dir);
  if (existsSync(dir) && readdirSync(dir).length > 0) throw new CommandError(`${dir} is not empty; give a new folder (nothing is overwritten)`);
  for (const [name, port] of [['--main-port', options.mainPort], ['--bots-port', options.botsPort]] as const) {
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw new CommandError(`${name} must be a port from 1 to 65535, not ${port}`);
  }
  if (options.mainPort === options.botsPort) throw new CommandError('--main-port and --bots-port must differ: both servers listen on 127.0.0.1');
  mkdirSync(dir, { recursive: true, mode: 0o700 });

  const notAfter = new Date(Date.now() + VALID_DAYS * 86_400_000);
  const tls = throwawayCertificates(notAfter);
  const path = (name: string) => join(dir, name);
  writeFileSync(path('ca.pem'), tls.caPem);
  writeFileSync(path('server.pem'), tls.certPem);
  writeFileSync(path('server.key'), tls.keyPem, { mode: 0o600 });

  const servers = [
    { role: 'main', port: options.mainPort, what: 'the "main" server (where people would be)' },
    { role: 'bots', port: options.botsPort, what: 'the bot server' },
  ] as const;
  for (const server of servers) {
    writeFileSync(path(`${server.role}.yaml`), serverConfig({ ...server, dir }));
  }
  const main = servers[0];
  const bots = servers[1];
  writeFileSync(path('try-federation.sh'), tryScript({ command: options.command, mainPort: main.port, botsPort: bots.port }));
  chmodSync(path('try-federation.sh'), 0o755);
  writeFileSync(path('synapse-snippet.yaml'), synapseSnippet({ dir, port: main.port }));
  const recipe = recipeText({ dir, command: options.command, mainPort: main.port, botsPort: bots.port, notAfter });
  writeFileSync(path('README.md'), recipe);
  return { recipe, files: ['ca.pem', 'server.pem', 'server.key', 'main.yaml', 'bots.yaml', 'try-federation.sh', 'synapse-snippet.yaml', 'README.md'].map(path) };
}

/**
 * A CA and one server certificate it signed, for 127.0.0.1 (an IP SAN: a server name that is an
 * IP literal is checked against the certificate's addresses) and localhost. The CA's key is not
 * kept, so ca.pem, wherever it is trusted, vouches for this certificate and nothing else.
 */
function throwawayCertificates(notAfter: Date): { caPem: string; certPem: string; keyPem: string } {
  const caKey = rsaKeys();
  const caName = [{ name: 'commonName', value: 'bot-homeserver dev-federation throwaway CA' }];
  const ca = forge.pki.createCertificate();
  ca.publicKey = caKey.publicKey;
  ca.serialNumber = serialNumber();
  ca.validity.notBefore = new Date(Date.now() - 60_000);
  ca.validity.notAfter = notAfter;
  ca.setSubject(caName);
  ca.setIssuer(caName);
  ca.setExtensions([
    { name: 'basicConstraints', cA: true, pathLenConstraint: 0, critical: true },
    { name: 'keyUsage', keyCertSign: true, cRLSign: true, critical: true },
    { name: 'subjectKeyIdentifier' },
  ]);
  ca.sign(caKey.privateKey, forge.md.sha256.create());

  const serverKey = rsaKeys();
  const cert = forge.pki.createCertificate();
  cert.publicKey = serverKey.publicKey;
  cert.serialNumber = serialNumber();
  cert.validity.notBefore = ca.validity.notBefore;
  cert.validity.notAfter = notAfter;
  cert.setSubject([{ name: 'commonName', value: '127.0.0.1' }]);
  cert.setIssuer(caName);
  cert.setExtensions([
    { name: 'basicConstraints', cA: false },
    { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
    { name: 'extKeyUsage', serverAuth: true },
    // type 7 is an IP address, 2 a DNS name (RFC 5280's GeneralName).
    { name: 'subjectAltName', altNames: [{ type: 7, ip: '127.0.0.1' }, { type: 2, value: 'localhost' }] },
    { name: 'authorityKeyIdentifier', keyIdentifier: ca.generateSubjectKeyIdentifier().getBytes() },
  ]);
  cert.sign(caKey.privateKey, forge.md.sha256.create());
  return { caPem: forge.pki.certificateToPem(ca), certPem: forge.pki.certificateToPem(cert), keyPem: serverKey.pem };
}

/** Keys made by Node's crypto (fast, native), handed to forge for signing. */
function rsaKeys(): { pem: string; privateKey: forge.pki.rsa.PrivateKey; publicKey: forge.pki.rsa.PublicKey } {
  const { privateKey: pem } = generateKeyPairSync('rsa', { modulusLength: 2048, privateKeyEncoding: { type: 'pkcs8', format: 'pem' }, publicKeyEncoding: { type: 'spki', format: 'pem' } });
  const privateKey = forge.pki.privateKeyFromPem(pem) as forge.pki.rsa.PrivateKey;
  return { pem, privateKey, publicKey: forge.pki.setRsaPublicKey(privateKey.n, privateKey.e) };
}

/** 16 random bytes, the first below 0x80: a serial number is a positive integer (RFC 5280). */
function serialNumber(): string {
  const bytes = randomBytes(16);
  bytes[0] = bytes[0]! & 0x7f;
  return bytes.toString('hex');
}

function serverConfig(server: { role: string; port: number; what: string; dir: string }): string {
  const q = (text: string) => JSON.stringify(text);
  return `# ${server.what}, written by \`bot-homeserver dev-federation\` for trying federation on one
# machine. Throwaway: nothing here is fit for a server others rely on.

# An IP address with a port: other servers connect to it as it is (no DNS, no .well-known), and
# check that the certificate names the address. User ids look like @alice:127.0.0.1:${server.port}.
server_name: ${q(`127.0.0.1:${server.port}`)}
listen:
  host: 127.0.0.1
  port: ${server.port}
database:
  path: ${q(join(server.dir, server.role, 'homeserver.db'))}

# TLS on the listener itself, for clients and other servers alike: https://127.0.0.1:${server.port}
tls_certificate_path: ${q(join(server.dir, 'server.pem'))}
tls_private_key_path: ${q(join(server.dir, 'server.key'))}
# Federation trusts this CA instead of the system's (Synapse's key of the same name)...
federation_custom_ca_list: [${q(join(server.dir, 'ca.pem'))}]
# ...and may reach 127.0.0.1, which ip_range_blacklist refuses by default.
ip_range_whitelist: ["127.0.0.1/32"]
# No notary: each server asks the other for its keys directly.
trusted_key_servers: []
`;
}

/** The example: every step one curl command, run as it is by the e2e test. */
function tryScript(options: { command: string; mainPort: number; botsPort: number }): string {
  const curl = 'curl -sS --fail-with-body --max-time 10 --cacert ca.pem';
  return `#!/bin/sh
# Written by \`bot-homeserver dev-federation\`. With both servers started (README.md), this makes
# alice on main and the bot hello on bots, logs both in, lets alice make a room that hello joins
# over federation, and has each read what the other says. Every request is one curl command.
set -eu
cd "$(dirname "$0")"
bhs() { ${options.command} "$@"; }
# The value of one field of the JSON on stdin.
field() { node -e 'let s = ""; process.stdin.on("data", (d) => (s += d)).on("end", () => { const v = JSON.parse(s)[process.argv[1]]; if (v === undefined) { console.error(s); process.exit(1); } console.log(v); })' "$1"; }
MAIN=https://127.0.0.1:${options.mainPort}
BOTS=https://127.0.0.1:${options.botsPort}

# 1. An account on each server (the operator commands work beside a running server).
bhs users list --config main.yaml 2>/dev/null | grep -q '^@alice:' || bhs create-user alice --password alice-throwaway-password --config main.yaml 2>/dev/null
BOT_PASSWORD=$(bhs create-bot hello --json --config bots.yaml 2>/dev/null | field password)

# 2. Log in on each.
ALICE=$(${curl} "$MAIN/_matrix/client/v3/login" \\
  -d '{"type": "m.login.password", "identifier": {"type": "m.id.user", "user": "alice"}, "password": "alice-throwaway-password"}' | field access_token)
BOT=$(${curl} "$BOTS/_matrix/client/v3/login" \\
  -d "{\\"type\\": \\"m.login.password\\", \\"identifier\\": {\\"type\\": \\"m.id.user\\", \\"user\\": \\"hello\\"}, \\"password\\": \\"$BOT_PASSWORD\\"}" | field access_token)

# 3. alice makes a public room on main.
ROOM=$(${curl} -H "Authorization: Bearer $ALICE" "$MAIN/_matrix/client/v3/createRoom" \\
  -d '{"preset": "public_chat", "name": "Across two servers"}' | field room_id)
echo "alice made $ROOM on main"

# 4. hello joins it through the bots server, which asks main over federation (make_join, send_join).
${curl} -H "Authorization: Bearer $BOT" "$BOTS/_matrix/client/v3/join/$ROOM?server_name=127.0.0.1:${options.mainPort}" -d '{}' >/dev/null
echo "hello joined it from the bots server"

# 5. Each says something, and the other reads it (it arrives within a moment).
wait_for() { # server, token, text
  tries=0
  while [ $tries -lt 50 ]; do
    if ${curl} -H "Authorization: Bearer $2" "$1/_matrix/client/v3/rooms/$ROOM/messages?dir=b&limit=20" | grep -q "$3"; then
      echo "seen on $1: $3"
      return 0
    fi
    tries=$((tries + 1))
    sleep 0.2
  done
  echo "not seen on $1 within 10 s: $3" >&2
  return 1
}
${curl} -X PUT -H "Authorization: Bearer $BOT" "$BOTS/_matrix/client/v3/rooms/$ROOM/send/m.room.message/1" \\
  -d '{"msgtype": "m.text", "body": "hello from the bots server"}' >/dev/null
wait_for "$MAIN" "$ALICE" "hello from the bots server"
${curl} -X PUT -H "Authorization: Bearer $ALICE" "$MAIN/_matrix/client/v3/rooms/$ROOM/send/m.room.message/1" \\
  -d '{"msgtype": "m.text", "body": "hello back from main"}' >/dev/null
wait_for "$BOTS" "$BOT" "hello back from main"
echo "federation works"
`;
}

/** The keys a Synapse needs to stand in for `main` (docs/federation.md, "Two servers on one machine"). */
function synapseSnippet(options: { dir: string; port: number }): string {
  const q = (text: string) => JSON.stringify(text);
  return `# To run a Synapse in place of main.yaml: merge these keys into the homeserver.yaml that
# \`python -m synapse.app.homeserver --generate-config\` wrote (server name 127.0.0.1:${options.port}), then start
# it instead of \`bot-homeserver start --config main.yaml\`. bots.yaml needs no change. Remove the
# deprecated federation_ip_range_blacklist if your config has it: it turns the whitelist off for federation.
server_name: ${q(`127.0.0.1:${options.port}`)}
listeners:
  - port: ${options.port}
    bind_addresses: ["127.0.0.1"]
    type: http
    tls: true
    resources:
      - names: [client, federation]
tls_certificate_path: ${q(join(options.dir, 'server.pem'))}
tls_private_key_path: ${q(join(options.dir, 'server.key'))}
federation_custom_ca_list: [${q(join(options.dir, 'ca.pem'))}]
federation_verify_certificates: true
ip_range_whitelist: ["127.0.0.1/32"]
trusted_key_servers: []
`;
}

function recipeText(options: { dir: string; command: string; mainPort: number; botsPort: number; notAfter: Date }): string {
  const { dir, command, mainPort, botsPort } = options;
  const ca = shellQuote(join(dir, 'ca.pem'));
  return `Two homeservers that federate with each other on this machine, in ${dir}:

  main  server_name 127.0.0.1:${mainPort}  https://127.0.0.1:${mainPort}  main.yaml
  bots  server_name 127.0.0.1:${botsPort}  https://127.0.0.1:${botsPort}  bots.yaml

They serve TLS with server.pem (for 127.0.0.1 and localhost, until ${options.notAfter.toISOString().slice(0, 10)}),
signed by a throwaway CA (ca.pem, whose key was not kept) that both trust for federation.

1. Start both, each in a terminal of its own (Ctrl-C stops it):

     ${command} start --config ${shellQuote(join(dir, 'main.yaml'))}
     ${command} start --config ${shellQuote(join(dir, 'bots.yaml'))}

2. In a third, run the example:

     sh ${shellQuote(join(dir, 'try-federation.sh'))}

   It makes alice on main and the bot hello on bots, logs both in, lets alice make a room that
   hello joins over federation, and has each read what the other says. Every request in it is
   one curl command to copy, such as the join:

     curl --cacert ${ca} -H "Authorization: Bearer $BOT" \\
       "https://127.0.0.1:${botsPort}/_matrix/client/v3/join/$ROOM?server_name=127.0.0.1:${mainPort}" -d '{}'

Anything else: curl --cacert ${ca} https://127.0.0.1:${mainPort}/_matrix/client/versions
(clients need the CA too: NODE_EXTRA_CA_CERTS=${ca} for Node, SSL_CERT_FILE for Python).
A Synapse in place of main: synapse-snippet.yaml has the keys to merge into its config.
All of it is throwaway: stop both servers and delete the folder when done.
`;
}

/** A path fit to paste into a POSIX shell. */
export function shellQuote(text: string): string {
  return /^[A-Za-z0-9_./:@%+=,-]+$/.test(text) ? text : `'${text.replaceAll("'", "'\\''")}'`;
}
