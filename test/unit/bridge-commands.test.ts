import { describe, expect, it } from 'vitest';
import { holdsSecret, parseCommand, USAGE } from '../../src/bridge/commands.js';

describe('parseCommand', () => {
  it.each([
    ['!bridge', { kind: 'help' }],
    ['!bridge help', { kind: 'help' }],
    ['  !BRIDGE   Help  ', { kind: 'help' }],
    ['!bridge webhook ci', { kind: 'webhook-create', name: 'ci' }],
    ['!bridge webhook build-alerts_2.x', { kind: 'webhook-create', name: 'build-alerts_2.x' }],
    ['!bridge webhook Überwachung', { kind: 'webhook-create', name: 'Überwachung' }],
    ['!bridge webhook list', { kind: 'webhook-list' }],
    ['!bridge webhooks LIST', { kind: 'webhook-list' }],
    ['!bridge webhook remove ci', { kind: 'webhook-remove', name: 'ci' }],
    ['!bridge webhook ci secret', { kind: 'webhook-secret', name: 'ci', secret: { action: 'generate' } }],
    ['!bridge webhook ci SECRET Off', { kind: 'webhook-secret', name: 'ci', secret: { action: 'clear' } }],
    ['!bridge webhook sentry secret 0123456789abcdefXYZ', { kind: 'webhook-secret', name: 'sentry', secret: { action: 'set', value: '0123456789abcdefXYZ' } }],
    ['!bridge feed https://example.org/feed.xml', { kind: 'feed-add', url: 'https://example.org/feed.xml', label: undefined }],
    ['!bridge feed <https://example.org/feed.xml#top> Team  blog', { kind: 'feed-add', url: 'https://example.org/feed.xml', label: 'Team  blog' }],
    ['!bridge feed HTTP://Example.ORG/a b', { kind: 'feed-add', url: 'http://example.org/a', label: 'b' }],
    ['!bridge feed list', { kind: 'feed-list' }],
    ['!bridge feed remove https://example.org/feed.xml', { kind: 'feed-remove', url: 'https://example.org/feed.xml' }],
    // A reply carries the quoted message first; the command is the reply's own text.
    ['> <@alice:test.local> earlier words\n\n!bridge webhook list', { kind: 'webhook-list' }],
  ])('%j', (body, expected) => {
    expect(parseCommand(body)).toEqual(expected);
  });

  it.each(['hello', '!bridges help', 'please !bridge help', '', '> !bridge help'])('ignores %j', (body) => {
    expect(parseCommand(body)).toBeUndefined();
  });

  it.each([
    ['!bridge webhook', USAGE.webhook],
    ['!bridge webhook remove', USAGE.webhook],
    ['!bridge webhook remove a b', USAGE.webhook],
    ['!bridge webhook list extra', USAGE.webhook],
    ['!bridge webhook two words', 'one word'],
    ['!bridge webhook -leading', 'starting with a letter or digit'],
    ['!bridge webhook bad/name', 'letters, digits'],
    [`!bridge webhook ${'a'.repeat(65)}`, 'at most 64'],
    ['!bridge webhook ci secret short', '16 to 256 characters'],
    ['!bridge webhook ci secret two words', 'one word'],
    ['!bridge webhook bad/name secret', 'letters, digits'],
    ['!bridge feed', USAGE.feed],
    ['!bridge feed not-a-url', 'is not a URL'],
    ['!bridge feed ftp://example.org/feed', 'http or https only'],
    ['!bridge feed file:///etc/passwd', 'http or https only'],
    ['!bridge feed https://user:pw@example.org/feed', 'user name or password'],
    ['!bridge feed remove', USAGE.feed],
    [`!bridge feed https://example.org/f ${'x'.repeat(101)}`, 'at most 100'],
    ['!bridge frobnicate', 'Unknown command "frobnicate"'],
  ])('answers %j with a usage line', (body, expected) => {
    const command = parseCommand(body);
    expect(command?.kind).toBe('usage');
    expect(command && 'message' in command ? command.message : '').toContain(expected);
  });
});

describe('holdsSecret', () => {
  it.each([
    ['!bridge webhook sentry secret 0123456789abcdefXYZ', true],
    // Refused commands still hold what may be a real passphrase.
    ['!bridge webhook ci secret short', true],
    ['!bridge webhook ci secret two words', true],
    ['!bridge webhook bad/name secret hunter2hunter2hunter2', true],
    ['> <@a:b> quoted\n\n!bridge webhooks ci SECRET value-value-value', true],
    ['!bridge webhook ci secret', false],
    ['!bridge webhook ci secret off', false],
    ['!bridge webhook secret', false],
    ['!bridge feed https://example.org/secret secret', false],
    ['webhook ci secret value', false],
  ])('%j: %s', (body, expected) => {
    expect(holdsSecret(body)).toBe(expected);
  });
});
