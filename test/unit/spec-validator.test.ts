import { describe, it, expect, beforeAll } from 'vitest';
import {
  expectMatchesSpec,
  expectMatrixError,
  expectValidResponse,
  listSpecResponseExamples,
  loadMatrixSpec,
  resolveOperations,
  validateEvent,
  validateMatrixError,
  validateResponse,
} from '../support/spec-validator.js';

const V3 = '/_matrix/client/v3';

beforeAll(() => {
  const { documents, operations } = loadMatrixSpec();
  expect(documents).toBeGreaterThan(72);
  expect(operations).toBeGreaterThan(150);
});

describe('validateResponse', () => {
  it('accepts a valid /versions body and rejects one without versions', () => {
    expect(validateResponse('GET', '/_matrix/client/versions', 200, { versions: ['v1.11'] })).toEqual([]);
    const errors = validateResponse('GET', '/_matrix/client/versions', 200, { unstable_features: {} });
    expect(errors.join('\n')).toMatch(/versions/);
  });

  it('accepts a valid login response and rejects user_id: 5', () => {
    const ok = { user_id: '@bot:example.org', access_token: 'syt_abc', device_id: 'DEV' };
    expect(validateResponse('POST', `${V3}/login`, 200, ok)).toEqual([]);
    const errors = validateResponse('POST', `${V3}/login`, 200, { ...ok, user_id: 5 });
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatch(/\/user_id must be string/);
  });

  it('checks Matrix identifier formats', () => {
    const bad = { user_id: 'bot', access_token: 'x', device_id: 'D' };
    expect(validateResponse('POST', `${V3}/login`, 200, bad).join('\n')).toMatch(/mx-user-id/);
  });

  it('validates declared error responses', () => {
    expect(validateResponse('POST', `${V3}/login`, 403, { errcode: 'M_FORBIDDEN', error: 'no' })).toEqual([]);
    expect(validateResponse('POST', `${V3}/login`, 403, { error: 'no' }).join('\n')).toMatch(/errcode/);
  });

  it('resolves r0 paths as v3 and ignores the query string', () => {
    expect(resolveOperations('GET', '/_matrix/client/r0/account/whoami?access_token=x')).toMatchObject([
      { file: 'whoami.yaml', template: `${V3}/account/whoami` },
    ]);
    expect(validateResponse('GET', '/_matrix/client/r0/account/whoami?access_token=x', 200, { user_id: '@a:h' })).toEqual(
      [],
    );
    expect(validateResponse('GET', `${V3}/account/whoami?access_token=x`, 200, {}).join('\n')).toMatch(/user_id/);
  });

  it('reports unknown paths, wrong methods and undeclared statuses', () => {
    expect(validateResponse('GET', `${V3}/logn`, 200, {})).toEqual([expect.stringMatching(/no operation/)]);
    expect(validateResponse('GET', `${V3}/login/`, 200, {})).toEqual([expect.stringMatching(/no operation/)]);
    expect(validateResponse('DELETE', `${V3}/login`, 200, {})).toEqual([expect.stringMatching(/allows GET, POST/)]);
    expect(validateResponse('GET', '/_matrix/client/versions', 418, {})).toEqual([
      expect.stringMatching(/no response for status 418/),
    ]);
    // A missing txnId must not be mistaken for an empty one.
    expect(validateResponse('PUT', `${V3}/rooms/!r:h/send/m.room.message`, 200, { event_id: '$e' })).toEqual([
      expect.stringMatching(/no operation|no PUT/),
    ]);
  });

  it('matches an empty state key to the state endpoint, percent-decoding the room id', () => {
    const ops = resolveOperations('GET', `${V3}/rooms/!a%3Ahost/state/m.room.power_levels/`);
    expect(ops).toMatchObject([{ file: 'rooms.yaml', template: `${V3}/rooms/{roomId}/state/{eventType}/{stateKey}` }]);
    expect(resolveOperations('PUT', `${V3}/rooms/!r:h/state/m.room.power_levels/`)).toMatchObject([
      { file: 'room_state.yaml' },
    ]);
    // ...also when the client drops the trailing slash.
    expect(resolveOperations('GET', `${V3}/rooms/!r:h/state/m.room.power_levels`)).toHaveLength(1);
    expect(validateResponse('PUT', `${V3}/rooms/!r:h/state/m.room.name/`, 200, { event_id: '$e' })).toEqual([]);
    expect(validateResponse('PUT', `${V3}/rooms/!r:h/state/m.room.name/`, 200, { event_id: 'e' })).not.toEqual([]);
  });

  it('handles the odd path keys of the spec', () => {
    expect(resolveOperations('GET', `${V3}/pushrules/`)).toMatchObject([{ template: `${V3}/pushrules/` }]);
    expect(resolveOperations('GET', `${V3}/pushrules/global/`)).toMatchObject([{ template: `${V3}/pushrules/global/` }]);
    // "/rooms/{roomId}/invite " (trailing space) is defined in two files.
    expect(resolveOperations('POST', `${V3}/rooms/!r:h/invite`).map((o) => o.file).sort()).toEqual([
      'inviting.yaml',
      'third_party_membership.yaml',
    ]);
    expect(validateResponse('POST', `${V3}/rooms/!r:h/invite`, 200, {})).toEqual([]);
    expect(resolveOperations('GET', '/.well-known/matrix/client')).toMatchObject([{ file: 'wellknown.yaml' }]);
    expect(resolveOperations('GET', '/_matrix/client/v1/rooms/!r:h/relations/$e')).toMatchObject([
      { file: 'relations.yaml' },
    ]);
    expect(resolveOperations('GET', '/_matrix/media/r0/config')).toMatchObject([{ file: 'content-repo.yaml' }]);
  });

  it('validates /.well-known/matrix/client', () => {
    const ok = { 'm.homeserver': { base_url: 'https://matrix.example.org' } };
    expect(validateResponse('GET', '/.well-known/matrix/client', 200, ok)).toEqual([]);
    expect(validateResponse('GET', '/.well-known/matrix/client', 200, {})).not.toEqual([]);
  });

  it('tolerates null display_name/avatar_url in joined_members (kept Synapse divergence)', () => {
    const body = { joined: { '@a:h': { display_name: null, avatar_url: null } } };
    expect(validateResponse('GET', `${V3}/rooms/!r:h/joined_members`, 200, body)).toEqual([]);
    const bad = { joined: { '@a:h': { display_name: 5 } } };
    expect(validateResponse('GET', `${V3}/rooms/!r:h/joined_members`, 200, bad)).not.toEqual([]);
  });
});

describe('expectMatchesSpec / expectValidResponse', () => {
  it('accepts supertest-like and plain responses', () => {
    expectMatchesSpec('GET', '/_matrix/client/versions', { status: 200, body: { versions: ['v1.11'] } });
    // supertest: parsed body + request with absolute URL
    expectValidResponse({
      status: 200,
      headers: { 'content-type': 'application/json; charset=utf-8' },
      body: { user_id: '@a:h' },
      request: { method: 'GET', url: 'http://127.0.0.1:4567/_matrix/client/v3/account/whoami' },
    });
  });

  it('accepts fastify inject-like responses (json() + raw.req)', () => {
    const payload = JSON.stringify({ versions: ['v1.11'] });
    const injected = {
      statusCode: 200,
      body: payload,
      headers: { 'content-type': 'application/json; charset=utf-8' },
      json: () => JSON.parse(payload) as unknown,
      raw: { req: { method: 'GET', url: '/_matrix/client/versions' } },
    };
    expectValidResponse(injected);
    expectMatchesSpec('GET', '/_matrix/client/versions', injected);
  });

  it('throws an error listing the problems', () => {
    expect(() => expectMatchesSpec('GET', '/_matrix/client/versions', { status: 200, body: {} })).toThrow(
      /does not match the Matrix spec:\n {2}- .*versions/,
    );
    expect(() =>
      expectMatchesSpec('GET', '/_matrix/client/versions', {
        status: 200,
        headers: { 'content-type': 'text/plain' },
        body: {},
      }),
    ).toThrow(/content-type/);
    expect(() => expectValidResponse({ status: 200, body: {} })).toThrow(/pass method and path/);
  });
});

describe('Matrix errors', () => {
  it('requires both errcode and error as strings', () => {
    expect(validateMatrixError({ errcode: 'M_FORBIDDEN', error: 'Forbidden' })).toEqual([]);
    expect(validateMatrixError({ errcode: 'M_FORBIDDEN' })).toEqual([expect.stringMatching(/error must be a string/)]);
    expect(validateMatrixError({ error: 'x' }).join('\n')).toMatch(/errcode/);
    expect(validateMatrixError({ errcode: 5, error: 'x' }).join('\n')).toMatch(/errcode must be/);
    expect(validateMatrixError('nope')).not.toEqual([]);
  });

  it('expectMatrixError checks status and errcode', () => {
    const res = { status: 401, body: { errcode: 'M_UNKNOWN_TOKEN', error: 'Unknown token' } };
    expectMatrixError(res, 401, 'M_UNKNOWN_TOKEN');
    expect(() => expectMatrixError(res, 403, 'M_UNKNOWN_TOKEN')).toThrow(/status is 401, expected 403/);
    expect(() => expectMatrixError(res, 401, 'M_FORBIDDEN')).toThrow(/errcode is "M_UNKNOWN_TOKEN"/);
    expect(() => expectMatrixError({ status: 401, body: { errcode: 'M_X' } }, 401, 'M_X')).toThrow(/error must be/);
  });
});

describe('validateEvent', () => {
  it('checks event content against the event schemas', () => {
    const event = {
      type: 'm.room.message',
      event_id: '$e',
      sender: '@a:h',
      origin_server_ts: 1,
      content: { msgtype: 'm.text', body: 'hi' },
    };
    expect(validateEvent(event, { roomId: '!r:h' })).toEqual([]);
    expect(validateEvent({ ...event, content: { msgtype: 'm.text' } }, { roomId: '!r:h' }).join('\n')).toMatch(/body/);
    expect(validateEvent({ ...event, type: 'org.example.custom' })).toEqual([
      expect.stringMatching(/no event schema/),
    ]);
  });
});

describe('spec examples', () => {
  it('validates every response example in the spec against its own operation', () => {
    const examples = listSpecResponseExamples();
    expect(examples.length).toBeGreaterThan(200);
    const failures: string[] = [];
    for (const ex of examples) {
      const { method, template } = ex.operation;
      // Each example's route must resolve back to its own operation...
      expect(resolveOperations(method, ex.path).map((o) => o.template)).toContain(template);
      // ...and its body must validate.
      const errors = validateResponse(method, ex.path, Number(ex.status), ex.value);
      if (errors.length) failures.push(`${ex.operation.file} ${method} ${template} ${ex.status}: ${errors.join('; ')}`);
    }
    expect(failures).toEqual([]);
  });

  it('catches the known spec bug via validateEvent (m.tag order given as a string)', () => {
    // The API schema types account_data content only as `object`; the event schema is stricter.
    const ex = listSpecResponseExamples().find(
      (e) => e.operation.file === 'room_initial_sync.yaml' && e.status === '200',
    );
    const accountData = (ex?.value as { account_data?: unknown[] } | undefined)?.account_data ?? [];
    const tag = accountData.find((e) => (e as { type?: unknown }).type === 'm.tag');
    expect(tag).toBeDefined();
    expect(validateEvent(tag).join('\n')).toMatch(/order must be number/);
  });
});
