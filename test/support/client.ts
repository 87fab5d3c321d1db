/**
 * A small Matrix client for tests, speaking HTTP to an in-process homeserver. Every answer it gets
 * is checked against the Matrix spec (success bodies against the endpoint's schema, errors against
 * the error schema), so a shape error fails whichever test meets it first.
 */
import { expect } from 'vitest';
import { createUser, type TestHomeserver, type TestUser } from './homeserver.js';
import { validateMatrixError, validateResponse } from './spec-validator.js';

export type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

export interface Answer {
  status: number;
  body: Json;
  headers: Record<string, string>;
}

let txnCounter = 0;

export class TestClient {
  constructor(
    readonly hs: TestHomeserver,
    readonly user: TestUser,
    readonly prefix = '/_matrix/client/v3',
  ) {}

  get userId(): string {
    return this.user.userId;
  }

  async request(method: 'GET' | 'PUT' | 'POST' | 'DELETE', path: string, body?: unknown, query?: Record<string, string | number | boolean>): Promise<Answer> {
    const url = this.prefix + path;
    let req = this.hs.http[method.toLowerCase() as 'get'](url).auth(this.user.accessToken, { type: 'bearer' });
    if (query) req = req.query(query);
    if (body !== undefined) req = req.send(body as object);
    const res = await req;
    const answer = { status: res.status, body: res.body as Json, headers: res.headers as Record<string, string> };
    // The spec knows these paths under v3 only; r0 answers the same.
    const specPath = '/_matrix/client/v3' + path;
    const problems = res.status >= 400 ? validateMatrixError(res.body) : validateResponse(method, specPath, res.status, res.body);
    if (problems.length > 0) throw new Error(`${method} ${url} → ${res.status} breaks the spec:\n  ${problems.join('\n  ')}\n${JSON.stringify(res.body).slice(0, 1500)}`);
    if (res.status < 400) expect(res.body).not.toHaveProperty('errcode');
    return answer;
  }

  /** Like request, but the answer must be 200. */
  async ok(method: 'GET' | 'PUT' | 'POST' | 'DELETE', path: string, body?: unknown, query?: Record<string, string | number | boolean>): Promise<Json> {
    const answer = await this.request(method, path, body, query);
    if (answer.status !== 200) throw new Error(`${method} ${path} → ${answer.status} ${JSON.stringify(answer.body)}`);
    return answer.body;
  }

  async createRoom(body: Json = {}): Promise<string> {
    return (await this.ok('POST', '/createRoom', body)).room_id as string;
  }

  async join(roomIdOrAlias: string): Promise<string> {
    return (await this.ok('POST', `/join/${encodeURIComponent(roomIdOrAlias)}`, {})).room_id as string;
  }

  async invite(roomId: string, userId: string): Promise<void> {
    await this.ok('POST', `/rooms/${encodeURIComponent(roomId)}/invite`, { user_id: userId });
  }

  async send(roomId: string, content: Json = { msgtype: 'm.text', body: 'hello' }, type = 'm.room.message', txnId = `t${++txnCounter}`): Promise<string> {
    return (await this.ok('PUT', `/rooms/${encodeURIComponent(roomId)}/send/${encodeURIComponent(type)}/${txnId}`, content)).event_id as string;
  }

  async setState(roomId: string, type: string, stateKey: string, content: Json): Promise<string> {
    const path = `/rooms/${encodeURIComponent(roomId)}/state/${encodeURIComponent(type)}/${encodeURIComponent(stateKey)}`;
    return (await this.ok('PUT', path, content)).event_id as string;
  }

  async sync(query: Record<string, string | number | boolean> = {}): Promise<Json> {
    return this.ok('GET', '/sync', undefined, query);
  }

  /** This client's own position for `syncUntil`, and every timeline event it has seen there. */
  private followSince: string | undefined;
  private readonly followed: Json[] = [];
  /** Invites seen through syncUntil, by room: their `invite_state` events. */
  readonly invites = new Map<string, Json[]>();

  /**
   * Long-polls /sync (continuing from the previous call) until `check` finds what it wants in an
   * answer; fails after `timeoutMs` of waiting in real time.
   */
  async syncUntil<T>(check: (sync: Json) => T | undefined, timeoutMs = 10_000): Promise<T> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const query: Record<string, string | number> = { timeout: Math.max(0, Math.min(2_000, deadline - Date.now())) };
      if (this.followSince) query.since = this.followSince;
      const answer = await this.sync(query);
      this.followSince = answer.next_batch as string;
      for (const [roomId, room] of Object.entries((answer.rooms?.invite ?? {}) as Record<string, Json>)) {
        this.invites.set(roomId, (room.invite_state?.events as Json[] | undefined) ?? []);
      }
      for (const [roomId, room] of Object.entries((answer.rooms?.join ?? {}) as Record<string, Json>)) {
        for (const event of (room.timeline?.events as Json[] | undefined) ?? []) this.followed.push({ room_id: roomId, ...event });
      }
      const found = check(answer);
      if (found !== undefined) return found;
      if (Date.now() >= deadline) throw new Error(`${this.userId}: nothing matched within ${timeoutMs} ms`);
    }
  }

  /** The first timeline event (seen before or arriving now) in `roomId` that matches. */
  async waitForEvent(roomId: string, predicate: (event: Json) => boolean, timeoutMs = 10_000): Promise<Json> {
    const match = (event: Json) => event.room_id === roomId && predicate(event);
    const earlier = this.followed.find(match);
    if (earlier) return earlier;
    return this.syncUntil(() => this.followed.find(match), timeoutMs);
  }

  /** The invite to `roomId` (its invite_state events), seen before or arriving now. */
  async waitForInvite(roomId: string, timeoutMs = 10_000): Promise<Json[]> {
    return this.invites.get(roomId) ?? this.syncUntil(() => this.invites.get(roomId), timeoutMs);
  }

  /** Every timeline event of `roomId` this client has seen through syncUntil/waitForEvent. */
  seenIn(roomId: string): Json[] {
    return this.followed.filter((event) => event.room_id === roomId);
  }
}

export function client(hs: TestHomeserver, user: TestUser, prefix?: string): TestClient {
  return new TestClient(hs, user, prefix);
}

/** Timeline events of one room in a sync answer (empty when the room is not there). */
export function timelineOf(sync: Json, roomId: string): Json[] {
  return (sync.rooms?.join?.[roomId]?.timeline?.events as Json[] | undefined) ?? [];
}

/** Creates and logs in one user per name, each with a client: `[alice, bob] = await clientsFor(hs, 'alice', 'bob')`. */
export async function clientsFor<const Names extends readonly string[]>(hs: TestHomeserver, ...names: Names): Promise<{ [K in keyof Names]: TestClient }> {
  const clients: TestClient[] = [];
  for (const name of names) clients.push(client(hs, await createUser(hs, name)));
  return clients as { [K in keyof Names]: TestClient };
}
