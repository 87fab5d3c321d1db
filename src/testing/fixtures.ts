/**
 * Fixtures for `bot-homeserver dev`: users, bots and rooms described in YAML, created on a test
 * homeserver, and reported as one JSON object so a test in any language can use them.
 *
 *   users: [alice, {name: bob, password: secret, admin: true, display_name: Bob}]
 *   bots: [echo]
 *   rooms:
 *     lobby: {owner: alice, name: Lobby, alias: lobby, preset: public_chat, members: [echo], invite: [bob]}
 */
import { readFileSync } from 'node:fs';
import { Type, type Static } from '@sinclair/typebox';
import { Ajv, type ErrorObject } from 'ajv';
import { nearest } from '../core/edit-distance.js';
import { parse as parseYaml } from 'yaml';
import type { TestAccount, TestHomeserver } from './test-homeserver.js';

/** Annotation of a union: what its value must be, in words (its branches' errors would not say it plainly). */
const EXPECTED = 'x-expected';
const Name = Type.String({ minLength: 1 });
const UserSpec = Type.Union(
  [
    Name,
    Type.Object(
      {
        name: Name,
        password: Type.Optional(Type.String({ minLength: 1 })),
        admin: Type.Optional(Type.Boolean()),
        display_name: Type.Optional(Type.String()),
      },
      { additionalProperties: false },
    ),
  ],
  { [EXPECTED]: 'a name, or a mapping with name and optionally password, admin, display_name' },
);
const RoomSpec = Type.Object(
  {
    owner: Name,
    name: Type.Optional(Type.String()),
    topic: Type.Optional(Type.String()),
    alias: Type.Optional(Type.String({ minLength: 1 })),
    preset: Type.Optional(
      Type.Union([Type.Literal('private_chat'), Type.Literal('public_chat'), Type.Literal('trusted_private_chat')], {
        [EXPECTED]: 'one of private_chat, public_chat, trusted_private_chat',
      }),
    ),
    is_direct: Type.Optional(Type.Boolean()),
    /** Invited and joined. */
    members: Type.Optional(Type.Array(Name)),
    /** Invited only. */
    invite: Type.Optional(Type.Array(Name)),
  },
  { additionalProperties: false },
);
export const FixturesSchema = Type.Object(
  {
    users: Type.Optional(Type.Array(UserSpec)),
    bots: Type.Optional(Type.Array(Name)),
    rooms: Type.Optional(Type.Record(Type.String(), RoomSpec)),
  },
  { additionalProperties: false },
);
export type Fixtures = Static<typeof FixturesSchema>;

export interface AccountOutput {
  user_id: string;
  password: string;
  access_token: string;
  device_id: string;
}

export interface FixturesOutput {
  base_url: string;
  server_name: string;
  users: Record<string, AccountOutput>;
  bots: Record<string, AccountOutput>;
  rooms: Record<string, { room_id: string; alias?: string }>;
}

// allErrors: every problem of the file is reported at once, as config errors are.
const validate = new Ajv({ allErrors: true, verbose: true, strict: false, allowUnionTypes: true, validateSchema: false }).compile<Fixtures>(FixturesSchema);

export class FixturesError extends Error {
  override name = 'FixturesError';
}

/**
 * Reads and checks a fixtures file. Every problem is reported at once, one line each with the
 * key it is about and a "did you mean" for a mistyped key or name, before anything is created.
 */
export function readFixtures(file: string): Fixtures {
  let parsed: unknown;
  try {
    parsed = parseYaml(readFileSync(file, 'utf8')) ?? {};
  } catch (err) {
    throw new FixturesError(`cannot read fixtures ${file}: ${(err as Error).message}`);
  }
  const problems = validate(parsed) ? [] : schemaProblems(validate.errors ?? [], parsed);
  problems.push(...nameProblems(parsed));
  if (problems.length > 0) throw new FixturesError(`invalid fixtures in ${file}:\n${problems.map((line) => `  ${line}`).join('\n')}`);
  return parsed as Fixtures;
}

function schemaProblems(errors: ErrorObject[], data: unknown): string[] {
  const lines = new Map<string, string>();
  // A union (a user as a name or as a mapping) fails with an error per branch. When the value has
  // one branch's shape (its errors are about what is inside), those errors are what to say;
  // otherwise the union's own words.
  const unions = errors.filter((e) => e.keyword === 'anyOf');
  const inUnion = (e: ErrorObject, union: ErrorObject) =>
    e.schemaPath.startsWith(`${union.schemaPath}/`) && (e.instancePath === union.instancePath || e.instancePath.startsWith(`${union.instancePath}/`));
  const shaped = (union: ErrorObject) =>
    errors.some((e) => inUnion(e, union) && (e.instancePath !== union.instancePath || e.keyword === 'additionalProperties' || e.keyword === 'required'));
  for (const union of unions) {
    if (shaped(union)) continue;
    const expected = (union.parentSchema as Record<string, unknown> | undefined)?.[EXPECTED];
    lines.set(keyOf(union.instancePath, data), `${shown(union.data)} is not ${typeof expected === 'string' ? expected : 'valid here'}`);
  }
  for (const error of errors) {
    if (error.keyword === 'anyOf') continue;
    const union = unions.find((u) => inUnion(error, u));
    if (union && (!shaped(union) || (error.instancePath === union.instancePath && error.keyword === 'type'))) continue;
    const key = keyOf(error.instancePath, data);
    const params = error.params as Record<string, unknown>;
    switch (error.keyword) {
      case 'additionalProperties': {
        const name = String(params['additionalProperty']);
        const known = Object.keys((error.parentSchema as { properties?: Record<string, unknown> } | undefined)?.properties ?? {});
        const suggestion = nearest(name, known);
        lines.set(join(key, name), `unknown key; ${suggestion ? `did you mean ${suggestion}?` : `known keys: ${known.join(', ')}`}`);
        break;
      }
      case 'required':
        lines.set(join(key, String(params['missingProperty'])), 'is missing');
        break;
      case 'type':
        lines.set(key, `${shown(error.data)} is not ${TYPE_WORDS[String(params['type'])] ?? String(params['type'])}`);
        break;
      case 'minLength':
        lines.set(key, 'must not be empty');
        break;
      default:
        lines.set(key, `${shown(error.data)} is not valid here (${error.message ?? 'invalid'})`);
    }
  }
  return [...lines].map(([key, text]) => `${key || '(top level)'}: ${text}`);
}

/** Names used twice, and rooms naming someone who is in neither users nor bots. */
function nameProblems(data: unknown): string[] {
  if (!isMapping(data)) return [];
  const problems: string[] = [];
  const listed = new Map<string, string>();
  const list = (section: 'users' | 'bots') => (Array.isArray(data[section]) ? (data[section] as unknown[]) : []);
  for (const section of ['users', 'bots'] as const) {
    for (const [index, spec] of list(section).entries()) {
      const name = typeof spec === 'string' ? spec : isMapping(spec) && typeof spec['name'] === 'string' ? spec['name'] : undefined;
      if (name === undefined || name === '') continue;
      const first = listed.get(name);
      if (first !== undefined) problems.push(`${section}[${index}]: ${name} is already listed as ${first}`);
      else listed.set(name, `${section}[${index}]`);
    }
  }
  const rooms = isMapping(data['rooms']) ? data['rooms'] : {};
  for (const [key, room] of Object.entries(rooms)) {
    if (!isMapping(room)) continue;
    const named = (field: string, name: unknown) => {
      if (typeof name !== 'string' || name === '' || listed.has(name)) return;
      const suggestion = nearest(name, listed.keys());
      problems.push(`rooms.${key}.${field} names ${name}, which is not in users or bots${suggestion ? `; did you mean ${suggestion}?` : ''}`);
    };
    named('owner', room['owner']);
    for (const field of ['members', 'invite']) {
      const names = room[field];
      if (Array.isArray(names)) for (const name of names) named(field, name);
    }
  }
  return problems;
}

const TYPE_WORDS: Record<string, string> = {
  string: 'text',
  boolean: 'true or false',
  array: 'a list',
  object: 'a mapping of keys',
};

/** `/rooms/lobby/members/0` as `rooms.lobby.members[0]`: indexes where the value is a list. */
function keyOf(pointer: string, data: unknown): string {
  let key = '';
  let value = data;
  for (const raw of pointer.split('/').slice(1)) {
    const segment = raw.replaceAll('~1', '/').replaceAll('~0', '~');
    key = Array.isArray(value) ? `${key}[${segment}]` : join(key, segment);
    value = Array.isArray(value) ? value[Number(segment)] : isMapping(value) ? value[segment] : undefined;
  }
  return key;
}

function join(parent: string, child: string): string {
  return parent ? `${parent}.${child}` : child;
}

function shown(value: unknown): string {
  const text = JSON.stringify(value) ?? String(value);
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}

function isMapping(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Creating one fixture entry; a refusal names the entry it came from. */
async function entry<T>(where: string, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    throw new FixturesError(`fixtures: ${where}: ${err instanceof Error ? err.message : String(err)}`);
  }
}

/** Creates what the fixtures describe; users and bots first, then rooms in file order. */
export async function applyFixtures(hs: TestHomeserver, fixtures: Fixtures): Promise<FixturesOutput> {
  const accounts = new Map<string, TestAccount>();
  const output: FixturesOutput = { base_url: hs.baseUrl, server_name: hs.serverName, users: {}, bots: {}, rooms: {} };
  const describe = (a: TestAccount): AccountOutput => ({ user_id: a.userId, password: a.password, access_token: a.accessToken, device_id: a.deviceId });

  for (const [index, spec] of (fixtures.users ?? []).entries()) {
    const user = typeof spec === 'string' ? { name: spec } : spec;
    const account = await entry(`users[${index}] (${user.name})`, () =>
      hs.createUser(user.name, {
        ...(user.password !== undefined ? { password: user.password } : {}),
        ...(user.admin !== undefined ? { admin: user.admin } : {}),
        ...(user.display_name !== undefined ? { displayName: user.display_name } : {}),
      }),
    );
    accounts.set(user.name, account);
    output.users[user.name] = describe(account);
  }
  for (const [index, name] of (fixtures.bots ?? []).entries()) {
    const bot = await entry(`bots[${index}] (${name})`, () => hs.createBot(name));
    accounts.set(name, bot);
    output.bots[name] = describe(bot);
  }
  const account = (name: string, where: string): TestAccount => {
    const found = accounts.get(name);
    if (!found) throw new FixturesError(`fixtures: ${where} names ${name}, which is not in users or bots`);
    return found;
  };
  for (const [key, room] of Object.entries(fixtures.rooms ?? {})) {
    const owner = account(room.owner, `rooms.${key}.owner`);
    const members = (room.members ?? []).map((name) => account(name, `rooms.${key}.members`));
    const invite = (room.invite ?? []).map((name) => account(name, `rooms.${key}.invite`));
    const roomId = await entry(`rooms.${key}`, () =>
      hs.createRoom(owner, {
        ...(room.name !== undefined ? { name: room.name } : {}),
        ...(room.topic !== undefined ? { topic: room.topic } : {}),
        ...(room.alias !== undefined ? { alias: room.alias } : {}),
        ...(room.preset !== undefined ? { preset: room.preset } : {}),
        ...(room.is_direct !== undefined ? { isDirect: room.is_direct } : {}),
        members,
        invite,
      }),
    );
    output.rooms[key] = { room_id: roomId, ...(room.alias !== undefined ? { alias: `#${room.alias}:${hs.serverName}` } : {}) };
  }
  return output;
}
