/**
 * The bridge's registration and start as an application service of a second instance (standing
 * for the organisation's Synapse): its sender is not the bridge user (Synapse refuses /sync to the
 * sender), the bridge registers its user before anything else, acts as it with `?user_id=`, tries
 * the cross-signing upload again at the next start after a refusal, and backs off a failing
 * device sync with one warning per kind. A registration of an earlier version (sender = bridge
 * user) still works, with a warning.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import pino from 'pino';
import type { FastifyBaseLogger } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import type { TestHomeserver } from '../../src/testing/index.js';
import { bridgeRegistration, startBridgeApp, type RunningBridge } from '../../src/bridge-app.js';
import type { Config } from '../../src/config/index.js';
import { mainWithBridgeRegistration } from '../support/bridge-appservice.js';

const BRIDGE = '@bridge:localhost';

/** A logger whose lines the test reads. */
function capturingLogger(): { logger: FastifyBaseLogger; lines: Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = [];
  const stream = new Writable({
    write(chunk, _encoding, done) {
      for (const line of String(chunk).split('\n')) if (line.trim() !== '') lines.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  return { logger: pino({ level: 'info' }, stream) as unknown as FastifyBaseLogger, lines };
}

async function until(check: () => boolean | Promise<boolean>, what: string, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

describe('the bridge’s appservice registration on the main homeserver', () => {
  let dir: string;
  let main: TestHomeserver | undefined;
  let bridge: RunningBridge | undefined;
  afterEach(async () => {
    await bridge?.close();
    await main?.close();
    bridge = undefined;
    main = undefined;
    rmSync(dir, { recursive: true, force: true });
  });

  async function setUp(registrationText?: (config: Config) => string): Promise<Config> {
    dir = mkdtempSync(join(tmpdir(), 'bhs-bridge-as-reg-'));
    const started = await mainWithBridgeRegistration(dir, registrationText);
    main = started.main;
    return started.config;
  }

  it('has a sender of its own, registers the bridge user first, acts as it, and retries a refused cross-signing upload', async () => {
    const config = await setUp();
    const registration = parseYaml(bridgeRegistration(config)) as { sender_localpart: string; namespaces: { users: Array<{ exclusive: boolean; regex: string }> } };
    expect(registration.sender_localpart).toBe('bridge-appservice');
    expect(registration.namespaces.users).toEqual([{ exclusive: true, regex: '^@bridge:localhost$' }]);
    expect(await main!.services.accounts.getUser(BRIDGE)).toBeUndefined();

    // The main homeserver refuses the first cross-signing upload, as Synapse 1.67 does for appservice users.
    const refusal = main!.faults.add({ match: 'POST /_matrix/client/v3/keys/device_signing/upload', action: { status: 401, errcode: 'M_UNAUTHORIZED', error: 'no flows' } });
    const first = capturingLogger();
    bridge = await startBridgeApp(config, { logger: first.logger });
    expect(refusal.hits).toBe(1);
    const requests = main!.requests.filter((r) => r.path.startsWith('/_matrix/client/'));
    const register = requests.findIndex((r) => r.method === 'POST' && r.path === '/_matrix/client/v3/register');
    expect(register).toBeGreaterThanOrEqual(0);
    expect(requests[register]!.status).toBe(200);
    // Nothing as the bridge user before it is registered: no profile, no login, no key upload.
    expect(requests.slice(0, register).map((r) => `${r.method} ${r.path}`)).toEqual(['GET /_matrix/client/v3/account/whoami']);
    expect(requests[0]!.userId).toBe('@bridge-appservice:localhost');
    const profile = requests.findIndex((r) => r.method === 'PUT' && r.path.endsWith('/displayname'));
    const login = requests.findIndex((r) => r.method === 'POST' && r.path === '/_matrix/client/v3/login');
    expect(profile).toBeGreaterThan(register);
    expect(login).toBeGreaterThan(register);
    // Every as_token request after the registration names the bridge user; the device's own carry no user_id.
    for (const request of requests.slice(register + 1)) {
      if (request.query.includes('user_id=')) expect(request.query).toContain(`user_id=${encodeURIComponent(BRIDGE)}`);
    }
    expect(requests[profile]!.query).toContain(`user_id=${encodeURIComponent(BRIDGE)}`);
    expect(requests[profile]!.userId).toBe(BRIDGE);
    expect(requests[login]!.status).toBe(200);
    expect(requests.filter((r) => r.path === '/_matrix/client/v3/sync').every((r) => r.userId === undefined || r.userId === BRIDGE)).toBe(true);
    expect(await main!.services.accounts.getUser(BRIDGE)).toBeDefined();
    const warning = first.lines.find((line) => String(line.msg).includes('refused the bridge’s cross-signing keys'));
    expect(warning).toMatchObject({ status: 401, errcode: 'M_UNAUTHORIZED' });
    expect(String(warning!.error)).toContain('no flows');
    expect(warning!.err).toBeUndefined();

    const deviceId = bridge.bridge.deviceId!;
    const keysOf = async () => (await main!.services.keys.query(BRIDGE, { device_keys: { [BRIDGE]: [] } })) as Record<string, any>;
    expect((await keysOf()).self_signing_keys?.[BRIDGE]).toBeUndefined();

    // The next start uploads the cross-signing keys and signs the device.
    await bridge.close();
    bridge = await startBridgeApp(config);
    expect(bridge.bridge.deviceId).toBe(deviceId);
    const keys = await keysOf();
    const selfSigningKeyId = Object.keys(keys.self_signing_keys[BRIDGE].keys)[0]!;
    expect(Object.keys(keys.device_keys[BRIDGE][deviceId].signatures[BRIDGE])).toContain(selfSigningKeyId);
    const uploads = () => main!.requests.filter((r) => r.path === '/_matrix/client/v3/keys/device_signing/upload').length;
    expect(uploads()).toBe(2);

    // Once taken, not again; and a failing device sync is retried, with one warning.
    await bridge.close();
    main!.faults.serverError('GET /_matrix/client/v3/sync', { times: 2 });
    const third = capturingLogger();
    bridge = await startBridgeApp(config, { logger: third.logger });
    expect(uploads()).toBe(2);
    await until(() => third.lines.some((line) => line.msg === 'the bridge’s crypto device syncs again'), 'the device sync to recover');
    const syncWarnings = third.lines.filter((line) => String(line.msg).startsWith('the bridge’s crypto device could not sync'));
    expect(syncWarnings).toHaveLength(1);
    expect(syncWarnings[0]).toMatchObject({ level: 40, status: 500, errcode: 'M_UNKNOWN' });
    expect(syncWarnings[0]!.err).toBeUndefined();
  }, 180_000);

  it('still runs with a registration whose sender is the bridge user, and says to regenerate it', async () => {
    const config = await setUp((c) => bridgeRegistration(c).replace('sender_localpart: bridge-appservice', 'sender_localpart: bridge'));
    const log = capturingLogger();
    bridge = await startBridgeApp(config, { logger: log.logger });
    expect(log.lines.some((line) => line.level === 40 && String(line.msg).includes('regenerate the registration'))).toBe(true);
    const requests = main!.requests.filter((r) => r.path.startsWith('/_matrix/client/'));
    expect(requests.some((r) => r.path === '/_matrix/client/v3/register')).toBe(false);
    expect(requests.every((r) => !r.query.includes('user_id='))).toBe(true);
    expect(requests.find((r) => r.path.endsWith('/displayname'))?.userId).toBe(BRIDGE);
  }, 120_000);
});
