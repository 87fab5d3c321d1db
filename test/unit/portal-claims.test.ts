/** The bot portal's pure rules: Synapse-style templates and attribute requirements, bot names. */
import { describe, expect, test } from 'vitest';
import { meetsRequirement, meetsRequirements, personIdFrom, renderTemplate, templateProblem } from '../../src/portal/claims.js';
import { BotNames, DEFAULT_PATTERN } from '../../src/portal/bot-names.js';
import { finishConfig } from '../../src/config/index.js';

const claims = { sub: 'f81d4fae', preferred_username: 'Alice.Example', email: 'alice@example.org', groups: ['staff', 'bot-creators'], 'custom-claim': 'x', nested: { team: 'ops' } };

describe('templates (the subset of Jinja2 Synapse examples use)', () => {
  test.each([
    ['{{ user.preferred_username }}', 'Alice.Example'],
    ['{{ user.preferred_username | lower }}', 'alice.example'],
    ['{{ user.email | localpart_from_email }}', 'alice'],
    ['{{user["custom-claim"]}}-{{ user.nested.team }}', 'x-ops'],
    ['{{ user.missing }}', ''],
    ['{{ user.groups }}', ''],
    ['bot-{{ user.sub | upper }}', 'bot-F81D4FAE'],
  ])('%s renders as %j', (template, rendered) => {
    expect(templateProblem(template)).toBeNull();
    expect(renderTemplate(template, claims)).toBe(rendered);
  });

  test.each(['{% if user.x %}x{% endif %}', '{{ user.name | title }}', '{{ 7 * 7 }}', '{{ config.items() }}', '{{ user.name '])('%s is refused', (template) => {
    expect(templateProblem(template)).not.toBeNull();
  });

  test('a prototype key is not a claim', () => {
    expect(renderTemplate('{{ user.constructor }}', claims)).toBe('');
  });
});

describe('attribute requirements (as Synapse reads them)', () => {
  test('a list claim contains the value; a string claim equals it; one_of takes any', () => {
    expect(meetsRequirement(claims, { attribute: 'groups', value: 'bot-creators' })).toBe(true);
    expect(meetsRequirement(claims, { attribute: 'groups', value: 'bot' })).toBe(false);
    expect(meetsRequirement(claims, { attribute: 'email', value: 'alice@example.org' })).toBe(true);
    expect(meetsRequirement(claims, { attribute: 'groups', one_of: ['admins', 'staff'] })).toBe(true);
    expect(meetsRequirement(claims, { attribute: 'absent', value: '' })).toBe(false);
    expect(meetsRequirements(claims, [])).toBe(true);
    expect(meetsRequirements(claims, [{ attribute: 'groups', value: 'staff' }, { attribute: 'groups', value: 'admins' }])).toBe(false);
  });
});

describe('people and bot names', () => {
  test('the person is @<localpart>:<people_server_name>, lower-cased; unusable names are refused with a reason', () => {
    expect(personIdFrom(claims, '{{ user.preferred_username }}', 'example.org')).toEqual({ ok: true, userId: '@alice.example:example.org' });
    expect(personIdFrom(claims, '{{ user.missing }}', 'example.org')).toMatchObject({ ok: false, reason: 'your sign-in gave no user name' });
    expect(personIdFrom({ preferred_username: 'al ice' }, '{{ user.preferred_username }}', 'example.org').ok).toBe(false);
  });

  test('bot names follow the pattern and avoid the reserved ones', () => {
    const names = new BotNames({ pattern: DEFAULT_PATTERN, reserved: ['admin'] });
    expect(names.problem('hello-bot')).toBeNull();
    expect(names.problem('admin')).toContain('reserved');
    expect(names.problem('Hello')).toContain('lower-case');
    expect(names.problem('9lives')).toContain('not allowed');
    expect(names.problem('')).toContain('Choose');
  });

  test('the configuration refuses a pattern that is not anchored or could backtrack exponentially, and a template it cannot read', () => {
    const base = { people_server_name: 'example.org', oidc_providers: [{ issuer: 'https://id.example.org/', client_id: 'c', client_secret: 's' }] };
    expect(() => finishConfig({ portal: { ...base, bot_username_pattern: '[a-z]+' } })).toThrow(/start with \^ and end with \$/);
    expect(() => finishConfig({ portal: { ...base, bot_username_pattern: '^(a+)+$' } })).toThrow(/exponential/);
    expect(() => finishConfig({ portal: { ...base, oidc_providers: [{ issuer: 'https://id.example.org/', client_id: 'c' }] } })).toThrow(/client_secret/);
    const config = finishConfig({ portal: base });
    expect(config.portal?.oidc_providers[0]?.user_mapping_provider.config.localpart_template).toBe('{{ user.preferred_username }}');
    expect(config.portal?.session_idle_timeout).toBe(30 * 60_000);
    expect(finishConfig({}).portal).toBeUndefined();
  });
});
