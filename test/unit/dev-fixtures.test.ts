// The fixtures file of `bot-homeserver dev`: every problem at once, each naming its key, with a
// "did you mean" for a mistyped key or name, as config errors do.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { FixturesError, readFixtures } from '../../src/testing/fixtures.js';

const dir = mkdtempSync(join(tmpdir(), 'bhs-fixtures-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let files = 0;

function problems(text: string): string[] {
  const file = join(dir, `fixtures-${++files}.yaml`);
  writeFileSync(file, text);
  try {
    readFixtures(file);
  } catch (err) {
    expect(err).toBeInstanceOf(FixturesError);
    const [first, ...lines] = (err as Error).message.split('\n');
    expect(first).toBe(`invalid fixtures in ${file}:`);
    return lines.map((line) => line.trim());
  }
  throw new Error('the fixtures were accepted');
}

describe('dev fixtures', () => {
  it('reports every problem at once, with the key and a near name', () => {
    const lines = problems(
      [
        'users:',
        '  - alice',
        '  - {name: bob, pasword: x}',
        '  - {password: y}',
        '  - 12',
        '  - alice',
        'bots: [echo]',
        'romos: {}',
        'rooms:',
        '  lobby: {owner: alcie, colour: red, preset: public, members: [echo, ecko, zzzzzzzzzz], invite: bob}',
        '',
      ].join('\n'),
    );
    expect(lines.sort()).toEqual(
      [
        'romos: unknown key; did you mean rooms?',
        'users[1].pasword: unknown key; did you mean password?',
        'users[2].name: is missing',
        'users[3]: 12 is not a name, or a mapping with name and optionally password, admin, display_name',
        'users[4]: alice is already listed as users[0]',
        'rooms.lobby.colour: unknown key; known keys: owner, name, topic, alias, preset, is_direct, members, invite',
        'rooms.lobby.preset: "public" is not one of private_chat, public_chat, trusted_private_chat',
        'rooms.lobby.invite: "bob" is not a list',
        'rooms.lobby.owner names alcie, which is not in users or bots; did you mean alice?',
        'rooms.lobby.members names ecko, which is not in users or bots; did you mean echo?',
        'rooms.lobby.members names zzzzzzzzzz, which is not in users or bots',
      ].sort(),
    );
  });

  it('names a bot listed again, and a file that is not a mapping', () => {
    expect(problems('users: [a]\nbots: [b, a]\n')).toEqual(['bots[1]: a is already listed as users[0]']);
    expect(problems('- a\n- b\n')).toEqual(['(top level): ["a","b"] is not a mapping of keys']);
  });

  it('accepts what the docs show', () => {
    const file = join(dir, 'good.yaml');
    writeFileSync(file, 'users: [alice, {name: bob, password: hunter2}]\nbots: [echo]\nrooms:\n  lobby: {owner: alice, members: [echo], invite: [bob]}\n');
    expect(readFixtures(file)).toEqual({
      users: ['alice', { name: 'bob', password: 'hunter2' }],
      bots: ['echo'],
      rooms: { lobby: { owner: 'alice', members: ['echo'], invite: ['bob'] } },
    });
  });
});
