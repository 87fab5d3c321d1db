/** Appservice namespace regexes: refused when they could backtrack catastrophically; long ids never matched. */
import { describe, expect, it } from 'vitest';
import { AppServiceRegistry } from '../../src/appservices/registry.js';
import { parseAppServiceRegistration } from '../../src/config/appservices.js';
import { compileNamespaceRegex } from '../../src/config/namespace-regex.js';

describe('namespace regexes', () => {
  it.each([
    '@_slack_.*:example\\.org',
    '@telegram_[0-9]+:.*',
    '^@whatsapp_.+:example\\.com$',
    '#_discord_[0-9]+_[0-9]+:example\\.org',
    '@(irc|slack)_.*:example\\.org',
    '@hbirc_.*',
    '.*',
    '@(?!bot).*:example\\.org',
  ])('accepts %s, anchored at the start as Synapse does', (regex) => {
    expect(compileNamespaceRegex(regex).source.startsWith('^(?:')).toBe(true);
  });

  it.each(['@(a+)+b:hs\\.test', '(a*)*', '@(\\w+\\s?)*:example\\.org', '@(_x+)*:example\\.org'])('refuses %s, naming it', (regex) => {
    expect(() => compileNamespaceRegex(regex)).toThrow(`${JSON.stringify(regex)} could take exponential time to match`);
  });

  it('refuses a registration with such a pattern, naming the file, the key and the pattern', () => {
    const yaml = "id: x\nas_token: a\nhs_token: b\nsender_localpart: s\nnamespaces:\n  aliases:\n    - exclusive: true\n      regex: '#(a+)+:hs\\.test'\n";
    expect(() => parseAppServiceRegistration(yaml, '/etc/x.yaml')).toThrow('/etc/x.yaml: namespaces.aliases[0].regex "#(a+)+:hs\\\\.test" could take exponential time');
  });

  it('never matches an id longer than the spec allows', () => {
    const yaml = "id: x\nas_token: a\nhs_token: b\nsender_localpart: s\nnamespaces:\n  users:\n    - exclusive: true\n      regex: '@a.*'\n  aliases:\n    - exclusive: true\n      regex: '#a.*'\n";
    const registry = new AppServiceRegistry([parseAppServiceRegistration(yaml, 'x.yaml')], 'hs.test');
    const service = registry.all[0]!;
    expect(registry.isInterestedInUser(service, `@${'a'.repeat(250)}:hs.test`)).toBe(false);
    expect(registry.isInterestedInUser(service, `@${'a'.repeat(200)}:hs.test`)).toBe(true);
    expect(registry.exclusiveOwnerOfUser(`@${'a'.repeat(300)}`)).toBeUndefined();
    expect(registry.exclusiveOwnerOfAlias(`#${'a'.repeat(300)}`)).toBeUndefined();
    expect(registry.exclusiveOwnerOfAlias('#abc:hs.test')).toBe(service);
  });
});
