/**
 * Our users in rooms of other servers (the client side of joins, leaves and invites):
 * - join: make_join on a resident server, fill in and sign the template, send_join v2, check
 *   everything returned (signatures, hashes, the auth chain, the join itself) and store the room
 *   with a page of its history;
 * - leave a room we are not in (reject an invite): make_leave, sign, send_leave v2;
 * - invite a user of another server: their server countersigns the invite (invite v2) first.
 */
import { canonicalJsonProblem } from '../core/canonical-json.js';
import type { Clock } from '../core/clock.js';
import { MAX_JSON_DEPTH } from '../core/json.js';
import { ERRCODE_STATUS, MatrixError, type Errcode } from '../core/errors.js';
import type { Signer } from '../core/signed-json.js';
import { domainOf } from '../rooms/auth-rules.js';
import type { JsonObject } from '../rooms/events.js';
import { BARE_REFERENCES, eventIdOf, finishPdu, nextDepth, pduFromWire, referencesProblem, signedForm, V1_REFERENCE_HASHES, wirePdu, type Pdu, type UnsignedPdu } from '../rooms/pdu.js';
import { JoinRefused, type RemoteEvents, type VerifiedPdu } from '../rooms/remote-events.js';
import type { PublicRoomsQuery, RemoteRooms } from '../rooms/remote-rooms.js';
import type { RoomCache } from '../rooms/room-cache.js';
import { roomVersion, SUPPORTED_ROOM_VERSIONS, type RoomVersion } from '../rooms/room-versions.js';
import type { Storage } from '../storage/index.js';
import type { Notifier } from '../sync/notifier.js';
import { writeAtNextPosition, type StreamCounter } from '../sync/stream.js';
import { FederationError, type FederationClient } from './http-client.js';
import type { KeyRing } from './key-ring.js';
import { checkPdu } from './pdu-checks.js';
import { FederatedEventSource, verifyPdus } from './remote-source.js';

/** Events of history fetched with a join: the page a client shows first. */
const JOIN_HISTORY_LIMIT = 20;
/** A send_join of a big room carries its whole state and auth chain: it may take a while. */
const SEND_JOIN_TIMEOUT_MS = 300_000;

export interface MembershipDeps {
  signer: Signer;
  client: FederationClient;
  keyRing: KeyRing;
  remote: RemoteEvents;
  storage: Storage;
  cache: RoomCache;
  stream: StreamCounter;
  notifier: Notifier;
  clock: Clock;
}

export class FederatedMembership implements RemoteRooms {
  constructor(private readonly deps: MembershipDeps) {}

  async join(userId: string, roomId: string, servers: readonly string[], content: JsonObject): Promise<void> {
    let lastError: unknown;
    for (const server of this.candidates(servers)) {
      try {
        await this.joinVia(server, userId, roomId, servers, content);
        await this.deps.storage.federation.deleteRemoteMembership(roomId, userId);
        return;
      } catch (err) {
        lastError = err;
        // A server that knows the room and refuses is as good as final (unless another may grant it).
      }
    }
    throw toClientError(lastError, `Could not join ${roomId} through ${servers.join(', ') || 'any server'}`);
  }

  private async joinVia(server: string, userId: string, roomId: string, servers: readonly string[], content: JsonObject): Promise<void> {
    const { client, keyRing } = this.deps;
    const versions = SUPPORTED_ROOM_VERSIONS.map((id) => `ver=${encodeURIComponent(id)}`).join('&');
    const made = await client.request<{ event?: unknown; room_version?: unknown }>(server, {
      method: 'GET',
      path: `/_matrix/federation/v1/make_join/${encodeURIComponent(roomId)}/${encodeURIComponent(userId)}?${versions}`,
    });
    const version = versionOf(made.room_version);
    const template = templateOf(made.event, roomId, userId, version);
    const via = template.content.join_authorised_via_users_server;
    const { pdu, eventId } = this.sign(template, version, { ...content, membership: 'join', ...(typeof via === 'string' ? { join_authorised_via_users_server: via } : {}) });
    const answer = await this.sendMembershipEvent<{ state?: unknown; auth_chain?: unknown; event?: unknown }>(server, 'send_join', roomId, eventId, wirePdu(pdu, version), SEND_JOIN_TIMEOUT_MS);
    if (!Array.isArray(answer.state) || !Array.isArray(answer.auth_chain)) throw new JoinRefused(`${server} answered send_join without state`);
    // A restricted join comes back countersigned by the server that vouched for it.
    let join: VerifiedPdu = { eventId, pdu, signers: new Set([this.deps.signer.serverName]) };
    if (answer.event !== undefined) {
      const checked = await checkPdu(answer.event, version, roomId, keyRing);
      if ('verified' in checked && checked.verified.eventId === eventId) join = checked.verified;
    }
    const [state, authChain, history] = await Promise.all([
      verifyPdus(answer.state, version, roomId, keyRing),
      verifyPdus(answer.auth_chain, version, roomId, keyRing),
      this.history(server, roomId, version, pdu.prev_events),
    ]);
    const source = new FederatedEventSource(client, keyRing, version, [server, ...servers.filter((other) => other !== server)]);
    await this.deps.remote.joinRoom({ roomId, version, join, state, authChain, history }, source);
  }

  /** A page of the room's history before the join (best effort: the join stands without it). */
  private async history(server: string, roomId: string, version: RoomVersion, from: readonly string[]): Promise<VerifiedPdu[]> {
    if (from.length === 0) return [];
    try {
      const query = [...from.map((id) => `v=${encodeURIComponent(id)}`), `limit=${JOIN_HISTORY_LIMIT}`].join('&');
      const answer = await this.deps.client.request<{ pdus?: unknown }>(server, { method: 'GET', path: `/_matrix/federation/v1/backfill/${encodeURIComponent(roomId)}?${query}` });
      return Array.isArray(answer.pdus) ? verifyPdus(answer.pdus.slice(0, JOIN_HISTORY_LIMIT), version, roomId, this.deps.keyRing) : [];
    } catch {
      return [];
    }
  }

  async knock(userId: string, roomId: string, servers: readonly string[], content: JsonObject): Promise<void> {
    let lastError: unknown;
    for (const server of this.candidates(servers)) {
      try {
        const versions = SUPPORTED_ROOM_VERSIONS.map((id) => `ver=${encodeURIComponent(id)}`).join('&');
        const made = await this.deps.client.request<{ event?: unknown; room_version?: unknown }>(server, {
          method: 'GET',
          path: `/_matrix/federation/v1/make_knock/${encodeURIComponent(roomId)}/${encodeURIComponent(userId)}?${versions}`,
        });
        const version = versionOf(made.room_version);
        const signed = this.sign(templateOf(made.event, roomId, userId, version), version, { ...content, membership: 'knock' });
        const answer = await this.deps.client.request<{ knock_room_state?: unknown; knock_state_events?: unknown }>(server, {
          method: 'PUT',
          path: `/_matrix/federation/v1/send_knock/${encodeURIComponent(roomId)}/${encodeURIComponent(signed.eventId)}`,
          body: wirePdu(signed.pdu, version),
        });
        const stripped = strippedList(answer.knock_room_state ?? answer.knock_state_events);
        await this.recordOutOfRoom(roomId, userId, 'knock', signed.eventId, version, JSON.stringify(stripped), signed.pdu);
        return;
      } catch (err) {
        lastError = err;
      }
    }
    throw toClientError(lastError, `Could not knock on ${roomId} through ${servers.join(', ') || 'any server'}`);
  }

  async leave(userId: string, roomId: string, servers: readonly string[], reason: string | undefined): Promise<void> {
    const kept = await this.deps.storage.federation.remoteMembership(roomId, userId);
    const content: JsonObject = { membership: 'leave', ...(reason !== undefined ? { reason } : {}) };
    let leave: { pdu: Pdu; eventId: string; version: RoomVersion } | undefined;
    for (const server of this.candidates(servers)) {
      try {
        const made = await this.deps.client.request<{ event?: unknown; room_version?: unknown }>(server, {
          method: 'GET',
          path: `/_matrix/federation/v1/make_leave/${encodeURIComponent(roomId)}/${encodeURIComponent(userId)}`,
        });
        const version = versionOf(made.room_version);
        const signed = this.sign(templateOf(made.event, roomId, userId, version), version, content);
        await this.sendMembershipEvent(server, 'send_leave', roomId, signed.eventId, wirePdu(signed.pdu, version));
        leave = { ...signed, version };
        break;
      } catch {
        // The next server; failing all, the invite is rejected here only (as Synapse does).
      }
    }
    if (!leave) {
      const version = roomVersion(kept?.room_version ?? '') ?? roomVersion('10')!;
      const invite = kept ? (JSON.parse(kept.pdu) as Pdu) : undefined;
      const draft: UnsignedPdu = {
        room_id: roomId,
        sender: userId,
        type: 'm.room.member',
        state_key: userId,
        content,
        origin_server_ts: this.deps.clock.now(),
        depth: nextDepth(invite?.depth ?? 0),
        prev_events: kept ? [kept.event_id] : [],
        auth_events: kept ? [kept.event_id] : [],
      };
      leave = { ...finishPdu(draft, version, this.deps.signer), version };
    }
    await this.recordOutOfRoom(roomId, userId, 'leave', leave.eventId, leave.version, kept?.stripped_state ?? '[]', leave.pdu);
  }

  /** A membership in a room this server is not in: kept with its event, shown to the user by sync. */
  async recordOutOfRoom(roomId: string, userId: string, membership: string, eventId: string, version: RoomVersion, strippedState: string, pdu: Pdu): Promise<void> {
    const position = await writeAtNextPosition(this.deps.storage, this.deps.stream, async (stores, position, effects) => {
      effects.users.add(userId);
      await stores.federation.putRemoteMembership({
        room_id: roomId,
        user_id: userId,
        membership,
        event_id: eventId,
        room_version: version.id,
        stripped_state: strippedState,
        pdu: JSON.stringify(pdu),
        updated_ts: this.deps.clock.now(),
      });
      await stores.rooms.setMembership({ room_id: roomId, user_id: userId, membership, event_id: eventId, stream_ordering: position });
    });
    this.deps.cache.setUserRoom(userId, roomId, { membership, stream: position, forgotten: false });
    this.deps.notifier.notify([userId]);
  }

  async countersignInvite(roomId: string, version: RoomVersion, invite: { pdu: Pdu; eventId: string }, strippedState: JsonObject[]): Promise<Pdu> {
    const invitee = invite.pdu.state_key ?? '';
    const server = domainOf(invitee);
    let answer: { event?: unknown };
    const path = (api: string) => `/_matrix/federation/${api}/invite/${encodeURIComponent(roomId)}/${encodeURIComponent(invite.eventId)}`;
    const event = wirePdu(invite.pdu, version);
    try {
      try {
        answer = await this.deps.client.request<{ event?: unknown }>(server, { method: 'PUT', path: path('v2'), body: { room_version: version.id, event, invite_room_state: strippedState } });
      } catch (err) {
        // A server without /v2/invite (Synapse before 1.0 and SyTest's fake server) takes v1, for
        // rooms of versions 1 and 2 only, which are all it can know: the event with the stripped
        // state in its unsigned, and an answer wrapped in [200, ...].
        if (!isUnknownEndpoint(err) || version.eventFormat !== 'v1') throw err;
        const unsigned = { ...((event.unsigned as JsonObject | undefined) ?? {}), invite_room_state: strippedState };
        answer = unwrapV1(await this.deps.client.request<unknown>(server, { method: 'PUT', path: path('v1'), body: { ...event, unsigned } })) as { event?: unknown };
      }
    } catch (err) {
      throw toClientError(err, `${server} refused the invite`);
    }
    const signed = answer.event;
    if (typeof signed !== 'object' || signed === null || Array.isArray(signed)) throw new MatrixError('M_UNKNOWN', `${server} answered the invite without the event`, { status: 502 });
    const answered = signed as Pdu;
    // What is not JSON of the room version (floats, integers out of range from v6) is a bad answer
    // to a bad request of ours: 400 M_BAD_JSON for the inviter, as Synapse answers, not a 502.
    const jsonProblem = canonicalJsonProblem(version.strictCanonicalJson ? answered : {}, MAX_JSON_DEPTH + 2);
    if (jsonProblem) throw new MatrixError('M_BAD_JSON', `${server} answered the invite with JSON room version ${version.id} does not allow: ${jsonProblem}`);
    // The same event, with a valid signature of theirs. From v3 an equal id is the same event (the id
    // is its reference hash); a v1/v2 id is ours, chosen, and says nothing of the rest. Either way
    // what is kept is our own event with their signature, which must verify on it.
    let sameEvent = false;
    try {
      sameEvent = eventIdOf(answered, version) === invite.eventId;
    } catch {
      sameEvent = false;
    }
    const theirs = typeof answered.signatures === 'object' && answered.signatures !== null ? answered.signatures[server] : undefined;
    if (!sameEvent || !theirs) throw new MatrixError('M_UNKNOWN', `${server} changed the invite or did not sign it`, { status: 502 });
    const combined: Pdu = { ...invite.pdu, signatures: { ...invite.pdu.signatures, [server]: theirs } };
    if (!(await this.deps.keyRing.isSignedBy(signedForm(combined, version), server, version.enforceKeyValidity ? combined.origin_server_ts : 0, !version.strictCanonicalJson))) {
      throw new MatrixError('M_UNKNOWN', `${server}'s signature on the invite does not verify`, { status: 502 });
    }
    return combined;
  }

  async resolveAlias(alias: string): Promise<{ roomId: string; servers: string[] }> {
    const server = domainOf(alias);
    let answer: { room_id?: unknown; servers?: unknown };
    try {
      answer = await this.deps.client.request(server, { method: 'GET', path: `/_matrix/federation/v1/query/directory?room_alias=${encodeURIComponent(alias)}` });
    } catch (err) {
      if (err instanceof FederationError && err.status === 404) throw new MatrixError('M_NOT_FOUND', `Room alias ${alias} not found`);
      throw toClientError(err, `Could not ask ${server} about ${alias}`);
    }
    if (typeof answer.room_id !== 'string') throw new MatrixError('M_NOT_FOUND', `Room alias ${alias} not found`);
    const servers = Array.isArray(answer.servers) ? answer.servers.filter((s): s is string => typeof s === 'string').slice(0, 50) : [];
    return { roomId: answer.room_id, servers: servers.length > 0 ? servers : [server] };
  }

  async publicRooms(server: string, query: PublicRoomsQuery): Promise<JsonObject> {
    const body: JsonObject = { ...(query.limit !== undefined ? { limit: query.limit } : {}), ...(query.since !== undefined ? { since: query.since } : {}) };
    if (query.searchTerm !== undefined) body.filter = { generic_search_term: query.searchTerm };
    let answer: JsonObject;
    try {
      answer = await this.deps.client.request<JsonObject>(server, { method: 'POST', path: '/_matrix/federation/v1/publicRooms', body });
    } catch (err) {
      throw toClientError(err, `Could not read the room directory of ${server}`);
    }
    // Another server's answer, passed on: only well-formed entries, no more than were asked for.
    const limit = Math.min(query.limit ?? 100, 100);
    const chunk = (Array.isArray(answer.chunk) ? answer.chunk : []).filter((entry): entry is JsonObject => typeof entry === 'object' && entry !== null && typeof (entry as JsonObject).room_id === 'string').slice(0, limit);
    const page: JsonObject = { chunk };
    for (const key of ['next_batch', 'prev_batch'] as const) if (typeof answer[key] === 'string') page[key] = answer[key];
    if (typeof answer.total_room_count_estimate === 'number') page.total_room_count_estimate = answer.total_room_count_estimate;
    return page;
  }

  async profile(userId: string, field?: 'displayname' | 'avatar_url'): Promise<JsonObject | undefined> {
    try {
      const query = `user_id=${encodeURIComponent(userId)}${field ? `&field=${field}` : ''}`;
      const answer = await this.deps.client.request<JsonObject>(domainOf(userId), { method: 'GET', path: `/_matrix/federation/v1/query/profile?${query}` });
      const profile: JsonObject = {};
      if (typeof answer.displayname === 'string') profile.displayname = answer.displayname;
      if (typeof answer.avatar_url === 'string') profile.avatar_url = answer.avatar_url;
      return profile;
    } catch {
      return undefined;
    }
  }

  private candidates(servers: readonly string[]): string[] {
    return [...new Set(servers)].filter((server) => server !== this.deps.signer.serverName);
  }

  /**
   * PUT send_join or send_leave: v2, or v1 (its answer wrapped in [200, ...]) where the server
   * does not know v2, as Synapse falls back (old servers, SyTest's fake server).
   */
  private async sendMembershipEvent<T>(server: string, kind: 'send_join' | 'send_leave', roomId: string, eventId: string, body: JsonObject, timeoutMs?: number): Promise<T> {
    const path = (api: string) => `/_matrix/federation/${api}/${kind}/${encodeURIComponent(roomId)}/${encodeURIComponent(eventId)}`;
    const request = (api: string) => this.deps.client.request<unknown>(server, { method: 'PUT', path: path(api), body, ...(timeoutMs !== undefined ? { timeoutMs } : {}) });
    try {
      return (await request('v2')) as T;
    } catch (err) {
      if (!isUnknownEndpoint(err)) throw err;
      return unwrapV1(await request('v1')) as T;
    }
  }

  /** Fills in a make_ template with our content and time, then hashes and signs it. */
  private sign(template: Pdu, version: RoomVersion, content: JsonObject): { pdu: Pdu; eventId: string } {
    const draft: UnsignedPdu = {
      room_id: template.room_id,
      sender: template.sender,
      type: 'm.room.member',
      state_key: template.state_key,
      content,
      origin_server_ts: this.deps.clock.now(),
      depth: template.depth,
      prev_events: template.prev_events,
      auth_events: template.auth_events,
      // v1/v2: the hashes the template's pairs carried (the event id is ours to make).
      ...(template[V1_REFERENCE_HASHES] !== undefined ? { [V1_REFERENCE_HASHES]: template[V1_REFERENCE_HASHES] } : {}),
    };
    return finishPdu(draft, version, this.deps.signer);
  }
}

/** Stripped state events as another server sent them, bounded and reduced to their four keys. */
export function strippedList(value: unknown): JsonObject[] {
  return (Array.isArray(value) ? value : [])
    .filter((entry): entry is JsonObject => typeof entry === 'object' && entry !== null && typeof (entry as JsonObject).type === 'string')
    .slice(0, 50)
    .map((entry) => ({ type: entry.type, state_key: typeof entry.state_key === 'string' ? entry.state_key : '', sender: entry.sender, content: typeof entry.content === 'object' && entry.content !== null ? entry.content : {} }));
}

/**
 * Whether a server's refusal means it does not serve the endpoint at all (as Synapse reads it):
 * 404 or 405 without a Matrix error or with M_UNRECOGNIZED, or 400 M_UNRECOGNIZED.
 */
function isUnknownEndpoint(err: unknown): boolean {
  if (!(err instanceof FederationError) || err.status === undefined) return false;
  if (err.status === 404 || err.status === 405) return err.errcode === undefined || err.errcode === 'M_UNRECOGNIZED';
  return err.status === 400 && err.errcode === 'M_UNRECOGNIZED';
}

/** The body of a v1 answer `[200, {...}]` (MSC1802 dropped the wrapper in v2). */
function unwrapV1(answer: unknown): JsonObject {
  const body = Array.isArray(answer) && answer.length === 2 ? answer[1] : answer;
  return typeof body === 'object' && body !== null && !Array.isArray(body) ? (body as JsonObject) : {};
}

function versionOf(value: unknown): RoomVersion {
  const id = typeof value === 'string' ? value : '1';
  const version = roomVersion(id);
  if (!version) throw new MatrixError('M_UNSUPPORTED_ROOM_VERSION', `Room version ${id} is not supported here`);
  return version;
}

/**
 * A make_ template, checked to be for this room and user, in the server's form (v1/v2 rooms:
 * the `[event_id, hashes]` pairs become ids, their hashes kept aside).
 */
export function templateOf(raw: unknown, roomId: string, userId: string, version: RoomVersion): Pdu {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new JoinRefused('the template is not an object');
  const template = raw as Pdu;
  if (template.room_id !== roomId || template.sender !== userId || template.state_key !== userId || template.type !== 'm.room.member') {
    throw new JoinRefused('the template is for another room or user');
  }
  const v1 = version.eventFormat === 'v1';
  // A server that names no version means version 1 (make_join's default); some such servers send
  // bare ids all the same (SyTest's rooms of unknown versions): signed and sent back bare, as they
  // came, and the create event in send_join's answer decides whether the room is what it was said to be.
  // Those bare ids are of the later form (no server part), so they are held only to being ids.
  let bare = false;
  if (v1) {
    for (const key of ['prev_events', 'auth_events'] as const) {
      const list: unknown = template[key];
      if (Array.isArray(list) && list.some((item: unknown) => typeof item === 'string')) bare = true;
      if (Array.isArray(list)) template[key] = list.map((item: unknown) => (typeof item === 'string' ? [item, {}] : item)) as unknown as string[];
    }
  }
  const bareIdOk = (item: unknown) => Array.isArray(item) && typeof item[0] === 'string' && item[0].startsWith('$') && item[0].length <= 255;
  const wellFormed = (value: unknown) =>
    Array.isArray(value) &&
    value.length <= 20 &&
    (v1 ? (bare ? value.every(bareIdOk) : referencesProblem(value) === undefined) : value.every((id) => typeof id === 'string'));
  if (!wellFormed(template.prev_events) || !wellFormed(template.auth_events) || !Number.isSafeInteger(template.depth)) throw new JoinRefused('the template is malformed');
  if (typeof template.content !== 'object' || template.content === null) template.content = {};
  const pdu = pduFromWire(template, version) as Pdu;
  if (bare) pdu[V1_REFERENCE_HASHES] = { ...BARE_REFERENCES };
  return pdu;
}

/** What a client is told when another server refused or could not be reached. */
function toClientError(err: unknown, fallback: string): MatrixError {
  if (err instanceof MatrixError) return err;
  if (err instanceof FederationError && err.status !== undefined && err.status < 500) {
    const errcode = err.errcode;
    const body = err.body as { error?: unknown } | undefined;
    const message = typeof body?.error === 'string' ? body.error.slice(0, 1000) : err.message;
    // Kept from their answer, as Synapse passes it on: the room version a make_join was refused for.
    const roomVersionId = (err.body as { room_version?: unknown } | undefined)?.room_version;
    const extra = errcode === 'M_INCOMPATIBLE_ROOM_VERSION' && typeof roomVersionId === 'string' && roomVersionId.length <= 64 ? { room_version: roomVersionId } : {};
    if (errcode !== undefined && errcode in ERRCODE_STATUS) return new MatrixError(errcode as Errcode, message, { status: err.status, extra });
    // An errcode of theirs we do not know is passed on as it is (bounded, well-formed), not as M_UNKNOWN.
    if (errcode !== undefined && /^[A-Z][A-Z0-9_]{0,63}$/.test(errcode)) return new MatrixError('M_UNKNOWN', message, { status: err.status, extra: { ...extra, errcode } });
    return new MatrixError('M_UNKNOWN', message, { status: err.status });
  }
  if (err instanceof JoinRefused) return new MatrixError('M_UNKNOWN', `${fallback}: ${err.message}`, { status: 502 });
  const detail = err instanceof Error ? `: ${err.message}` : '';
  return new MatrixError('M_UNKNOWN', `${fallback}${detail}`, { status: 502 });
}
