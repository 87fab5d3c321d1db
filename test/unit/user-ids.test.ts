import { describe, expect, it } from 'vitest';
import { localpartOf, localpartProblem, resolveLocalUserId } from '../../src/users/user-ids.js';

describe('user ids', () => {
  it.each([
    ['bot', null],
    ['my-bot_2.0=x/y+z', null],
    ['', 'User ID cannot be empty'],
    ['Bot', "User ID can only contain characters a-z, 0-9, or '=_-./+'"],
    ['a b', "User ID can only contain characters a-z, 0-9, or '=_-./+'"],
    ['ümlaut', "User ID can only contain characters a-z, 0-9, or '=_-./+'"],
    ['_hidden', 'User ID may not begin with _'],
    ['x'.repeat(250), 'User ID may not be longer than 255 characters'],
  ])('localpart %j -> %s', (localpart, problem) => {
    expect(localpartProblem(localpart, 'example.org')).toBe(problem);
  });

  it('reads what a person types as a user on this server', () => {
    expect(resolveLocalUserId('bot', 'example.org')).toBe('@bot:example.org');
    expect(resolveLocalUserId(' Bot ', 'example.org')).toBe('@bot:example.org');
    expect(resolveLocalUserId('@Bot:example.org', 'example.org')).toBe('@bot:example.org');
    expect(resolveLocalUserId('@bot:other.org', 'example.org')).toBeNull();
    expect(resolveLocalUserId('@:example.org', 'example.org')).toBeNull();
    expect(resolveLocalUserId('', 'example.org')).toBeNull();
    expect(resolveLocalUserId('@bot:example.org:8448', 'example.org:8448')).toBe('@bot:example.org:8448');
  });

  it('takes the localpart of a local user id only', () => {
    expect(localpartOf('@bot:example.org', 'example.org')).toBe('bot');
    expect(localpartOf('@bot:other.org', 'example.org')).toBeNull();
    expect(localpartOf('bot', 'example.org')).toBeNull();
    expect(localpartOf('@:example.org', 'example.org')).toBeNull();
  });
});
