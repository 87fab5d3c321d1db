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
import { Ajv } from 'ajv';
import { parse as parseYaml } from 'yaml';
import type { TestAccount, TestHomeserver } from './test-homeserver.js';

const Name = Type.String({ minLength: 1 });
const UserSpec = Type.Union([
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
]);
const RoomSpec = Type.Object(
  {
    owner: Name,
    name: Type.Optional(Type.String()),
    topic: Type.Optional(Type.String()),
    alias: Type.Optional(Type.String({ minLength: 1 })),
    preset: Type.Optional(Type.Union([Type.Literal('private_chat'), Type.Literal('public_chat'), Type.Literal('trusted_private_chat')])),
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

const validate = new Ajv({ allErrors: false, strict: false, allowUnionTypes: true, validateSchema: false }).compile<Fixtures>(FixturesSchema);

export class FixturesError extends Error {
  override name = 'FixturesError';
}

export function readFixtures(file: string): Fixtures {
  let parsed: unknown;
  try {
    parsed = parseYaml(readFileSync(file, 'utf8')) ?? {};
  } catch (err) {
    throw new FixturesError(`cannot read fixtures ${file}: ${(err as Error).message}`);
  }
  if (!validate(parsed)) {
    const error = validate.errors?.[0];
    const where = error?.instancePath.slice(1).replaceAll('/', '.') || '(top level)';
    if (error?.keyword === 'additionalProperties') {
      const key = (error.params as { additionalProperty: string }).additionalProperty;
      throw new FixturesError(`fixtures ${file}: ${where === '(top level)' ? '' : `${where}.`}${key}: unknown key`);
    }
    throw new FixturesError(`fixtures ${file}: ${where} ${error?.message ?? 'is invalid'}`);
  }
  return parsed;
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
