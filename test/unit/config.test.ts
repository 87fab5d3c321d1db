import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { CONFIG_FILE_ENV, ConfigError, DEFAULT_CONFIG_FILE, loadConfig } from '../../src/config/index.js';
import { parseDuration } from '../../src/config/duration.js';

function configFile(text: string): string {
  const file = join(mkdtempSync(join(tmpdir(), 'bhs-config-')), 'config.yaml');
  writeFileSync(file, text);
  return file;
}

describe('configuration', () => {
  it('has defaults for everything', () => {
    const config = loadConfig({ env: {} });
    expect(config.server_name).toBe('localhost');
    expect(config.listen).toEqual({ host: '127.0.0.1', port: 8008, x_forwarded: false, request_timeout: 60_000, max_connections_per_address: 256 });
    expect(config.database).toEqual({ path: './data/homeserver.db', synchronous: 'full', url: null, pool_size: 10, statement_timeout: 60_000, prepared_statements: true, schema: 'public', ssl: false, ssl_ca_file: null });
    expect(config.enable_registration).toBe(false);
    expect(config.registration_shared_secret).toBeNull();
    expect(config.refreshable_access_token_lifetime).toBe(300_000);
    expect(config.nonrefreshable_access_token_lifetime).toBeNull();
    expect(config.rc_login.failed_attempts).toEqual({ per_second: 0.1, burst_count: 5 });
    expect(config.public_baseurl).toBeUndefined();
  });

  it("config.example.yaml's header names every place findConfigFile looks", () => {
    const header = readFileSync(new URL('../../config.example.yaml', import.meta.url), 'utf8').split('\n\n')[0]!;
    for (const place of ['--config <file>', CONFIG_FILE_ENV, `./${DEFAULT_CONFIG_FILE}`]) expect(header).toContain(place);
  });

  it('ships config.example.yaml with exactly the defaults', () => {
    const example = loadConfig({ env: {}, file: new URL('../../config.example.yaml', import.meta.url).pathname });
    expect(example).toEqual(loadConfig({ env: {} }));
    expect(example.bridge).toMatchObject({ enabled: true, localpart: 'bridge', feeds: { poll_interval_seconds: 600, allow_private_addresses: false } });
  });

  it('reads a YAML file, and the environment overrides it', () => {
    const file = configFile('server_name: example.org\nlisten:\n  port: 9000\nrc_message:\n  per_second: 5\n  burst_count: 10\n');
    const config = loadConfig({
      file,
      env: {
        BOT_HOMESERVER_LISTEN__PORT: '0',
        BOT_HOMESERVER_DATABASE__PATH: ':memory:',
        BOT_HOMESERVER_ENABLE_REGISTRATION: 'true',
        BOT_HOMESERVER_PUBLIC_BASEURL: 'https://matrix.example.org',
        BOT_HOMESERVER_REGISTRATION_SHARED_SECRET: 'null',
      },
    });
    expect(config.server_name).toBe('example.org');
    expect(config.listen.port).toBe(0);
    expect(config.listen.host).toBe('127.0.0.1');
    expect(config.database.path).toBe(':memory:');
    expect(config.enable_registration).toBe(true);
    expect(config.public_baseurl).toBe('https://matrix.example.org');
    expect(config.registration_shared_secret).toBeNull();
    expect(config.rc_message).toEqual({ per_second: 5, burst_count: 10 });
  });

  it('finds the file through BOT_HOMESERVER_CONFIG', () => {
    const file = configFile('server_name: from-env.example\n');
    expect(loadConfig({ env: { BOT_HOMESERVER_CONFIG: file } }).server_name).toBe('from-env.example');
  });

  it.each([
    ['listen:\n  port: 70000\n', 'listen.port'],
    ['listen:\n  port: eighty\n', 'listen.port'],
    ['database:\n  synchronous: sometimes\n', 'database.synchronous'],
    ['server_name: "has space"\n', 'server_name'],
    ['rc_login:\n  address:\n    per_second: -1\n    burst_count: 3\n', 'rc_login.address.per_second'],
    ['refreshable_access_token_lifetime: 5 minutes\n', 'refreshable_access_token_lifetime'],
    ['serve_name: typo.example\n', 'serve_name: unknown key'],
    ['listen:\n  prot: 1\n', 'listen.prot: unknown key'],
  ])('refuses %j naming %s', (yaml, key) => {
    expect(() => loadConfig({ file: configFile(yaml), env: {} })).toThrow(ConfigError);
    expect(() => loadConfig({ file: configFile(yaml), env: {} })).toThrow(key);
  });

  it('names an unknown environment override', () => {
    expect(() => loadConfig({ env: { BOT_HOMESERVER_LISTEN__PROT: '1' } })).toThrow(
      'BOT_HOMESERVER_LISTEN__PROT (listen.prot): unknown key; did you mean BOT_HOMESERVER_LISTEN__PORT?',
    );
  });

  it('hints at __ when a variable nests with a single underscore', () => {
    expect(() => loadConfig({ env: { BOT_HOMESERVER_LISTEN_PORT: '9' } })).toThrow(
      'BOT_HOMESERVER_LISTEN_PORT (listen_port): unknown key; did you mean BOT_HOMESERVER_LISTEN__PORT? (a double underscore, __, separates nesting levels)',
    );
    // Two levels down, and below a key that was nested right.
    expect(() => loadConfig({ env: { BOT_HOMESERVER_RC_LOGIN_ADDRESS_PER_SECOND: '1' } })).toThrow(
      'did you mean BOT_HOMESERVER_RC_LOGIN__ADDRESS__PER_SECOND?',
    );
    expect(() => loadConfig({ env: { BOT_HOMESERVER_BRIDGE__FEEDS_POLL_INTERVAL_SECONDS: '60' } })).toThrow(
      'BOT_HOMESERVER_BRIDGE__FEEDS_POLL_INTERVAL_SECONDS (bridge.feeds_poll_interval_seconds): unknown key; did you mean BOT_HOMESERVER_BRIDGE__FEEDS__POLL_INTERVAL_SECONDS?',
    );
    // The same slip in a file gets the dotted path.
    expect(() => loadConfig({ file: configFile('listen_port: 9\n'), env: {} })).toThrow('listen_port: unknown key; did you mean listen.port?');
  });

  it('says in one sentence per key what a value must be, with the value given and a near key name', () => {
    const message = (text: string, env: Record<string, string> = {}) => {
      try {
        loadConfig({ file: configFile(text), env });
      } catch (err) {
        return (err as Error).message;
      }
      throw new Error('no error');
    };
    const errors = message(
      ['server_name: "bad name!"', 'max_sync_timeout: 5 minutes', 'max_upload_size: 10MB', 'rc_mesage: {}', 'listen: {port: 99999}', ''].join('\n'),
      { BOT_HOMESERVER_REFRESH_TOKEN_LIFETIME: 'soon' },
    ).split('\n');
    expect(errors[0]).toBe('invalid configuration:');
    expect(errors.slice(1).sort()).toEqual([
      '  server_name: "bad name!" is not a host name such as example.org, an IPv4 address or an [IPv6] address, with an optional :port',
      '  max_sync_timeout: "5 minutes" is not a duration such as 500ms, 30s, 5m, 1h or 7d (a plain number is milliseconds)',
      '  max_upload_size: "10MB" is not a size in bytes, or a number with K, M or G such as 50M',
      '  rc_mesage: unknown key; did you mean rc_message?',
      '  listen.port: 99999 is more than the largest allowed value, 65535',
      '  BOT_HOMESERVER_REFRESH_TOKEN_LIFETIME (refresh_token_lifetime): "soon" is not a duration such as 500ms, 30s, 5m, 1h or 7d (a plain number is milliseconds), or null',
    ].sort());
    // No regex, no union branches: nothing an operator has to decode.
    expect(errors.join('\n')).not.toMatch(/pattern|\^|must match|must be integer/);
    expect(message('bridge: {enabld: false}\n')).toContain('bridge.enabld: unknown key; did you mean bridge.enabled?');
    expect(message('completely_unrelated_key: 1\n')).toMatch(/completely_unrelated_key: unknown key$/);
  });

  it('says where YAML is broken, and when the file is missing', () => {
    expect(() => loadConfig({ file: configFile('listen:\n  port: [1,\n'), env: {} })).toThrow(/not valid YAML/);
    expect(() => loadConfig({ file: '/nonexistent/config.yaml', env: {} })).toThrow(/cannot read config file/);
    expect(() => loadConfig({ file: configFile('- a\n- b\n'), env: {} })).toThrow(/mapping/);
  });

  it('reads Synapse-style durations', () => {
    expect(parseDuration('500ms')).toBe(500);
    expect(parseDuration('30s')).toBe(30_000);
    expect(parseDuration('5m')).toBe(300_000);
    expect(parseDuration('2h')).toBe(7_200_000);
    expect(parseDuration('1d')).toBe(86_400_000);
    expect(parseDuration('1500')).toBe(1500);
    expect(parseDuration(42)).toBe(42);
    expect(() => parseDuration('soon')).toThrow();
  });
});

describe('environment overrides', () => {
  it('convert text to each key\'s type', () => {
    const config = loadConfig({
      env: {
        BOT_HOMESERVER_REGISTRATION_SHARED_SECRET: '12345',
        BOT_HOMESERVER_LISTEN__X_FORWARDED: 'true',
        BOT_HOMESERVER_RC_LOGIN__ADDRESS__PER_SECOND: '2.5',
        BOT_HOMESERVER_REFRESH_TOKEN_LIFETIME: '300000',
        BOT_HOMESERVER_SERVER_NAME: '',
      },
    });
    expect(config.registration_shared_secret).toBe('12345');
    expect(config.listen.x_forwarded).toBe(true);
    // The other field of a limit keeps its default, as Synapse fills in a missing one.
    expect(config.rc_login.address).toEqual({ per_second: 2.5, burst_count: 20 });
    expect(config.refresh_token_lifetime).toBe(300_000);
    expect(config.server_name).toBe('localhost');
  });

  it('refuse a zero lifetime and list allowed values', () => {
    expect(() => loadConfig({ env: { BOT_HOMESERVER_REFRESH_TOKEN_LIFETIME: '0s' } })).toThrow(
      'refresh_token_lifetime: must be longer than zero',
    );
    expect(() => loadConfig({ env: { BOT_HOMESERVER_DATABASE__SYNCHRONOUS: 'off' } })).toThrow(
      'BOT_HOMESERVER_DATABASE__SYNCHRONOUS (database.synchronous): "off" is not one of "full", "normal"',
    );
  });
});
